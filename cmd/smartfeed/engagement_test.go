package main

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	engagementv1 "github.com/smartfeed/smartfeed/proto/engagement/v1"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestHideHonouredInNextPage: a pin bob hid through EngagementService.Report is gone from his
// very next page, materialized pages included, and the pins of its author still in his pools
// are passed over, while a pin of another author is served; a batch over the maximum is
// InvalidArgument.
func TestHideHonouredInNextPage(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis and runs every service; skipped with -short")
	}
	_, conn := startAll(t)
	ctx := t.Context()
	g, f, e := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn), engagementv1.NewEngagementServiceClient(conn)
	mk := func(name string) *graphv1.User {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ann, cid, bob := mk("ann"), mk("cid"), mk("bob")
	pinsOf := func(author *graphv1.User, n int) []uint64 {
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: bob.Id, TargetId: author.Id}); err != nil {
			t.Fatal(err)
		}
		board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: author.Id, Name: "b"})
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for i := range n {
			p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: author.Id, BoardId: board.Id,
				ImageUrl: "https://i.example.com/" + author.GetUsername() + string(rune('a'+i)) + ".jpg"})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.Id)
		}
		return out
	}
	annPins := pinsOf(ann, 1)
	// bob's first page shows ann's pin (and materializes it).
	page := func() map[uint64]bool {
		r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.Id, PageSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64]bool{}
		for _, it := range r.GetItems() {
			got[it.GetPinId()] = true
		}
		return got
	}
	deadline := time.Now().Add(15 * time.Second)
	for !page()[annPins[0]] {
		if time.Now().After(deadline) {
			t.Fatal("ann's pin never reached bob's feed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := e.Report(ctx, &engagementv1.ReportRequest{UserId: bob.Id, RequestId: "hide-1", Events: []*engagementv1.Event{
		{Action: engagementv1.Action_ACTION_IMPRESSION, PinId: annPins[0], Position: 0, Fresh: true},
		{Action: engagementv1.Action_ACTION_HIDE, PinId: annPins[0]},
	}})
	if err != nil || r.GetAccepted() != 2 {
		t.Fatalf("Report: %v, %v", r, err)
	}
	if got := page(); got[annPins[0]] {
		t.Errorf("the next page still shows the hidden pin %d: %v", annPins[0], got)
	}
	// ann's next pins (in bob's pools) are passed over; cid's are served.
	more, cidPins := pinsOf(ann, 2), pinsOf(cid, 1)
	deadline = time.Now().Add(15 * time.Second)
	seen := map[uint64]bool{}
	for !seen[cidPins[0]] {
		if time.Now().After(deadline) {
			t.Fatal("cid's pin never reached bob's feed")
		}
		for p := range page() {
			seen[p] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range append(more, annPins...) {
		if seen[p] {
			t.Errorf("bob was served pin %d of the author whose pin he hid", p)
		}
	}
	big := make([]*engagementv1.Event, 501)
	for i := range big {
		big[i] = &engagementv1.Event{Action: engagementv1.Action_ACTION_IMPRESSION, PinId: cidPins[0]}
	}
	if _, err := e.Report(ctx, &engagementv1.ReportRequest{UserId: bob.Id, RequestId: "big", Events: big}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a batch of 501 events: %v, want InvalidArgument", err)
	}
}

// TestHideHonouredInPreparedChunk: a pin of a chunk prepared for bob's next visit, which bob
// hides before that visit, is left out when the prepared chunk is served.
func TestHideHonouredInPreparedChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis and runs every service; skipped with -short")
	}
	// The preparation after bob's page tries three times, feed.prepare_after apart, before it
	// takes his pools as empty: 2 s apart, ann's later pins have 6 s to be fanned out to him on
	// a loaded machine (500 ms apart they had 1.5 s). The generator gets the time a loaded
	// machine needs too, or the preparation fails rather than waits.
	a, conn := startAllWith(t, func(c *config.Config) {
		c.Feed.PrepareAfter = jsontime.Duration(2 * time.Second)
		c.Feed.PrepareReturning = false // bob's one page prepares
		c.Feed.GeneratorDeadline = jsontime.Duration(5 * time.Second)
	})
	ctx := t.Context()
	g, f, e := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn), engagementv1.NewEngagementServiceClient(conn)
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
	pin := func(i int) uint64 {
		p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id,
			ImageUrl: "https://i.example.com/" + string(rune('a'+i)) + ".jpg"})
		if err != nil {
			t.Fatal(err)
		}
		return p.Id
	}
	page := func() map[uint64]bool {
		r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.Id, PageSize: 50})
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64]bool{}
		for _, it := range r.GetItems() {
			got[it.GetPinId()] = true
		}
		return got
	}
	first := pin(0)
	deadline := time.Now().Add(15 * time.Second)
	for !page()[first] {
		if time.Now().After(deadline) {
			t.Fatal("ann's first pin never reached bob's feed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 1; i <= 3; i++ {
		pin(i)
	}
	// Wait for a chunk prepared for bob's next visit.
	var prepared []zen.ID
	for deadline := time.Now().Add(20 * time.Second); len(prepared) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no chunk was prepared for bob")
		}
		rows, err := scanFeed(ctx, a.feedPrimary, zen.ID(bob.Id))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Prepared {
				prepared = append(prepared, r.Pins...)
			}
		}
	}
	hidden := uint64(prepared[0])
	if _, err := e.Report(ctx, &engagementv1.ReportRequest{UserId: bob.Id, RequestId: "hide-prepared", Events: []*engagementv1.Event{
		{Action: engagementv1.Action_ACTION_HIDE, PinId: hidden},
	}}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the visit that serves the prepared chunk, and later ones
		if got := page(); got[hidden] {
			t.Fatalf("bob was served pin %d of his prepared chunk after hiding it", hidden)
		}
		time.Sleep(600 * time.Millisecond) // past feed.min_chunk_interval's 1s over the loop
	}
}
