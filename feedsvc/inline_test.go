package feedsvc

import (
	"context"
	"errors"
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
			for _, r := range rows {
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
		e.svc.inlineRunning.Add(2) // both slots taken
		e.get(t, "", 10)
		e.svc.Wait()
		e.svc.inlineRunning.Add(-2)
		if diff := cmp.Diff(map[string]float64{inlineBusy: 1}, inlineCounts(e)); diff != "" {
			t.Errorf("materialize paths (-want +got):\n%s", diff)
		}
		if jobs := e.queue.take(); len(jobs) != 1 {
			t.Fatalf("%d jobs enqueued with every inline slot taken, want 1", len(jobs))
		}
	})
}

// TestBackgroundLanes: the read path's background work runs only in a free lane
// (Deps.BackgroundLanes). With the one lane held, a served chunk's inline materialization waits
// laneWait and becomes a job, and a preparation is skipped as busy; the pages are answered all
// the same. Once the lane is free both run in process again.
func TestBackgroundLanes(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.InlineMaterialize, c.PrepareAfter = 4, time.Millisecond
	})
	e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
	if got := cap(e.svc.lanes); got != 1 {
		t.Fatalf("lanes = %d, want 1", got)
	}
	busyPrep := func() float64 { return testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepBusy)) }

	e.svc.lanes <- struct{}{} // something else holds the only lane
	start := time.Now()
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) != 5 {
		t.Fatalf("page with the lane held: status %q, %d fresh; want included, 5", p.FreshStatus, len(freshPins(p)))
	}
	e.svc.Wait()
	if waited := time.Since(start); waited < laneWait {
		t.Errorf("background work gave up after %v, want at least laneWait (%v)", waited, laneWait)
	}
	if diff := cmp.Diff(map[string]float64{inlineBusy: 1}, inlineCounts(e)); diff != "" {
		t.Errorf("materialize paths with the lane held (-want +got):\n%s", diff)
	}
	if jobs := e.queue.take(); len(jobs) != 1 {
		t.Errorf("%d jobs enqueued with the lane held, want 1", len(jobs))
	}
	if got := busyPrep(); got != 1 {
		t.Errorf("preparations skipped as busy = %v, want 1", got)
	}
	if got := e.gen.calls(); got != 1 {
		t.Errorf("generator calls = %d, want 1 (no preparation ran)", got)
	}

	<-e.svc.lanes // the lane is free again
	e.get(t, "", 10)
	e.svc.Wait()
	if diff := cmp.Diff(map[string]float64{inlineBusy: 1, inlineDone: 1}, inlineCounts(e)); diff != "" {
		t.Errorf("materialize paths with the lane free (-want +got):\n%s", diff)
	}
	if got := e.gen.calls(); got != 3 {
		t.Errorf("generator calls = %d, want 3 (the page's and its preparation's)", got)
	}
	if got := len(e.svc.lanes); got != 0 {
		t.Errorf("%d lanes still held after the work ended, want 0", got)
	}
}

// TestPreparationWaitsForASlot: with maxPreparing preparations running, the next one waits
// for a slot (up to laneWait) rather than being skipped: it runs once a slot frees, and is
// skipped as busy only when none does in time.
func TestPreparationWaitsForASlot(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, 0 })
	busyPrep := func() float64 { return testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepBusy)) }
	recorded := func() float64 { return testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepRecorded)) }
	for range maxPreparing {
		e.svc.prepSlots <- struct{}{} // every slot held by another user's preparation
	}
	go func() {
		time.Sleep(laneWait / 5)
		<-e.svc.prepSlots // one of them ends
	}()
	e.get(t, "", 10)
	e.svc.Wait()
	if got := busyPrep(); got != 0 {
		t.Errorf("preparations skipped as busy = %v, want 0 (a slot came free within laneWait)", got)
	}
	if got := recorded(); got != 1 {
		t.Errorf("preparations recorded = %v, want 1", got)
	}

	e.svc.prepSlots <- struct{}{} // every slot held again, for good
	start := time.Now()
	if p := e.get(t, "", 10); p.FreshStatus != FreshIncluded {
		t.Errorf("page after the preparation: status %q, want included (the prepared chunk)", p.FreshStatus)
	}
	e.svc.Wait()
	if got := busyPrep(); got != 1 {
		t.Errorf("preparations skipped as busy = %v, want 1 (no slot came free)", got)
	}
	if waited := time.Since(start); waited < laneWait {
		t.Errorf("the preparation gave up after %v, want at least laneWait (%v)", waited, laneWait)
	}
}

