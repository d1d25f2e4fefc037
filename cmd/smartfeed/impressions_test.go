package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestGetFeedLogsImpressions: a page GetFeed serves becomes impression rows in the engagement
// log, one per served pin at its position on the page, with the fresh status; the same page
// served again (a retry) is applied once: the worker's impression count stays at one per pin.
func TestGetFeedLogsImpressions(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis and runs every service; skipped with -short")
	}
	a, conn := startAll(t)
	ctx := t.Context()
	g, f := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn)
	mk := func(name string) *graphv1.User {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ann, bob := mk("ann"), mk("bob")
	if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: bob.Id, TargetId: ann.Id}); err != nil {
		t.Fatal(err)
	}
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ann.Id, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	for i := range n {
		if _, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id,
			ImageUrl: "https://i.example.com/" + string(rune('a'+i)) + ".jpg"}); err != nil {
			t.Fatal(err)
		}
	}
	// Every pin in bob's pool before his first page, so that one page serves them all.
	waitFor(t, 20*time.Second, "ann's pins in bob's pool", func() bool {
		size, err := a.pools.Size(ctx, zen.ID(bob.Id), zen.SourceFollowing)
		return err == nil && size == n
	})
	page := func() *feedv1.GetFeedResponse {
		t.Helper()
		r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.Id, PageSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := page()
	if len(first.GetItems()) != n {
		t.Fatalf("bob's first page has %d pins, want %d: %v", len(first.GetItems()), n, first.GetItems())
	}
	type shown struct {
		Position int
		Fresh    bool
	}
	want := map[uint64]shown{}
	for i, it := range first.GetItems() {
		want[it.GetPinId()] = shown{Position: i, Fresh: it.GetFresh()}
	}
	store, err := a.engagementStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows := func() map[uint64]shown {
		got := map[uint64]shown{}
		if err := store.ScanLog(ctx, func(r engagement.LogRow) error {
			if r.User == bob.Id {
				got[r.Pin] = shown{Position: r.Position, Fresh: r.Fresh}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	waitFor(t, 20*time.Second, "bob's impression rows", func() bool { return len(rows()) >= n })
	if diff := cmp.Diff(want, rows()); diff != "" {
		t.Errorf("impression rows (-served +logged):\n%s", diff)
	}
	applied := func() int64 { return gatherSum(a.reg, "smartfeed_engagement_events_total") }
	if got := applied(); got != n {
		t.Errorf("the worker applied %d impressions of one page of %d", got, n)
	}
	// The same page again (the pools are empty: the feed as it stands), then a settled queue.
	again := page()
	if diff := cmp.Diff(pinIDs(first), pinIDs(again)); diff != "" {
		t.Fatalf("the second page is not the same page (-first +second):\n%s", diff)
	}
	waitFor(t, 20*time.Second, "the second page's impressions handed to pinlater", func() bool {
		return gatherSum(a.reg, "smartfeed_impressions_logged_total")+gatherSum(a.reg, "smartfeed_impressions_duplicate_total") >= 2*n
	})
	waitFor(t, 20*time.Second, "an empty default queue", func() bool {
		st, err := a.pinAdmin.Queue(ctx, pinlater.QueueDefault)
		return err == nil && st.Pending+st.Active+st.Scheduled+st.Retry == 0
	})
	if got := applied(); got != n {
		t.Errorf("after the same page twice, the worker applied %d impressions, want %d", got, n)
	}
	if diff := cmp.Diff(want, rows()); diff != "" {
		t.Errorf("impression rows after the retry (-served +logged):\n%s", diff)
	}
	if d := gatherSum(a.reg, "smartfeed_impressions_dropped_total"); d != 0 {
		t.Errorf("%d impressions dropped", d)
	}
}

func pinIDs(r *feedv1.GetFeedResponse) []uint64 {
	var out []uint64
	for _, it := range r.GetItems() {
		out = append(out, it.GetPinId())
	}
	return out
}
