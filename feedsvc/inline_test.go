package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// inlineCounts reads smartfeed_feed_materialize_inline_total by path.
func inlineCounts(e *env) map[string]float64 {
	out := map[string]float64{}
	for _, p := range []string{inlineDone, inlineFailed, inlineBusy, inlineOff} {
		if v := testutil.ToFloat64(e.svc.m.inline.WithLabelValues(p)); v > 0 {
			out[p] = v
		}
	}
	return out
}

// TestInlineMaterialize: with Config.InlineMaterialize, a served chunk is materialized in
// process after the answer, with no job: the next page shows its pins as materialized items
// below the next chunk, the generator has it settled as delivered, and the queue is empty.
// With it off, the chunk becomes a job, as before.
func TestInlineMaterialize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline int
		jobs   int
		counts map[string]float64
	}{
		{"on", 4, 0, map[string]float64{inlineDone: 2}},
		{"off", 0, 2, map[string]float64{inlineOff: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize = tc.inline })
			first := e.get(t, "", 10)
			e.svc.Wait()
			second := e.get(t, "", 10)
			e.svc.Wait()
			jobs := e.queue.take()
			if len(jobs) != tc.jobs {
				t.Fatalf("%d materialize jobs enqueued, want %d", len(jobs), tc.jobs)
			}
			for _, j := range jobs {
				if err := e.svc.Materialize(t.Context(), j); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.counts, inlineCounts(e)); diff != "" {
				t.Errorf("materialize paths (-want +got):\n%s", diff)
			}
			if d, ok := e.gen.settledAs("c1"); !ok || !d {
				t.Errorf("chunk c1 settled %v (%v), want delivered", d, ok)
			}
			// The second chunk's pins above the first's, each once, after both materialized
			// (the generator has nothing more).
			e.gen.mu.Lock()
			e.gen.size = 0
			e.gen.mu.Unlock()
			want := append(pagePins(second)[:5:5], pagePins(first)...)
			if diff := cmp.Diff(want, e.all(t, 10)); diff != "" {
				t.Errorf("feed after materialization (-want +got):\n%s", diff)
			}
			prefix := userPrefix(prefixFeed, e.user)
			rows, err := e.primary.Scan(t.Context(), zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range withoutHeadVersions(rows) {
				if _, pending, err := feedKey(r.Key); err != nil || pending {
					t.Errorf("feed row %x: pending %v, %v; want only materialized items", r.Key, pending, err)
				}
			}
		})
	}
}

// TestInlineMaterializeFallsBack: a chunk whose inline run fails, or that finds every inline
// slot taken, becomes a materialize job; the job completes it.
func TestInlineMaterializeFallsBack(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize = 4 })
		e.gen.mu.Lock()
		e.gen.settleErr = errors.New("generator unreachable")
		e.gen.mu.Unlock()
		e.get(t, "", 10)
		e.svc.Wait()
		if diff := cmp.Diff(map[string]float64{inlineFailed: 1}, inlineCounts(e)); diff != "" {
			t.Errorf("materialize paths (-want +got):\n%s", diff)
		}
		jobs := e.queue.take()
		if len(jobs) != 1 {
			t.Fatalf("%d jobs enqueued after a failed inline run, want 1", len(jobs))
		}
		e.gen.mu.Lock()
		e.gen.settleErr = nil
		e.gen.mu.Unlock()
		if err := e.svc.Materialize(t.Context(), jobs[0]); err != nil {
			t.Fatal(err)
		}
		if d, ok := e.gen.settledAs("c1"); !ok || !d {
			t.Errorf("chunk c1 settled %v (%v) after its job, want delivered", d, ok)
		}
	})
	t.Run("busy", func(t *testing.T) {
		e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize = 2 })
		for range maxMaterializeQueue { // the in-process queue full
			e.svc.matQueue <- MaterializeTask{}
		}
		// A page would be deferred this far behind (materializeBehind): a chunk served before
		// the queue filled.
		e.svc.materializeNow(t.Context(), MaterializeTask{User: e.user, ChunkID: "c1", Seq: 1})
		e.svc.Wait()
		for range maxMaterializeQueue {
			<-e.svc.matQueue
		}
		if diff := cmp.Diff(map[string]float64{inlineBusy: 1}, inlineCounts(e)); diff != "" {
			t.Errorf("materialize paths (-want +got):\n%s", diff)
		}
		if jobs := e.queue.take(); len(jobs) != 1 {
			t.Fatalf("%d jobs enqueued with the in-process queue full, want 1", len(jobs))
		}
	})
}

