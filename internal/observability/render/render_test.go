package render

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/internal/observability"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

func TestRateInterval(t *testing.T) {
	for _, tc := range []struct {
		step, scrape, want time.Duration
	}{
		{5 * time.Second, 5 * time.Second, 20 * time.Second},   // four scrapes
		{time.Minute, 15 * time.Second, 75 * time.Second},      // step + scrape
		{15 * time.Second, 15 * time.Second, time.Minute},      // four scrapes
		{2 * time.Minute, 30 * time.Second, 150 * time.Second}, // step + scrape
	} {
		if got := RateInterval(tc.step, tc.scrape); got != tc.want {
			t.Errorf("RateInterval(%v, %v) = %v, want %v", tc.step, tc.scrape, got, tc.want)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := QueryVars("demo", 5*time.Second, 5*time.Second)
	for _, tc := range []struct {
		expr, want, err string
	}{
		{`rate(x{namespace=~"$namespace"}[$__rate_interval])`, `rate(x{namespace=~"demo"}[20s])`, ""},
		{`rate(x{namespace=~"${namespace}"}[${__rate_interval}])`, `rate(x{namespace=~"demo"}[20s])`, ""},
		{`x{namespace=~"${namespace:regex}"}`, `x{namespace=~"demo"}`, ""},
		{`x{namespace=~"[[namespace]]"}`, `x{namespace=~"demo"}`, ""},
		{`avg_over_time(x[$__interval])`, `avg_over_time(x[5s])`, ""},
		{`x{job=~"api$"}`, `x{job=~"api$"}`, ""}, // a regex anchor is no variable
		{`x{cluster="$cluster"} + y{region="${region}"}`, "", `no value for variable "cluster, region"`},
	} {
		got, err := Substitute(tc.expr, vars)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Substitute(%q): error %v, want one containing %q", tc.expr, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Substitute(%q) = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
}

func TestLegend(t *testing.T) {
	labels := map[string]string{"__name__": "up", "queue": "fanout", "state": "pending"}
	for _, tc := range []struct{ format, want string }{
		{"{{queue}} {{state}}", "fanout pending"},
		{"{{ queue }}", "fanout"},
		{"hedged: {{reason}}", "hedged: "},
		{"p99", "p99"},
		{"", `{__name__="up", queue="fanout", state="pending"}`},
	} {
		if got := Legend(tc.format, labels); got != tc.want {
			t.Errorf("Legend(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}

// plans reads the chart's dashboards (the JSON it ships) and plans each with the variables of a
// 5 s step and scrape in namespace demo.
func plans(t *testing.T) map[string][]Panel {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, observability.DashboardsDir, "*.json"))
	if err != nil || len(files) != len(observability.Dashboards()) {
		t.Fatalf("found %d dashboard files (%v), want %d", len(files), err, len(observability.Dashboards()))
	}
	out := map[string][]Panel{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d observability.Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		panels, err := Plan(d, QueryVars("demo", 5*time.Second, 5*time.Second))
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		out[filepath.Base(f)] = panels
	}
	return out
}

// TestPlanChartDashboards plans the dashboards the chart ships: every panel but the row headers
// has queries, every target of the JSON becomes one query in order, with its legend, and no
// variable is left for Prometheus to choke on.
func TestPlanChartDashboards(t *testing.T) {
	exprs, err := observability.DashboardExprs(root)
	if err != nil {
		t.Fatal(err)
	}
	var wantQueries, gotQueries []string
	for _, e := range exprs {
		wantQueries = append(wantQueries, strings.NewReplacer(`"$namespace"`, `"demo"`, "$__rate_interval", "20s").Replace(e.Query))
	}
	all := plans(t)
	for _, name := range sortedKeys(all) {
		gen := observability.Dashboards()[name]
		panels := all[name]
		if len(panels) != len(gen.Panels) {
			t.Fatalf("%s: planned %d panels, the dashboard has %d", name, len(panels), len(gen.Panels))
		}
		for i, p := range panels {
			g := gen.Panels[i]
			if p.Title != g.Title || p.Type != g.Type || p.Grid != g.GridPos {
				t.Errorf("%s panel %d: planned %q %s at %+v, want %q %s at %+v", name, i, p.Title, p.Type, p.Grid, g.Title, g.Type, g.GridPos)
			}
			if (p.Type == "row") != (len(p.Queries) == 0) {
				t.Errorf("%s panel %q (%s): %d queries", name, p.Title, p.Type, len(p.Queries))
			}
			if p.Type != "row" && p.Unit == "" {
				t.Errorf("%s panel %q: no unit", name, p.Title)
			}
			for j, q := range p.Queries {
				gotQueries = append(gotQueries, q.Expr)
				if varRef.MatchString(q.Expr) {
					t.Errorf("%s panel %q: a variable is left in %q", name, p.Title, q.Expr)
				}
				if q.Legend != g.Targets[j].LegendFormat {
					t.Errorf("%s panel %q query %d: legend %q, want %q", name, p.Title, j, q.Legend, g.Targets[j].LegendFormat)
				}
			}
		}
	}
	if diff := cmp.Diff(wantQueries, gotQueries); diff != "" {
		t.Errorf("planned queries (-want +got):\n%s", diff)
	}
}

func sortedKeys(m map[string][]Panel) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// promtool is the promtool that parses the planned queries: the one beside the Prometheus the
// renderer queries (Debian's, which scripts/dashboards-render.sh installs), else the pinned one
// (scripts/promtool.sh, built into bin/tools/ on first use; skipped with -short when not built).
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if testing.Short() {
		if m, _ := filepath.Glob(filepath.Join(root, "bin", "tools", "promtool-*", "promtool")); len(m) == 0 {
			t.Skip("-short: no promtool (scripts/promtool.sh builds it)")
		}
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "promtool.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/promtool.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestPlannedQueriesParse has promtool parse every query as the renderer sends it (variables
// substituted): each becomes a recording rule of a throwaway rules file.
func TestPlannedQueriesParse(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n  - name: render\n    rules:\n")
	n := 0
	all := plans(t)
	for _, name := range sortedKeys(all) {
		for _, p := range all[name] {
			for _, q := range p.Queries {
				fmt.Fprintf(&b, "      # %s: %s\n      - record: render:query%d\n        expr: %s\n", name, p.Title, n, strconv.Quote(q.Expr))
				n++
			}
		}
	}
	file := filepath.Join(t.TempDir(), "render.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the %d planned queries: %v\n%s", n, err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%d rules found", n)) {
		t.Errorf("promtool read other than %d rules:\n%s", n, out)
	}
}

// TestQueryRange checks the HTTP exchange with a fake Prometheus: the form sent, series named by
// the legend and sorted, NaN kept (a gap, not a zero), and an error answer returned as an error.
func TestQueryRange(t *testing.T) {
	var gotForm map[string][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		gotForm = r.PostForm
		if r.URL.Path != "/api/v1/query_range" {
			t.Errorf("path %s", r.URL.Path)
		}
		if strings.HasPrefix(r.PostForm.Get("query"), "bad") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"parse error: unexpected identifier"}`)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[
			{"metric":{"queue":"fanout"},"values":[[100,"1.5"],[105,"NaN"],[110,"2"]]},
			{"metric":{"queue":"critical"},"values":[[100.5,"0"]]}]}}`)
	}))
	defer srv.Close()
	c := Client{URL: srv.URL + "/"}
	r := Range{Start: time.Unix(100, 0), End: time.Unix(160, 0), Step: 5 * time.Second}
	got, err := c.QueryRange(context.Background(), Query{Expr: `sum by (queue) (x)`, Legend: "{{queue}} ok"}, r)
	if err != nil {
		t.Fatal(err)
	}
	wantForm := map[string][]string{"query": {`sum by (queue) (x)`}, "start": {"100"}, "end": {"160"}, "step": {"5"}}
	if diff := cmp.Diff(wantForm, gotForm); diff != "" {
		t.Errorf("form (-want +got):\n%s", diff)
	}
	want := []Series{
		{Name: "critical ok", Points: []Point{{T: time.Unix(100, 5e8).UTC(), V: 0}}},
		{Name: "fanout ok", Points: []Point{{T: time.Unix(100, 0).UTC(), V: 1.5}, {T: time.Unix(105, 0).UTC(), V: math.NaN()}, {T: time.Unix(110, 0).UTC(), V: 2}}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) })); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	if _, err := c.QueryRange(context.Background(), Query{Expr: "bad query"}, r); err == nil || !strings.Contains(err.Error(), "bad_data: parse error") {
		t.Errorf("a query Prometheus rejects: error %v", err)
	}
}

