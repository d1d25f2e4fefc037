package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// benchGen hands out chunks of the next pins of a fixed list, round robin.
type benchGen struct {
	pins []zen.ID
	next atomic.Uint64
	mu   sync.Mutex
	per  map[zen.ID]int // chunks handed to each user
}

func (g *benchGen) GenerateChunk(_ context.Context, user zen.ID) (feedsvc.Chunk, error) {
	n := g.next.Add(1)
	g.mu.Lock()
	k := g.per[user]
	g.per[user] = k + 1
	g.mu.Unlock()
	c := feedsvc.Chunk{ID: fmt.Sprintf("c%d", n), User: user}
	for i := range 10 {
		p := g.pins[(int(uint64(user)%97)+k*10+i)%len(g.pins)]
		c.Items = append(c.Items, feedsvc.Item{Pin: p, Source: zen.SourceFollowing, Score: 1})
	}
	return c, nil
}

func (g *benchGen) Settle(context.Context, zen.ID, string, bool) error { return nil }

// benchQueue runs nothing: the bench's chunks are materialized inline.
type benchQueue struct {
	mu    sync.Mutex
	tasks []feedsvc.MaterializeTask
}

func (q *benchQueue) EnqueueMaterialize(_ context.Context, t feedsvc.MaterializeTask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tasks = append(q.tasks, t)
	return nil
}

// BenchmarkGetFeedWarm measures the steady-state page: first pages of 200 users read round robin
// from a warm head cache (min_chunk_interval keeps the generator out: every page is the feed as it
// stands), with the feed's filters wired as cmd wires them on Pebble: the deletion log's set
// (setLiveness over a DeletedSet) and the users' hide sets (a HideCache behind hidingLiveness and hidingEligibility).
// A few users hid pins, and a few pins are deleted. Profile it with
//
//	go test ./cmd/smartfeed -run XXX -bench GetFeedWarm -cpuprofile cpu.out
func BenchmarkGetFeedWarm(b *testing.B) {
	ctx := context.Background()
	st, err := zenpebble.Open(b.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	g, err := zen.NewGraph(ctx, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	const users, npins = 200, 400
	var us []zen.ID
	for range users {
		o, err := g.Create(ctx, zen.TypeUser, 0, map[string]any{"n": 1})
		if err != nil {
			b.Fatal(err)
		}
		us = append(us, o.ID)
	}
	gen := &benchGen{per: map[zen.ID]int{}}
	for i := range npins {
		o, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"n": i})
		if err != nil {
			b.Fatal(err)
		}
		gen.pins = append(gen.pins, o.ID)
	}
	for i := 0; i < npins; i += 200 {
		if err := g.Delete(ctx, gen.pins[i]); err != nil {
			b.Fatal(err)
		}
	}
	primary, err := st.Table(ctx, "feed")
	if err != nil {
		b.Fatal(err)
	}
	// The standby is the primary's table: a hedged read finds the same rows (a replica).
	standby := primary
	et, err := st.Table(ctx, engagement.Table)
	if err != nil {
		b.Fatal(err)
	}
	hides := engagement.NewStore(et, 0, nil)
	for i := 0; i < users; i += 10 {
		if err := hides.Hide(ctx, us[i], gen.pins[i+1], 0); err != nil {
			b.Fatal(err)
		}
	}
	cached := engagement.NewHideCache(hides, 0)
	deleted := newSetLiveness(feedsvc.NewDeletedSet(g), g)
	cfg := feedsvc.DefaultConfig()
	cfg.MinChunkInterval = 0
	q := &benchQueue{}
	svc, err := feedsvc.New(feedsvc.Deps{Primary: primary, Standby: standby, Generator: gen, Enqueuer: q,
		Liveness:    withHidingLiveness(deleted, cached),
		Eligibility: withHidingEligibility(graphEligibility{g: g, deleted: deleted}, cached)}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	for range 5 {
		for _, u := range us {
			if _, err := svc.GetFeed(ctx, feedsvc.Request{User: u, PageSize: 25}); err != nil {
				b.Fatal(err)
			}
		}
		svc.Wait()
		q.mu.Lock()
		tasks := q.tasks
		q.tasks = nil
		q.mu.Unlock()
		for _, t := range tasks {
			if err := svc.Materialize(ctx, t); err != nil {
				b.Fatal(err)
			}
		}
	}
	cfg.MinChunkInterval = time.Hour
	if err := svc.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	for _, u := range us {
		p, err := svc.GetFeed(ctx, feedsvc.Request{User: u, PageSize: 25})
		if err != nil || len(p.Items) < 20 || p.FreshStatus != feedsvc.FreshRecent {
			b.Fatalf("primed page of %d: %d items, %v, %v", u, len(p.Items), p.FreshStatus, err)
		}
	}
	i := 0
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, err := svc.GetFeed(ctx, feedsvc.Request{User: us[i%users], PageSize: 25}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	// The process's CPU time per page (the machine may be shared: wall time per page counts the
	// waits for a processor too).
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time this process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