// TestBackgroundLanes: the read path's background work runs only in a free lane
// (Deps.BackgroundLanes). With the one lane held, a served chunk's inline materialization and
// the preparation wait in process for the lane, however long, and no job is enqueued; the page
// is answered all the same. Once the lane is free both run in process.
func TestBackgroundLanes(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.InlineMaterialize, c.PrepareAfter = 4, time.Millisecond
	})
	e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
	if got := e.svc.lanes.Cap(); got != 1 {
		t.Fatalf("lanes = %d, want 1", got)
	}

	holdLane(t, e.svc) // something else holds the only lane
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) != 5 {
		t.Fatalf("page with the lane held: status %q, %d fresh; want included, 5", p.FreshStatus, len(freshPins(p)))
	}
	waitFor(t, "the preparation queued", func() bool { return testutil.ToFloat64(e.svc.m.prepQueued) == 1 })
	waitFor(t, "the materialization taken by a worker", func() bool {
		return e.svc.inlineRunning.Load() == 1 && len(e.svc.matQueue) == 0
	})
	if diff := cmp.Diff(map[string]float64{}, inlineCounts(e)); diff != "" {
		t.Errorf("materialize paths with the lane held (-want +got):\n%s", diff)
	}
	if jobs := e.queue.take(); len(jobs) != 0 {
		t.Errorf("%d jobs enqueued with the lane held, want 0", len(jobs))
	}
	if got := e.gen.calls(); got != 1 {
		t.Errorf("generator calls = %d, want 1 (the preparation waits for the lane)", got)
	}

	e.svc.lanes.Release() // the lane is free again: the materialization and the preparation run
	e.svc.Wait()
	if got := e.gen.calls(); got != 2 {
		t.Errorf("generator calls = %d, want 2 (the page's and its preparation's)", got)
	}
	e.get(t, "", 10) // served from the prepared chunk, materialized in process
	e.svc.Wait()
	if diff := cmp.Diff(map[string]float64{inlineDone: 2}, inlineCounts(e)); diff != "" {
		t.Errorf("materialize paths with the lane free (-want +got):\n%s", diff)
	}
	if jobs := e.queue.take(); len(jobs) != 0 {
		t.Errorf("%d jobs enqueued, want 0", len(jobs))
	}
	if got := e.gen.calls(); got != 3 {
		t.Errorf("generator calls = %d, want 3 (and the next preparation)", got)
	}
	if got := testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepRecorded)); got != 2 {
		t.Errorf("preparations recorded = %v, want 2", got)
	}
	if got := e.svc.lanes.InUse(); got != 0 {
		t.Errorf("%d lanes still held after the work ended, want 0", got)
	}
}

// TestPreparationQueue: while the background lane is held, the preparations of many users'
// pages wait in the queue (none dropped, none run); once it is free every one of them runs, at
// most maxPreparing at once, and the gauges come back to 0.
func TestPreparationQueue(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, 0 })
	e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
	const users = 3 * maxPreparing
	holdLane(t, e.svc) // something else holds the only lane
	for i := range users {
		if _, err := e.svc.GetFeed(t.Context(), Request{User: userID(t, uint64(100+i)), PageSize: 10}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every preparation queued", func() bool { return testutil.ToFloat64(e.svc.m.prepQueued) == users })
	if got := e.gen.calls(); got != users {
		t.Errorf("generator calls with the lane held = %d, want %d (the pages' only)", got, users)
	}
	e.svc.lanes.Release()
	e.svc.Wait()
	sched := func(r string) float64 { return testutil.ToFloat64(e.svc.m.prepSchedule.WithLabelValues(r)) }
	got := map[string]float64{
		"queued": sched(prepQueued), "dropped": sched(prepDropped),
		"recorded":      testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepRecorded)),
		"queued gauge":  testutil.ToFloat64(e.svc.m.prepQueued),
		"running gauge": testutil.ToFloat64(e.svc.m.prepRunning),
	}
	want := map[string]float64{"queued": users, "dropped": 0, "recorded": users, "queued gauge": 0, "running gauge": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("preparations (-want +got):\n%s", diff)
	}
	if got := e.gen.calls(); got != 2*users {
		t.Errorf("generator calls = %d, want %d (each page's and its preparation's)", got, 2*users)
	}
	if n := e.svc.prepWorkers.Load(); n != 0 {
		t.Errorf("%d preparation workers left, want 0", n)
	}
}

