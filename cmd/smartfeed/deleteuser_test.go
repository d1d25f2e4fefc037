package main

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	boardv1 "github.com/smartfeed/smartfeed/proto/board/v1"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestDeleteUserHidesWhatTheyOwn: after DeleteUser returns, the user's pins and boards are gone
// everywhere: GetObjects, ListPins of their board, and every page of a follower's feed (fresh
// chunks included); GetFeed of the deleted user, and of a user that never existed, is NotFound.
func TestDeleteUserHidesWhatTheyOwn(t *testing.T) {
	_, conn := startAll(t)
	ctx := t.Context()
	g, b, f := graphv1.NewGraphServiceClient(conn), boardv1.NewBoardServiceClient(conn), feedv1.NewFeedServiceClient(conn)
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
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ann.Id, Name: "kitchens"})
	if err != nil {
		t.Fatal(err)
	}
	var pins []uint64
	for i := range 6 {
		p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ann.Id, BoardId: board.Id,
			ImageUrl: "https://i.example.com/" + string(rune('a'+i)) + ".jpg"})
		if err != nil {
			t.Fatal(err)
		}
		pins = append(pins, p.Id)
	}
	// Let the fanout reach bob's pools: bob's first page shows a few of ann's pins fresh (and
	// leaves the rest in the pools for later pages).
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.Id, PageSize: 2})
		if err == nil && len(r.GetItems()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ann's pins never reached bob's feed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := g.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: ann.Id}); err != nil {
		t.Fatal(err)
	}
	objs, err := g.GetObjects(ctx, &graphv1.GetObjectsRequest{Ids: append([]uint64{board.Id}, pins...)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(objs.GetObjects()); n != 0 {
		t.Errorf("GetObjects after DeleteUser: %d of the user's board and pins still live", n)
	}
	if _, err := b.ListPins(ctx, &boardv1.ListPinsRequest{BoardId: board.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("ListPins of the deleted user's board: %v, want NotFound", err)
	}
	owned := map[uint64]bool{}
	for _, p := range pins {
		owned[p] = true
	}
	for round := range 5 { // fresh chunks and materialized pages alike
		cur := ""
		for page := 0; page < 20; page++ {
			r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.Id, PageSize: 3, Cursor: cur})
			if err != nil {
				t.Fatalf("bob's feed, round %d page %d: %v", round, page, err)
			}
			for _, it := range r.GetItems() {
				if owned[it.GetPinId()] {
					t.Fatalf("round %d page %d: bob's feed serves pin %d of the deleted user", round, page, it.GetPinId())
				}
			}
			if cur = r.GetNextCursor(); cur == "" {
				break
			}
		}
	}
	ghost, _ := zen.NewID(7, zen.TypeUser, 1<<30)
	for name, id := range map[string]uint64{"deleted": ann.Id, "never existed": uint64(ghost)} {
		if _, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: id}); status.Code(err) != codes.NotFound {
			t.Errorf("GetFeed of a %s user: %v, want NotFound", name, err)
		}
	}
}