// TestVisitWhilePreparationWaits: a preparation that is due counts as the user's generator
// call from then on, so a visit while it waits for a slot is served the feed as it stands
// (feed.min_chunk_interval) instead of calling the generator beside it.
func TestVisitWhilePreparationWaits(t *testing.T) {
	const interval = 300 * time.Millisecond
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, interval })
	for range maxPreparing {
		e.svc.prepSlots <- struct{}{} // every slot held: the preparation waits laneWait
	}
	if p := e.get(t, "", 10); p.FreshStatus != FreshIncluded {
		t.Fatalf("first page: status %q, want included", p.FreshStatus)
	}
	// The preparation is due interval after that generator call; visit while it waits.
	time.Sleep(interval + laneWait/2) // halfway through its wait: 125 ms of slack either side
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshRecent {
		t.Errorf("visit while the preparation waits for a slot: status %q, want recent", p.FreshStatus)
	}
	if got := e.gen.calls(); got != 1 {
		t.Errorf("generator calls = %d, want 1 (the first page's)", got)
	}
	e.svc.Wait()
}

// TestBackgroundLanesDefault: half the processors, at least one; out of range is refused.
func TestBackgroundLanesDefault(t *testing.T) {
	if got, want := defaultBackgroundLanes(), max(1, runtime.GOMAXPROCS(0)/2); got != want {
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

// TestRecentVisitPreparesNext: a visit within the interval that finds nothing prepared
// schedules the next preparation, so that a user whose preparations found the pools empty and
// who keeps visiting is not sent through the generator on the first visit after the interval.
func TestRecentVisitPreparesNext(t *testing.T) {
	const interval = 500 * time.Millisecond
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, interval })
	e.gen.mu.Lock()
	e.gen.size = 0 // the pools are empty
	e.gen.mu.Unlock()
	if p := e.get(t, "", 10); p.FreshStatus != FreshEmpty {
		t.Fatalf("first page: status %q, want empty", p.FreshStatus)
	}
	e.svc.Wait() // its preparations: prepareTries, all empty
	attempts := func() int {
		e.gen.mu.Lock()
		defer e.gen.mu.Unlock()
		return e.gen.attempts
	}
	if got, want := attempts(), 1+prepareTries; got != want {
		t.Fatalf("generator calls after the empty preparations = %d, want %d", got, want)
	}
	e.gen.mu.Lock()
	e.gen.size = 5 // pins arrive
	e.gen.mu.Unlock()
	if p := e.get(t, "", 10); p.FreshStatus != FreshRecent {
		t.Fatalf("visit within the interval: status %q, want recent", p.FreshStatus)
	}
	time.Sleep(interval)
	e.svc.Wait()
	if got, want := attempts(), 2+prepareTries; got != want {
		t.Errorf("generator calls once the interval passed = %d, want %d (a preparation after the recent visit)", got, want)
	}
	p := e.get(t, "", 10)
	if p.FreshStatus != FreshIncluded || len(p.Items) == 0 {
		t.Errorf("visit after the interval: status %q, %d items; want the prepared chunk", p.FreshStatus, len(p.Items))
	}
	if got, want := attempts(), 2+prepareTries; got != want {
		t.Errorf("generator calls after the visit = %d, want %d (served the prepared chunk, no call)", got, want)
	}
	e.svc.Wait()
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
