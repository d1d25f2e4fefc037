package main

import (
	"runtime"
	"testing"

	"github.com/smartfeed/smartfeed/internal/testenv"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// TestFanoutTakesThePagesLanes: a process that serves pages and runs the worker has one set of
// background lanes (feed.background_lanes), and the fanout's deliveries take them as the
// pages' background work does. On Linux they run at feed.background_nice.
func TestFanoutTakesThePagesLanes(t *testing.T) {
	a, conn := startAll(t)
	if a.lanes == nil || a.lanes.Cap() != backgroundLanes(a.cfg) {
		t.Fatalf("the process's lanes = %v, want %d of them", a.lanes, backgroundLanes(a.cfg))
	}
	if delta, err := a.lanes.Priority(); runtime.GOOS == "linux" && (err != nil || delta != a.cfg.Feed.BackgroundNice || delta == 0) {
		t.Errorf("the lanes' priority = %d, %v; want feed.background_nice (%d)", delta, err, a.cfg.Feed.BackgroundNice)
	}
	ctx := t.Context()
	g := graphv1.NewGraphServiceClient(conn)
	ann, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "ann", Email: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "bob", Email: "bob@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: bob.Id, TargetId: ann.Id}); err != nil {
		t.Fatal(err)
	}
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ann.Id, Name: "kitchens"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id, ImageUrl: "https://i.example.com/a.jpg"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "a fanout delivery in a lane", func() bool {
		fams, err := a.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == "smartfeed_worker_lane_wait_seconds" {
				return f.GetMetric()[0].GetHistogram().GetSampleCount() > 0
			}
		}
		return false
	})
}