// TestVisitWhilePreparationWaits: a preparation that is due counts as the user's generator
// call from then on, so a visit while it waits for a lane is served the feed as it stands
// (feed.min_chunk_interval) instead of calling the generator beside it.
func TestVisitWhilePreparationWaits(t *testing.T) {
	const interval = 300 * time.Millisecond
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, interval })
	e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
	holdLane(t, e.svc) // the lane held: the preparation waits
	if p := e.get(t, "", 10); p.FreshStatus != FreshIncluded {
		t.Fatalf("first page: status %q, want included", p.FreshStatus)
	}
	// The preparation is due interval after that generator call; visit while it waits.
	waitFor(t, "the preparation due", func() bool { return testutil.ToFloat64(e.svc.m.prepQueued) == 1 })
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshRecent {
		t.Errorf("visit while the preparation waits for a lane: status %q, want recent", p.FreshStatus)
	}
	if got := e.gen.calls(); got != 1 {
		t.Errorf("generator calls = %d, want 1 (the first page's)", got)
	}
	e.svc.lanes.Release()
	e.svc.Wait()
}

// TestBackgroundLanesDefault: half the processors, at least one; out of range is refused.
func TestBackgroundLanesDefault(t *testing.T) {
	if got, want := DefaultBackgroundLanes(), max(1, runtime.GOMAXPROCS(0)/2); got != want {
		t.Errorf("default lanes = %d, want %d", got, want)
	}
	e := newEnv(t, nil)
	for _, n := range []int{-1, 1025} {
		d := Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue, BackgroundLanes: n}
		if _, err := New(d, e.svc.Config()); err == nil {
			t.Errorf("New with %d background lanes: no error", n)
		}
	}
}

// TestEmptyPoolsNotPreparedAgain: once a first page's preparations found the pools empty on
// every try, the user gets no preparation, however often the user visits, until a generator
// call finds pins: each later first page calls the generator once (it is what learns that a
// fanout filled the pools), and nothing more runs in the background. Once pins arrive, the page
// gets them fresh and the next chunk is prepared again.
func TestEmptyPoolsNotPreparedAgain(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, 0 })
	e.gen.mu.Lock()
	e.gen.size = 0 // the pools are empty
	e.gen.mu.Unlock()
	const visits = 4
	for i := range visits {
		if p := e.get(t, "", 10); p.FreshStatus != FreshEmpty {
			t.Fatalf("visit %d: status %q, want empty", i, p.FreshStatus)
		}
		e.svc.Wait()
	}
	// The first page's preparation tried prepareTries times; no later page prepared.
	if got, want := e.gen.tries(), visits+prepareTries; got != want {
		t.Errorf("generator calls after %d visits with the pools empty = %d, want %d", visits, got, want)
	}
	if got := testutil.ToFloat64(e.svc.m.prepSchedule.WithLabelValues(prepEmptyPool)); got != visits-1 {
		t.Errorf("preparations skipped for empty pools = %v, want %d", got, visits-1)
	}

	e.gen.mu.Lock()
	e.gen.size = 5 // a fanout fills the pools
	e.gen.mu.Unlock()
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) != 5 {
		t.Fatalf("visit after the fanout: status %q, %d fresh; want included, 5", p.FreshStatus, len(freshPins(p)))
	}
	e.svc.Wait()
	if got, want := e.gen.tries(), visits+prepareTries+2; got != want {
		t.Errorf("generator calls after the fanout = %d, want %d (the page's and a preparation)", got, want)
	}
	p = e.get(t, "", 10)
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) != 5 {
		t.Errorf("next visit: status %q, %d fresh; want the prepared chunk", p.FreshStatus, len(freshPins(p)))
	}
	e.svc.Wait()
	if got, want := e.gen.tries(), visits+prepareTries+3; got != want {
		t.Errorf("generator calls after the prepared chunk was served = %d, want %d (the next preparation only)", got, want)
	}
}

// gapGate is a Quiet whose gaps the test opens: Wait blocks until release is closed or ctx
// ends, and records the bounds it was given.
type gapGate struct {
	mu      sync.Mutex
	bounds  []time.Duration
	release chan struct{}
}

