package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestRedisOutageLosesNothing streams CreatePin through a Redis outage (kill -9 of
// redis-server, restarted on the same port with its AOF data) while followers read their
// feeds: every pin answered OK reaches every follower, pins are answered OK during the outage
// (their events wait in the outbox), and GetFeed keeps answering, fast, throughout. The outage
// lasts 10 s (20 s with SMARTFEED_LONG=1).
func TestRedisOutageLosesNothing(t *testing.T) {
	rp := testenv.StartRedis(t)
	outage := 10 * time.Second
	if os.Getenv("SMARTFEED_LONG") == "1" {
		outage = 20 * time.Second
	}
	a, conn := startAllWith(t, func(c *config.Config) {
		c.Redis.Addr = rp.Addr()
		c.Worker.OutboxGrace = jsontime.Duration(2 * time.Second)
		c.Worker.OutboxRelayInterval = jsontime.Duration(500 * time.Millisecond)
	})
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
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: author, Name: "stream"})
	if err != nil {
		t.Fatal(err)
	}
	var followers []uint64
	for i := range 3 {
		u := mk(fmt.Sprintf("follower%d", i))
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: u, TargetId: author}); err != nil {
			t.Fatal(err)
		}
		followers = append(followers, u)
	}

	// Readers: each follower reads its first page every 50 ms; what they are served counts
	// as delivered (served pins leave the pools).
	var mu sync.Mutex
	served := map[uint64]map[uint64]bool{}
	type sample struct {
		at      time.Time
		took    time.Duration
		errText string
	}
	var samples []sample
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for _, u := range followers {
		served[u] = map[uint64]bool{}
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				t0 := time.Now()
				r, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
				cancel()
				s := sample{at: t0, took: time.Since(t0)}
				if err != nil {
					s.errText = err.Error()
				}
				mu.Lock()
				samples = append(samples, s)
				for _, it := range r.GetItems() {
					served[u][it.GetPinId()] = true
				}
				mu.Unlock()
			}
		})
	}

	// The writer: a pin every 50 ms, before, during and after the outage.
	var okPins []uint64
	var okDuring, failed int
	var writeDuring []time.Duration
	start := time.Now()
	killAt, backAt := start.Add(2*time.Second), start.Add(2*time.Second+outage)
	var down, up time.Time
	for i := 0; time.Since(start) < 2*time.Second+outage+3*time.Second; i++ {
		now := time.Now()
		if down.IsZero() && now.After(killAt) {
			rp.Kill()
			down = time.Now()
		}
		if !down.IsZero() && up.IsZero() && now.After(backAt) {
			rp.Start()
			up = time.Now()
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w0 := time.Now()
		p, err := g.CreatePin(wctx, &graphv1.CreatePinRequest{AuthorId: author, BoardId: board.GetId(),
			ImageUrl: fmt.Sprintf("https://i.example.com/%d.jpg", i), RequestId: fmt.Sprintf("outage-%d", i)})
		cancel()
		if err != nil {
			failed++
			t.Logf("CreatePin %d at %v: %v", i, time.Since(start).Round(time.Millisecond), err)
		} else {
			okPins = append(okPins, p.GetId())
			if !down.IsZero() && up.IsZero() {
				okDuring++
				writeDuring = append(writeDuring, time.Since(w0))
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d pins answered OK (%d while Redis was down), %d failed", len(okPins), okDuring, failed)
	if okDuring == 0 {
		t.Fatalf("no CreatePin answered OK while Redis was down: the write path waits on Redis")
	}
	slices.Sort(writeDuring)
	wp99 := writeDuring[len(writeDuring)*99/100]
	t.Logf("CreatePin while Redis was down: p50 %v, p99 %v", writeDuring[len(writeDuring)/2].Round(10*time.Microsecond), wp99.Round(10*time.Microsecond))
	if wp99 > 400*time.Millisecond { // below EnqueueTimeout (500 ms): no caller waits on the dead Redis
		t.Errorf("CreatePin p99 while Redis was down %v: callers wait on Redis", wp99)
	}

	// Every pin answered OK reaches every follower: served to it, or waiting in its pools.
	// A pin is not lost while it is in the follower's pool or in their feed. The readers see
	// first pages of 10 only: a chunk of more than 10 fresh pins (the generator makes up to 50
	// when the relayed backlog lands) puts the rest below the first page, so a pin neither
	// seen nor in the pool is looked for in the whole feed, page by page.
	deeper := 0
	wholeFeed := func(u uint64) map[uint64]bool {
		in := map[uint64]bool{}
		cursor := ""
		for range 100 {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			r, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 100, Cursor: cursor})
			cancel()
			if err != nil {
				t.Logf("GetFeed of follower %d to find a pin: %v", u, err)
				return in
			}
			for _, it := range r.GetItems() {
				in[it.GetPinId()] = true
			}
			if cursor = r.GetNextCursor(); cursor == "" {
				return in
			}
		}
		return in
	}
	missing := func() map[uint64][]uint64 {
		out := map[uint64][]uint64{}
		for _, u := range followers {
			top, err := a.pools.Top(ctx, zen.ID(u), zen.SourceFollowing, 10000)
			if err != nil {
				t.Fatal(err)
			}
			inPool := map[uint64]bool{}
			for _, e := range top {
				inPool[uint64(e.Pin)] = true
			}
			var unseen []uint64
			mu.Lock()
			for _, p := range okPins {
				if !served[u][p] && !inPool[p] {
					unseen = append(unseen, p)
				}
			}
			mu.Unlock()
			if len(unseen) == 0 {
				continue
			}
			inFeed := wholeFeed(u)
			for _, p := range unseen {
				if inFeed[p] {
					mu.Lock()
					served[u][p] = true
					mu.Unlock()
					deeper++
					continue
				}
				out[u] = append(out[u], p)
			}
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := missing()
		if len(m) == 0 {
			break
		}
		if time.Now().After(deadline) {
			lost := map[uint64]bool{}
			for u, ps := range m {
				t.Errorf("follower %d never got %d of the %d pins answered OK: %v", u, len(ps), len(okPins), ps)
				for _, p := range ps {
					lost[p] = true
				}
			}
			for p := range lost {
				t.Logf("pin %d: %s", p, fanoutState(ctx, a, p, author, board.GetId()))
			}
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if deeper > 0 {
		t.Logf("%d (follower, pin) pairs were in the feed below the first page", deeper)
	}
	close(stop)
	readers.Wait()

	// GetFeed during the outage: every call answered, p99 reported (and bounded).
	var during []time.Duration
	errs := 0
	for _, s := range samples {
		if s.at.Before(down) || s.at.After(up) {
			continue
		}
		during = append(during, s.took)
		if s.errText != "" {
			errs++
			if errs <= 3 {
				t.Logf("GetFeed during the outage: %s", s.errText)
			}
		}
	}
	slices.Sort(during)
	if len(during) == 0 {
		t.Fatal("no GetFeed during the outage")
	}
	p50, p99 := during[len(during)/2], during[len(during)*99/100]
	t.Logf("GetFeed during the outage: %d calls, %d errors, p50 %v, p99 %v, max %v", len(during), errs,
		p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), during[len(during)-1].Round(10*time.Microsecond))
	if errs > 0 {
		t.Errorf("%d of %d GetFeed calls failed while Redis was down", errs, len(during))
	}
	// The same bound as CreatePin's, for the same reason: a GetFeed that waited on the dead
	// Redis (a materialization or touch enqueue) would take EnqueueTimeout (500 ms). A tighter
	// bound measured the machine's load, not the mechanism (211 ms once beside another go test).
	if p99 > 400*time.Millisecond {
		t.Errorf("GetFeed p99 during the outage %v: callers wait on Redis", p99)
	}
}

// fanoutState describes where the fanout of a pin is (for a failure message): its task in Redis
// and its outbox row.
func fanoutState(ctx context.Context, a *app, pin, author, board uint64) string {
	// The task the write path enqueued for the pin: its ID and queue as pinlater derives them.
	// (The creation time is not part of the ID; the payload needs one to be valid.)
	task, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: pin, Author: author, Board: board, CreatedMs: time.Now().UnixMilli()})
	if err != nil {
		return err.Error()
	}
	id := task.ID()
	var out []string
	if a.pinAdmin != nil {
		st, err := a.pinAdmin.Task(ctx, task.Policy().Queue, id)
		if err != nil {
			out = append(out, fmt.Sprintf("task %s: %v", id, err))
		} else {
			out = append(out, fmt.Sprintf("task %s: %s (attempts %d, last error %q)", id, st.State, st.Attempts, st.LastErr))
		}
	}
	if a.outbox != nil {
		row := "no outbox row"
		err := a.outbox.Range(ctx, nil, nil, 1<<20, func(k, _ []byte) error {
			if strings.HasSuffix(string(k), id) {
				row = "outbox row " + string(k)
			}
			return nil
		})
		if err != nil {
			row = fmt.Sprintf("outbox: %v", err)
		}
		out = append(out, row)
	}
	return strings.Join(out, "; ")
}
