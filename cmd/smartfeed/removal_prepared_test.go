package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestRemovalsBeatPreparedChunks: with the binary's default settings (a chunk is prepared in
// the background after each first page of a returning user), a removal that finished before a page cannot reach
// the reader through a chunk prepared before it. Reader F follows X (or X's board, or an
// interest X tags P with) and Y, reads a first page twice, X creates P and Y creates Q, and the chunk
// prepared for F's next visit holds P. Then each kind of removal the system has runs through
// the public gRPC API and its upkeep job finishes: F unfollows X, X's board or the interest; X
// deletes P; X is deleted. After that, P is on none of F's pages (first page or later) and in
// none of F's feed rows once everything settled, whether the prepared chunk is served by F's
// next visit or materialized by the recovery pass without a visit; Q, which no removal
// touched, is in F's feed once.
func TestRemovalsBeatPreparedChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis and runs every service; skipped with -short")
	}
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	a, conn := startAll(t)
	if a.feed.Config().PrepareAfter <= 0 {
		t.Fatal("the default settings prepare no chunk (feed.prepare_after is 0)")
	}
	ctx := t.Context()
	g, f := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn)

	type world struct{ F, X, Y, bX, bY, I, P, Q uint64 }
	cases := []struct {
		name    string
		follow  func(w world) uint64 // what F follows to receive P
		tagP    bool                 // P is tagged with the interest
		remove  func(w world) error
		jobType string // the upkeep job whose end acknowledges the removal
	}{
		{"unfollow_user", func(w world) uint64 { return w.X }, false, func(w world) error {
			_, err := g.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: w.F, TargetId: w.X})
			return err
		}, "unfollow-cleanup"},
		{"unfollow_board", func(w world) uint64 { return w.bX }, false, func(w world) error {
			_, err := g.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: w.F, TargetId: w.bX})
			return err
		}, "unfollow-cleanup"},
		{"unfollow_interest", func(w world) uint64 { return w.I }, true, func(w world) error {
			_, err := g.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: w.F, TargetId: w.I})
			return err
		}, "unfollow-cleanup"},
		{"delete_pin", func(w world) uint64 { return w.X }, false, func(w world) error {
			_, err := g.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: w.X, PinId: w.P})
			return err
		}, "pin-delete"},
		{"delete_author", func(w world) uint64 { return w.X }, false, func(w world) error {
			_, err := g.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: w.X})
			return err
		}, "user-delete"},
	}
	n := 0
	for _, c := range cases {
		for _, recover := range []bool{false, true} {
			name := c.name + "/visit"
			if recover {
				name = c.name + "/recovery_pass"
			}
			t.Run(name, func(t *testing.T) {
				n++
				suffix := fmt.Sprintf("%d_%d", n, time.Now().UnixNano()%1e9)
				mk := func(who string) uint64 {
					u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: who + suffix, Email: who + suffix + "@example.com"})
					if err != nil {
						t.Fatal(err)
					}
					return u.Id
				}
				board := func(owner uint64) uint64 {
					b, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: owner, Name: "b" + suffix})
					if err != nil {
						t.Fatal(err)
					}
					return b.Id
				}
				var w world
				w.F, w.X, w.Y = mk("rf"), mk("rx"), mk("ry")
				w.bX, w.bY = board(w.X), board(w.Y)
				in, err := g.CreateInterest(ctx, &graphv1.CreateInterestRequest{Name: "ri" + suffix})
				if err != nil {
					t.Fatal(err)
				}
				w.I = in.Id
				for _, target := range []uint64{c.follow(w), w.Y} {
					if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: w.F, TargetId: target}); err != nil {
						t.Fatal(err)
					}
				}
				// F's first page, and F back at once (a returning user: feed.prepare_returning),
				// which schedules the preparation of F's next chunk.
				for range 2 {
					if _, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: w.F, PageSize: 50}); err != nil {
						t.Fatal(err)
					}
				}
				mkPin := func(author, board uint64, tag bool) uint64 {
					req := &graphv1.CreatePinRequest{AuthorId: author, BoardId: board, ImageUrl: "https://i.example.com/" + suffix + ".jpg"}
					if tag {
						req.InterestIds = []uint64{w.I}
					}
					p, err := g.CreatePin(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					return p.Id
				}
				w.P, w.Q = mkPin(w.X, w.bX, c.tagP), mkPin(w.Y, w.bY, false)
				// The premise: a chunk prepared after the first page holds P.
				deadline := time.Now().Add(15 * time.Second)
				for !slices.Contains(preparedFeedPins(t, a, w.F), zen.ID(w.P)) {
					if time.Now().After(deadline) {
						t.Fatalf("no prepared chunk of F holds P within 15s (prepared: %v)", preparedFeedPins(t, a, w.F))
					}
					time.Sleep(20 * time.Millisecond)
				}
				// The removal, and the end of its upkeep job (its pools purge).
				done := jobsDone(t, a, c.jobType)
				if err := c.remove(w); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(20 * time.Second); jobsDone(t, a, c.jobType) <= done; time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the %s job did not finish within 20s", c.jobType)
					}
				}
				if recover {
					// No visit: the recovery pass materializes the prepared chunk. A late removal
					// check fails the pass closed (the chunk stays prepared): it is tried again.
					testenv.WaitFor(t, testenv.WaitTimeout, "a recovery pass of F that completes", func() bool {
						_, err := a.feed.Recover(ctx, zen.ID(w.F), 0)
						if err != nil {
							t.Logf("recovery pass: %v (its removal check fails closed; tried again)", err)
						}
						return err == nil
					})
				}
				// Every page of F's feed, the first one included.
				seen := map[uint64]int{}
				cur := ""
				for page := 0; ; page++ {
					r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: w.F, PageSize: 2, Cursor: cur})
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range r.GetItems() {
						if it.GetPinId() == w.P {
							t.Errorf("page %d (status %s) serves the removed pin P (fresh %v, reason %q)",
								page, r.GetFreshStatus(), it.GetFresh(), it.GetReason())
						}
						seen[it.GetPinId()]++
					}
					if cur = r.GetNextCursor(); cur == "" || page > 50 {
						break
					}
				}
				// A page whose removal check failed or was late (bounded by the live timeout, which
				// a loaded machine can exceed) holds the prepared chunk back whole, fail closed: it
				// stays a prepared row until a later check. The recovery pass is that check here.
				a.feed.Wait()
				for deadline := time.Now().Add(30 * time.Second); slices.Contains(preparedFeedPins(t, a, w.F), zen.ID(w.P)); {
					if time.Now().After(deadline) {
						t.Fatal("a prepared chunk of F still holds P after 30s of recovery passes")
					}
					if _, err := a.feed.Recover(ctx, zen.ID(w.F), 0); err != nil {
						t.Fatal(err)
					}
				}
				// Settled: background work done, jobs run; P is in no row of F's feed.
				a.feed.Wait()
				settleQueues(t, a)
				rows, err := scanFeed(ctx, a.feedPrimary, zen.ID(w.F))
				if err != nil {
					t.Fatal(err)
				}
				inFeed := 0
				for _, r := range rows {
					for _, p := range r.Pins {
						if p == zen.ID(w.P) {
							t.Errorf("F's feed keeps the removed pin P in a row (seq %d, pending %v, prepared %v)", r.Seq, r.Pending, r.Prepared)
						}
						if p == zen.ID(w.Q) {
							inFeed++
						}
					}
				}
				// Nothing lost: Q reached F, once (on a page now, or on the next visit's page).
				if seen[w.Q] == 0 {
					r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: w.F, PageSize: 50})
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range r.GetItems() {
						seen[it.GetPinId()]++
					}
				}
				if seen[w.Q] != 1 {
					t.Errorf("Q, which no removal touched, was served %d times, want once", seen[w.Q])
				}
				if inFeed > 1 {
					t.Errorf("Q is in %d rows of F's feed", inFeed)
				}
			})
		}
	}
	// The reader's own deletion: no feed at all.
	u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "rgone", Email: "rgone@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: u.Id}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: u.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("GetFeed of a deleted reader: %v, want NotFound", err)
	}
}

// preparedFeedPins returns the pins of user's prepared (not yet served) chunks on the primary.
func preparedFeedPins(t *testing.T, a *app, user uint64) []zen.ID {
	t.Helper()
	rows, err := scanFeed(t.Context(), a.feedPrimary, zen.ID(user))
	if err != nil {
		t.Fatal(err)
	}
	var out []zen.ID
	for _, r := range rows {
		if r.Prepared {
			out = append(out, r.Pins...)
		}
	}
	return out
}

// jobsDone is how many jobs of type typ the worker finished (smartfeed_worker_tasks_done_total).
func jobsDone(t *testing.T, a *app, typ string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "smartfeed_worker_tasks_done_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// settleQueues waits until the queues that carry the feed's jobs (materialize, replicate) and
// the fanouts are empty.
func settleQueues(t *testing.T, a *app) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 {
		for _, q := range []string{"critical", "fanout"} {
			if err := a.pinAdmin.WaitDrained(ctx, q, 20*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
}
