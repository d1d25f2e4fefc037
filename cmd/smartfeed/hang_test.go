package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// TestHangingPrimaryFeed: the primary feed store hangs (every call +2 s, it never fails) under
// a stream of GetFeed calls of users whose feeds are materialized: every call succeeds, and the
// p99 stays within the hedge cutoff + the standby's p99 + 50 ms (the primary's own deadline and
// the circuit breaker send reads to the standby instead of waiting on the primary).
func TestHangingPrimaryFeed(t *testing.T) {
	a, conn := startAll(t)
	ctx := t.Context()
	g, f := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn)
	mk := func(name string) uint64 {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetId()
	}
	author := mk("author")
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: author, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var readers []uint64
	for i := range 4 {
		u := mk(fmt.Sprintf("reader%d", i))
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: u, TargetId: author}); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, u)
	}
	for i := range 20 {
		if _, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: author, BoardId: board.GetId(),
			ImageUrl: fmt.Sprintf("https://i.example.com/%d.jpg", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Each reader's feed holds pins, materialized on both stores.
	deadline := time.Now().Add(30 * time.Second)
	for _, u := range readers {
		for {
			r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
			if err == nil && len(r.GetItems()) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reader %d: no feed: %v", u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a.feed.Wait()
	if a.standbyFlush != nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.standbyFlush(fctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	// read calls GetFeed n times, or for at least d.
	read := func(n int, d time.Duration) []time.Duration {
		var took []time.Duration
		start := time.Now()
		for i := 0; i < n || time.Since(start) < d; i++ {
			u := readers[i%len(readers)]
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			_, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
			took = append(took, time.Since(t0))
			cancel()
			if err != nil {
				t.Fatalf("GetFeed %d with the primary hanging: %v", i, err)
			}
		}
		slices.Sort(took)
		return took
	}
	healthy := read(100, 0)
	if err := a.faults[0].Set(faults.Config{SlowFraction: 1, Slow: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer a.faults[0].Set(faults.Config{})
	// Long enough for the breaker's probes (every BreakerOpenFor) to meet the hung primary.
	hung := read(200, 3*a.hedger.Policy().BreakerOpenFor)
	pol := a.hedger.Policy()
	cutoff, _ := a.hedger.Cutoff()
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	t.Logf("healthy: p50 %v p99 %v; primary hanging: %d calls, p50 %v p99 %v max %v (cutoff %v, primary timeout %v)",
		healthy[len(healthy)/2], p99(healthy), len(hung), hung[len(hung)/2], p99(hung), hung[len(hung)-1], cutoff, pol.PrimaryTimeout)
	bound := cutoff + p99(healthy) + 50*time.Millisecond
	if p99(hung) > bound {
		t.Errorf("GetFeed p99 with the primary hanging %v, want at most cutoff + healthy p99 + 50 ms = %v", p99(hung), bound)
	}
	// The p99 of thousands of calls hides the calls made before the breaker opened; count
	// them: the breaker must open within a few reads, not after a window of reads that each
	// waited for Max.
	over := len(hung) - sort.Search(len(hung), func(i int) bool { return hung[i] > bound })
	t.Logf("%d calls over %v", over, bound)
	if over > 3 {
		t.Errorf("%d calls took over %v while the primary hung: the breaker opened late", over, bound)
	}
}