func TestSegments(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	got := segments([]Point{{at(1), math.NaN()}, {at(2), 1}, {at(3), 2}, {at(4), math.NaN()}, {at(5), math.Inf(1)}, {at(6), 3}})
	if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 || got[0][1].Y != 2 || got[1][0].X != 6 {
		t.Errorf("segments = %v, want [[(2,1) (3,2)] [(6,3)]]", got)
	}
}

func TestFormatUnit(t *testing.T) {
	for _, tc := range []struct {
		unit string
		v    float64
		want string
	}{
		{"percentunit", 0.9999, "99.99%"},
		{"percentunit", 0.0032, "0.32%"},
		{"s", 0.25, "250 ms"},
		{"s", 1.5, "1.5 s"},
		{"s", 0.00002, "20 µs"},
		{"s", 0, "0 s"},
		{"bytes", 3 << 20, "3 MiB"},
		{"ops", 2500, "2.5k/s"},
		{"reqps", 40, "40/s"},
		{"short", 0.5, "0.5"},
		{"none", 1234567, "1.235M"},
	} {
		if got := formatUnit(tc.unit, tc.v, 4); got != tc.want {
			t.Errorf("formatUnit(%q, %v) = %q, want %q", tc.unit, tc.v, got, tc.want)
		}
	}
}

