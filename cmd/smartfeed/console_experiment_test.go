package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	engagementv1 "github.com/smartfeed/smartfeed/proto/engagement/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/worker"
)

// TestConsoleExperimentTable: the console's feed page shows, from the process's own counters,
// each experiment arm with the model scoring it and its share of users, and the engagement
// the worker applied for the arm: impressions, engagements, rate and its Wilson 95% interval.
func TestConsoleExperimentTable(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis and Chromium and runs every service; skipped with -short")
	}
	chrome := testenv.Chromium(t)
	m := worker.DefaultWeights().Model()
	m.Name, m.Version = "learned", 4
	model, err := engagement.WriteModel(t.TempDir(), m)
	if err != nil {
		t.Fatal(err)
	}
	a, conn := startAllWith(t, func(c *config.Config) {
		c.Engagement.ModelFile, c.Engagement.LearnedPercent = model, 30
	})
	ctx := t.Context()
	g, e := graphv1.NewGraphServiceClient(conn), engagementv1.NewEngagementServiceClient(conn)
	ann, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "ann", Email: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "bob", Email: "bob@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ann.Id, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var events []*engagementv1.Event
	for i := range 3 {
		p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id,
			ImageUrl: fmt.Sprintf("https://i.example.com/%d.jpg", i)})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, &engagementv1.Event{Action: engagementv1.Action_ACTION_IMPRESSION, PinId: p.Id, Position: uint32(i)})
		if i == 0 {
			events = append(events, &engagementv1.Event{Action: engagementv1.Action_ACTION_CLICK, PinId: p.Id})
		}
	}
	r, err := e.Report(ctx, &engagementv1.ReportRequest{UserId: bob.Id, RequestId: "console-1", Events: events})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, browserWait, "the worker's engagement counters", func() bool {
		return gatherSum(a.reg, "smartfeed_engagement_events_total") == int64(len(events))
	})

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, browserOptions(t, chrome)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	nctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(nctx, chromedp.Navigate("http://"+a.adminAddr()+"/console/#feed")); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	const rowsJS = `[...document.querySelectorAll('#exp-arms tbody tr')].map(tr => [...tr.cells].map(c => c.textContent))`
	var got [][]string
	waitFor(t, browserWait, "the experiment table", func() bool {
		got = evalJS[[][]string](t, bctx, rowsJS)
		return len(got) == 2
	})
	pct := func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }
	rate, lo, hi := engagement.Wilson(1, 3)
	row := func(arm, model, users string) []string {
		if arm != r.GetArm() {
			return []string{arm, model, users, "0", "0", "–", "–"}
		}
		return []string{arm, model, users, "3", "1", pct(rate), pct(lo) + " – " + pct(hi)}
	}
	want := [][]string{row("default", "weights", "70%"), row("learned", "learned@v4", "30%")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("experiment table (-want +got):\n%s", diff)
	}
}
