package main

import (
	"bytes"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/internal/demo"
	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestDemoBounded runs the demo twice for a few seconds on a small graph: the first run builds
// the graph, streams events through the worker and serves feeds with fresh pins; the second
// reuses the graph and the data left by the first.
func TestDemoBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: needs Redis; run make test")
	}
	redis, ns := testenv.RedisNamespace(t, "demotest")
	dir := t.TempDir()
	args := func(d string) []string {
		return []string{"demo", "--duration", d, "--data-dir", dir, "--redis-addr", redis,
			"--redis-namespace", ns,
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-grpc-addr", "127.0.0.1:0", "--demo-users", "60",
			"--demo-follows", "10", "--demo-events-per-sec", "40", "--demo-reads-per-sec", "40"}
	}
	var out bytes.Buffer
	if err := run(t.Context(), args("6s"), &out, io.Discard); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	first := out.String()
	for _, want := range []string{"graph: built 60 users", "pinlater fanout → worker", "smartfeed.feed.v1.FeedService/GetFeed", "summary:", "stopped cleanly"} {
		if !strings.Contains(first, want) {
			t.Errorf("first run output lacks %q:\n%s", want, first)
		}
	}
	if !regexp.MustCompile(`summary: .*lag p99 [0-9.]+m?s\)`).MatchString(first) {
		t.Errorf("the summary line has no fanout lag p99:\n%s", first)
	}
	sum := summaryNumbers(t, first)
	if sum["events"] == 0 || sum["GetFeed"] == 0 || sum["pool inserts"] == 0 || sum["fresh pins"] == 0 {
		t.Errorf("first run: %v, want events, pool inserts, reads and fresh pins all above 0:\n%s", sum, first)
	}

	out.Reset()
	if err := run(t.Context(), args("3s"), &out, io.Discard); err != nil {
		t.Fatalf("second demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "graph: reusing 60 users") {
		t.Errorf("second run did not reuse the graph:\n%s", out.String())
	}
}

// summaryNumbers reads the counters of the summary line.
func summaryNumbers(t *testing.T, out string) map[string]int {
	t.Helper()
	i := strings.Index(out, "summary:")
	if i < 0 {
		t.Fatalf("no summary line:\n%s", out)
	}
	line := out[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	got := map[string]int{}
	for _, name := range []string{"events", "pool inserts", "GetFeed", "generator timeouts", "fresh pins"} {
		m := regexp.MustCompile(regexp.QuoteMeta(name) + ` (\d+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("summary lacks %q: %s", name, line)
		}
		got[name], _ = strconv.Atoi(m[1])
	}
	return got
}

func TestDemoRefusesBadFlags(t *testing.T) {
	for _, a := range [][]string{
		{"demo", "--demo-users", "1"},
		{"demo", "--demo-events-per-sec", "0"},
		{"demo", "--duration", "-1s"},
	} {
		if err := run(t.Context(), a, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", a)
		}
	}
}

// loadDemoGraph reads the demo's graph (demo.LoadGraph), for the load tests that reuse it.
func loadDemoGraph(dir string) (demo.Graph, bool, error) { return demo.LoadGraph(dir) }