// TestDraw draws a planned dashboard with made-up series (one panel left empty) and checks the
// PNG's size follows the dashboard's grid.
func TestDraw(t *testing.T) {
	panels := plans(t)["smartfeed-slo.json"]
	start := time.Unix(1_800_000_000, 0)
	r := Range{Start: start, End: start.Add(4 * time.Minute), Step: 5 * time.Second}
	var results []Result
	rows := 0
	for i, p := range panels {
		res := Result{Panel: p}
		rows = max(rows, p.Grid.Y+p.Grid.H)
		if p.Type != "row" && i != 1 {
			s := Series{Name: "demo"}
			for ts := r.Start; !ts.After(r.End); ts = ts.Add(r.Step) {
				s.Points = append(s.Points, Point{T: ts, V: 0.999 + 0.001*math.Sin(float64(ts.Unix()))})
			}
			res.Series = []Series{s}
		}
		results = append(results, res)
	}
	b, err := Draw(Page{Title: "SmartFeed / SLO", Caption: Caption("smartfeed-slo.json", r), Range: r}, results)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := img.Bounds().Dx(), Width; got != want {
		t.Errorf("width %d px, want %d", got, want)
	}
	if got, want := img.Bounds().Dy(), header+rows*RowHeight+gap; got != want {
		t.Errorf("height %d px, want %d (%d grid rows)", got, want, rows)
	}
	if len(b) > 200<<10 {
		t.Errorf("PNG of %d KB: over 200 KB", len(b)>>10)
	}
}

func TestYRange(t *testing.T) {
	for _, tc := range []struct {
		lo, hi         float64
		unit           string
		wantLo, wantHi float64
	}{
		{0, 0, "short", 0, 1},
		{1, 1, "percentunit", 0, 1},
		{4, 4, "ops", 0, 5},
		{-2, -2, "short", -2.5, 0},
		{3, 9, "ops", 0, 9},
		{0.98, 1, "percentunit", 0.98, 1},
		{-1, 2, "short", -1, 2},
	} {
		lo, hi := yRange(tc.lo, tc.hi, tc.unit)
		if lo != tc.wantLo || hi != tc.wantHi {
			t.Errorf("yRange(%v, %v, %s) = [%v, %v], want [%v, %v]", tc.lo, tc.hi, tc.unit, lo, hi, tc.wantLo, tc.wantHi)
		}
	}
}

func TestTimeTicks(t *testing.T) {
	lo := float64(time.Date(2026, 12, 6, 10, 54, 36, 0, time.UTC).Unix())
	var labels []string
	for _, tk := range (timeTicks{format: "15:04:05"}).Ticks(lo, lo+302) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	want := []string{"10:55:00", "10:56:00", "10:57:00", "10:58:00", "10:59:00"}
	if diff := cmp.Diff(want, labels); diff != "" {
		t.Errorf("labels of a 5-minute range (-want +got):\n%s", diff)
	}
}
