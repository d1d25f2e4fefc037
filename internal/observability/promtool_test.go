package observability

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promtool returns the path of the pinned promtool, building it into bin/tools/ on first use
// (scripts/promtool.sh; minutes the first time, nothing after). With -short and no promtool
// built yet, the test is skipped instead.
func promtool(t *testing.T) string {
	t.Helper()
	script := filepath.Join(root, "scripts", "promtool.sh")
	if testing.Short() {
		if m, _ := filepath.Glob(filepath.Join(root, "bin", "tools", "promtool-*", "promtool")); len(m) == 0 {
			t.Skip("-short: promtool not built yet (scripts/promtool.sh builds it)")
		}
	}
	start := time.Now()
	cmd := exec.Command(script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/promtool.sh: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("promtool built in %v", d.Round(time.Second))
	}
	return strings.TrimSpace(string(out))
}

// TestPromtool runs promtool check rules on the chart's rules file and promtool test rules on
// its unit tests (testdata/rules_test.yaml): each alert fires on the input it is for, and the
// availability burn-rate alerts fire at 0.1% errors and stay silent at 0.001%.
func TestPromtool(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Join(root, RulesFile)},
		{"test", "rules", filepath.Join("testdata", "rules_test.yaml")},
	} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestEveryAlertTestedAndDocumented checks that each alert of the rules file has a promtool
// test that expects it to fire, links its runbook entry, and that docs/operations.md has that
// entry (a heading named after the alert).
func TestEveryAlertTestedAndDocumented(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(root, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 10 {
		t.Fatalf("found %d alerts in %s", len(alerts), RulesFile)
	}
	for _, a := range alerts {
		name := a[1]
		firing := regexp.MustCompile(`alertname: ` + name + `\n\s+exp_alerts:\n\s+- exp_labels`)
		if !firing.Match(tests) {
			t.Errorf("%s: no promtool test expects it to fire (testdata/rules_test.yaml)", name)
		}
		if !strings.Contains(string(rules), "runbook: docs/operations.md#"+strings.ToLower(name)+"\n") {
			t.Errorf("%s: no runbook annotation docs/operations.md#%s", name, strings.ToLower(name))
		}
		if !regexp.MustCompile(`(?m)^#### ` + name + `$`).Match(docs) {
			t.Errorf("%s: docs/operations.md has no runbook entry (a heading \"#### %s\")", name, name)
		}
	}
}

// TestDashboardQueriesParse has promtool parse every dashboard expression: each becomes a
// recording rule of a throwaway rules file (Grafana's $__rate_interval as 5m, $namespace as
// .*), which promtool check rules must accept.
func TestDashboardQueriesParse(t *testing.T) {
	pt := promtool(t)
	exprs, err := DashboardExprs(root)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, e := range exprs {
		q := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*").Replace(e.Query)
		fmt.Fprintf(&b, "      # %s\n      - record: dashboard:expr%d\n        expr: %s\n", e.Where, i, strconv.Quote(q))
	}
	file := filepath.Join(t.TempDir(), "dashboards.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboards' %d expressions: %v\n%s", len(exprs), err, out)
	}
}
