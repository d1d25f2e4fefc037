package main

import (
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/internal/observability"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// descName reads a family's name out of a Desc's String ("Desc{fqName: \"x\", ...").
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredFamilies returns the name of every family registered in reg, including labelled
// families that have no series yet (they appear in /metrics on their first event).
func registeredFamilies(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	out := map[string]bool{}
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// exposedSeries returns the series names a scrape of /metrics shows: each family's name, and
// for a histogram its _bucket, _sum and _count.
func exposedSeries(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, f := range fams {
		out[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	return out
}

// TestObservabilityMetricsExist checks every PromQL expression of the chart's rules and
// dashboards against a running server (role all): each metric it names is in the server's
// /metrics, or is a family the server registered that has no series before its first event
// (a failed task, a shed call); the test lists those. Recorded series (with colons) must be
// recorded by a rule (internal/observability's TestRuleExprs).
func TestObservabilityMetricsExist(t *testing.T) {
	a, conn := startAll(t)
	// One pin and one page, so the labelled families of the write and read paths have series.
	ctx := t.Context()
	g := graphv1.NewGraphServiceClient(conn)
	ann, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "ann", Email: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ann.Id, Name: "kitchens"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id, ImageUrl: "https://i.example.com/a.jpg"}); err != nil {
		t.Fatal(err)
	}
	if _, err := feedv1.NewFeedServiceClient(conn).GetFeed(ctx, &feedv1.GetFeedRequest{UserId: ann.Id}); err != nil {
		t.Fatal(err)
	}
	code, fams, _ := scrape(t, a)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", code)
	}
	exposed := exposedSeries(fams)
	registered := registeredFamilies(t, a.reg)
	rules, _, err := observability.RuleExprs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dash, err := observability.DashboardExprs("../..")
	if err != nil {
		t.Fatal(err)
	}
	notYet := map[string]bool{}
	checked := 0
	for _, e := range append(rules, dash...) {
		for _, m := range observability.MetricNames(e.Query) {
			if strings.Contains(m, ":") {
				continue
			}
			checked++
			if exposed[m] {
				continue
			}
			base := m
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, s)
			}
			if registered[m] || registered[base] {
				notYet[m] = true
				continue
			}
			t.Errorf("%s: %s is not a metric of the server (not in /metrics, not registered)", e.Where, m)
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d metric names: the expressions were not read", checked)
	}
	names := make([]string, 0, len(notYet))
	for m := range notYet {
		names = append(names, m)
	}
	sort.Strings(names)
	t.Logf("%d metric names checked; registered, no series before their first event: %s", checked, strings.Join(names, ", "))
}