func (g *gapGate) Wait(ctx context.Context, bound time.Duration) bool {
	g.mu.Lock()
	g.bounds = append(g.bounds, bound)
	g.mu.Unlock()
	select {
	case <-g.release:
		return true
	case <-ctx.Done():
		return false
	}
}

func (g *gapGate) waits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.bounds)
}

// TestBackgroundWaitsForGap: with a Quiet, a page answers at once, and the preparation and the
// inline materialization it leaves wait for a gap between requests before they run; then both
// run in process. Close ends a wait that no gap ends.
func TestBackgroundWaitsForGap(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.InlineMaterialize, c.PrepareAfter, c.MinChunkInterval = 4, time.Millisecond, 0
	})
	gate := &gapGate{release: make(chan struct{})}
	e.rebuild(t, func(d *Deps) { d.Quiet = gate })
	// Not e.get: it waits for the work the page leaves, which waits for the gap.
	p, err := e.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) != 5 {
		t.Fatalf("page with no gap: status %q, %d fresh; want included, 5", p.FreshStatus, len(freshPins(p)))
	}
	deadline := time.Now().Add(5 * time.Second)
	for gate.waits() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := gate.waits(); got != 2 {
		t.Fatalf("background tasks waiting for a gap = %d, want 2 (the preparation, the materialization)", got)
	}
	// sleep: 20 ms in which neither task may call the generator or materialize before the gap.
	time.Sleep(20 * time.Millisecond)
	if got := e.gen.calls(); got != 1 {
		t.Errorf("generator calls before the gap = %d, want 1 (the page's; the preparation waits)", got)
	}
	if diff := cmp.Diff(map[string]float64{}, inlineCounts(e)); diff != "" {
		t.Errorf("materializations before the gap (-want +got):\n%s", diff)
	}
	close(gate.release)
	e.svc.Wait()
	if got := e.gen.calls(); got != 2 {
		t.Errorf("generator calls after the gap = %d, want 2 (the page's and its preparation's)", got)
	}
	if diff := cmp.Diff(map[string]float64{inlineDone: 1}, inlineCounts(e)); diff != "" {
		t.Errorf("materializations after the gap (-want +got):\n%s", diff)
	}
	gate.mu.Lock()
	for _, b := range gate.bounds {
		if b != DefaultQuietBound {
			t.Errorf("wait bound %v, want DefaultQuietBound %v", b, DefaultQuietBound)
		}
	}
	gate.mu.Unlock()

	// No gap comes: Close ends the waits, and the service's background work ends.
	e2 := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize, c.PrepareAfter = 4, time.Millisecond })
	never := &gapGate{release: make(chan struct{})}
	e2.rebuild(t, func(d *Deps) { d.Quiet, d.QuietBound = never, time.Second })
	if _, err := e2.svc.GetFeed(context.Background(), Request{User: e2.user, PageSize: 10}); err != nil {
		t.Fatal(err)
	}
	for never.waits() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { e2.svc.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the background work waiting for a gap")
	}
}

// holdLane takes one of svc's background lanes, as other background work would.
func holdLane(t *testing.T, svc *Service) {
	t.Helper()
	if err := svc.lanes.Acquire(context.Background()); err != nil {
		t.Fatalf("acquire a lane: %v", err)
	}
}

// TestCloseLeavesQueuedMaterializationsToRecovery: at shutdown the chunks still queued for an
// inline materialization become jobs; with Redis hung, only the first enqueue is tried (so a
// shutdown waits its bound once, not once per chunk), and the rest are left to the recovery
// pass (their pending rows are durable).
func TestCloseLeavesQueuedMaterializationsToRecovery(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize = 1 })
	e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
	holdLane(t, e.svc) // the worker waits for the lane with the chunks queued behind it
	const n = 20
	for i := range n {
		e.svc.materializeNow(t.Context(), MaterializeTask{User: e.user, ChunkID: fmt.Sprintf("c%d", i), Seq: uint64(i + 1)})
	}
	e.queue.hang.Store(true)
	e.svc.Close()
	if got := testutil.ToFloat64(e.svc.m.inline.WithLabelValues(inlineClosing)); got != n {
		t.Errorf("chunks counted as closing: %v, want %d", got, n)
	}
	if got := testutil.ToFloat64(e.svc.m.enqueueFailed); got != 1 {
		t.Errorf("enqueues tried at shutdown: %v failed, want 1 (then none)", got)
	}
	e.svc.lanes.Release()
}
