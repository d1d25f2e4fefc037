// Package observability holds what the chart ships for Prometheus and Grafana, as code: the
// Grafana dashboards (built here, written as JSON into charts/smartfeed/files/dashboards/ by
// TestDashboardsUpToDate -update), and the reading of every PromQL expression in those
// dashboards and in the alerting and recording rules (charts/smartfeed/files/prometheus/rules.yaml),
// so a test can check each metric it names against a running server's /metrics.
package observability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// RulesFile and DashboardsDir are where the chart keeps the rules and the dashboards, relative
// to the repository's root.
const (
	RulesFile     = "charts/smartfeed/files/prometheus/rules.yaml"
	DashboardsDir = "charts/smartfeed/files/dashboards"
)

// Expr is one PromQL expression and where it was found.
type Expr struct {
	Where string // "rules.yaml: record smartfeed:x" or "feed-serving.json: panel \"Rate\""
	Query string
}

// RuleExprs reads the rules file (repository root root) and returns each rule's expression,
// and the names of the series its recording rules define.
func RuleExprs(root string) (exprs []Expr, records []string, err error) {
	f, err := os.Open(filepath.Join(root, RulesFile))
	if err != nil {
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	var (
		name  string
		block []string // the lines of a block scalar "expr: |"
		ind   = -1     // the block's indent, -1 when not in a block
	)
	flush := func() {
		if block != nil {
			exprs = append(exprs, Expr{Where: "rules.yaml: " + name, Query: strings.Join(block, "\n")})
			block, ind = nil, -1
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if block != nil {
			lead := len(line) - len(strings.TrimLeft(line, " "))
			if trimmed == "" || ind < 0 || lead >= ind {
				if ind < 0 && trimmed != "" {
					ind = lead
				}
				block = append(block, trimmed)
				continue
			}
			flush()
		}
		trimmed = strings.TrimPrefix(trimmed, "- ")
		switch {
		case strings.HasPrefix(trimmed, "record: "):
			name = "record " + strings.TrimPrefix(trimmed, "record: ")
			records = append(records, strings.TrimPrefix(trimmed, "record: "))
		case strings.HasPrefix(trimmed, "alert: "):
			name = "alert " + strings.TrimPrefix(trimmed, "alert: ")
		case trimmed == "expr: |":
			block, ind = []string{}, -1
		case strings.HasPrefix(trimmed, "expr: "):
			exprs = append(exprs, Expr{Where: "rules.yaml: " + name, Query: strings.TrimPrefix(trimmed, "expr: ")})
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	return exprs, records, nil
}

// DashboardExprs reads every dashboard JSON of the chart (repository root root) and returns
// each panel target's expression.
func DashboardExprs(root string) ([]Expr, error) {
	files, err := filepath.Glob(filepath.Join(root, DashboardsDir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("dashboards: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("dashboards: no JSON under %s", DashboardsDir)
	}
	var out []Expr
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("dashboards: %w", err)
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", filepath.Base(file), err)
		}
		for _, p := range d.Panels {
			for _, t := range p.Targets {
				out = append(out, Expr{Where: fmt.Sprintf("%s: panel %q", filepath.Base(file), p.Title), Query: t.Expr})
			}
		}
	}
	return out, nil
}

// metricToken is a metric name as the rules and dashboards spell them: the prefixes of the
// families the binary exports (its own, pinlater's, the HBase client's, the Go and process
// collectors'), or a recorded series (level:metric:operations, with colons).
var metricToken = regexp.MustCompile(`\b(?:smartfeed|pinlater|gohbase|go|process)_[a-zA-Z0-9_]*|\bsmartfeed:[a-zA-Z0-9_:]+`)

// stringLit matches a PromQL string literal, so label values are not read as metric names.
var stringLit = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// MetricNames returns the metric names q uses, sorted and without duplicates: raw families
// (a histogram's _bucket, _sum and _count as written) and recorded series (with colons).
func MetricNames(q string) []string {
	q = stringLit.ReplaceAllString(q, `""`)
	seen := map[string]bool{}
	for _, m := range metricToken.FindAllString(q, -1) {
		seen[m] = true
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
