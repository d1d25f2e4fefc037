package observability

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the chart's dashboard JSON from Dashboards()")

// root is the repository's root, from this package's directory.
const root = "../.."

// TestDashboardsUpToDate fails when the JSON the chart ships differs from Dashboards(); with
// -update it rewrites the files (go test ./internal/observability -run TestDashboardsUpToDate -update).
func TestDashboardsUpToDate(t *testing.T) {
	dir := filepath.Join(root, DashboardsDir)
	want := map[string]bool{}
	for name, d := range Dashboards() {
		want[name] = true
		b, err := Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/observability -run TestDashboardsUpToDate -update)", err)
		}
		if diff := cmp.Diff(string(b), string(got)); diff != "" {
			t.Errorf("%s is stale (-generated +file); run go test ./internal/observability -run TestDashboardsUpToDate -update:\n%s", name, diff)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		if !want[filepath.Base(f)] {
			t.Errorf("%s is not one of Dashboards(): remove it", f)
		}
	}
}

// TestMetricNames checks the name reader on the shapes the rules and dashboards use.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{`sum by (le) (rate(smartfeed_feed_request_seconds_bucket{namespace=~"$namespace"}[$__rate_interval]))`, []string{"smartfeed_feed_request_seconds_bucket"}},
		{`smartfeed:getfeed_errors:ratio_rate1h > (14.4 * 0.0001) and smartfeed:getfeed_errors:ratio_rate5m > 1`, []string{"smartfeed:getfeed_errors:ratio_rate1h", "smartfeed:getfeed_errors:ratio_rate5m"}},
		{`max by (queue) (pinlater_queue_size{state="smartfeed_not_a_metric"}) + go_goroutines`, []string{"go_goroutines", "pinlater_queue_size"}},
		{`rate(gohbase_operation_duration_seconds_count{result="error"}[5m])`, []string{"gohbase_operation_duration_seconds_count"}},
		{`vector(0.25)`, []string{}},
	} {
		if diff := cmp.Diff(tc.want, MetricNames(tc.q)); diff != "" {
			t.Errorf("MetricNames(%q) (-want +got):\n%s", tc.q, diff)
		}
	}
}

// TestRuleExprs checks that the rules file reads into expressions, none empty, and that every
// recorded series an expression uses is recorded by a rule.
func TestRuleExprs(t *testing.T) {
	exprs, records, err := RuleExprs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 20 || len(records) < 10 {
		t.Fatalf("read %d expressions and %d recording rules: the reader lost some", len(exprs), len(records))
	}
	recorded := map[string]bool{}
	for _, r := range records {
		recorded[r] = true
	}
	dash, err := DashboardExprs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(exprs, dash...) {
		if len(MetricNames(e.Query)) == 0 && e.Query != "vector(0.25)" {
			t.Errorf("%s: %q names no metric", e.Where, e.Query)
		}
		for _, m := range MetricNames(e.Query) {
			if filepath.Base(m) != m || (containsColon(m) && !recorded[m]) {
				t.Errorf("%s: %s is recorded by no rule", e.Where, m)
			}
		}
	}
}

func containsColon(s string) bool {
	for _, c := range s {
		if c == ':' {
			return true
		}
	}
	return false
}
