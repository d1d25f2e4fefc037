package feedsvc

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/quiet"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

func freshPins(p Page) []zen.ID {
	var out []zen.ID
	for _, it := range p.Items {
		if it.Fresh {
			out = append(out, it.Pin)
		}
	}
	return out
}

func (g *fakeGen) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.chunks
}

// fail makes every later generator call fail.
func (g *fakeGen) fail() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = errGen
}

// newPreparedEnv is an env (mod applied after preparation is turned on) whose user has had a
// first page (pins 1-5, materialized) and the preparation it scheduled (pins 6-10); it returns
// the prepared row as the primary holds it.
func newPreparedEnv(t *testing.T, mod func(*Deps)) (*env, preparedRow) {
	t.Helper()
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter = time.Millisecond })
	if mod != nil {
		e.rebuild(t, mod)
	}
	e.get(t, "", 100)
	e.svc.Wait()
	e.materialize(t)
	before, err := readPage(t.Context(), e.primary, e.user, nil, 100, 0)
	if err != nil || len(before.prepared) != 1 {
		t.Fatalf("prepared rows after the preparation: %d (%v), want 1", len(before.prepared), err)
	}
	return e, before.prepared[0]
}

// wantSettled fails t unless the user's feed on the primary has no prepared row and no pending
// chunk left.
func (e *env) wantSettled(t *testing.T, when string) {
	t.Helper()
	after, err := readPage(t.Context(), e.primary, e.user, nil, 100, 0)
	if err != nil || len(after.prepared) != 0 || len(after.pendingPins) != 0 {
		t.Errorf("%s: %d prepared, %d pending pins (%v), want none", when, len(after.prepared), len(after.pendingPins), err)
	}
}

// A first page prepares the next chunk; the next first page serves it fresh without calling
// the generator, and the chunk is materialized in its place after it is served, not before.
// With a Liveness the read goes through filterLive, which must keep the prepared rows.
func TestPreparedChunkServed(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(map[bool]string{false: "no liveness", true: "liveness"}[live], func(t *testing.T) {
			e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter = time.Millisecond })
			if live {
				e.rebuild(t, func(d *Deps) { d.Liveness = &fakeLiveness{deleted: map[zen.ID]bool{}} })
			}
			testPreparedChunkServed(t, e)
		})
	}
}

func testPreparedChunkServed(t *testing.T, e *env) {
	p := e.get(t, "", 100)
	if diff := cmp.Diff(pins(1, 5), freshPins(p)); diff != "" {
		t.Fatalf("first page fresh (-want +got):\n%s", diff)
	}
	e.svc.Wait() // the preparation
	if got := e.gen.calls(); got != 2 {
		t.Fatalf("generator calls after the preparation = %d, want 2", got)
	}
	if got := len(e.queue.tasks); got != 1 {
		t.Fatalf("materialize tasks = %d, want 1 (a prepared chunk waits for its visit)", got)
	}
	e.materialize(t)

	p = e.get(t, "", 100)
	if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
		t.Fatalf("second page (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pins(6, 10), freshPins(p)); diff != "" {
		t.Errorf("second page fresh (-want +got):\n%s", diff)
	}
	if p.FreshStatus != FreshIncluded {
		t.Errorf("status %q, want included", p.FreshStatus)
	}
	// A generator call on the request would have put pins 11-15 on the page; the page served
	// from a prepared chunk prepares the next one at once.
	e.svc.Wait()
	e.materialize(t)
	if got := e.gen.calls(); got != 3 {
		t.Errorf("generator calls after the second preparation = %d, want 3", got)
	}
	// The third visit serves the second prepared chunk; the feed keeps every chunk in order.
	p = e.get(t, "", 100)
	if diff := cmp.Diff(cat(pins(11, 15), pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
		t.Fatalf("third page (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pins(11, 15), freshPins(p)); diff != "" {
		t.Errorf("third page fresh (-want +got):\n%s", diff)
	}
	e.svc.Wait()
	e.materialize(t)
	e.gen.mu.Lock()
	settled := e.gen.settled
	e.gen.mu.Unlock()
	if diff := cmp.Diff(map[string]bool{"c1": true, "c2": true, "c3": true}, settled); diff != "" {
		t.Errorf("settled chunks (-want +got):\n%s", diff)
	}
}

// Concurrent first pages serve a prepared chunk fresh once: one takes it from the preparer's
// memory, the others show its pins as feed items.
func TestPreparedChunkServedOnce(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter = time.Millisecond })
	e.get(t, "", 100)
	e.svc.Wait()
	e.gen.mu.Lock()
	e.gen.err = errGen // a page that misses the prepared chunk has nothing fresh of its own
	e.gen.mu.Unlock()
	const n = 8
	pages := make([]Page, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		// Not e.get: its wait for the enqueues, beside another page's first enqueue, is a
		// WaitGroup reused while waited on (the race detector flagged it once).
		wg.Go(func() {
			pages[i], errs[i] = e.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 100})
		})
	}
	wg.Wait()
	e.svc.enqueues.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
	}
	var fresh []zen.ID
	for _, p := range pages {
		fresh = append(fresh, freshPins(p)...)
		if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
			t.Errorf("page (-want +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff(pins(6, 10), fresh); diff != "" {
		t.Errorf("fresh across %d concurrent pages (-want +got):\n%s", n, diff)
	}
}

// A prepared chunk older than PreparedMaxAge is served beside a new chunk: the new one first,
// both fresh.
func TestPreparedChunkStale(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.PrepareAfter, c.PreparedMaxAge = time.Millisecond, time.Millisecond
	})
	e.get(t, "", 100)
	e.svc.Wait()
	// sleep: the prepared chunk grows older than its 1 ms PreparedMaxAge.
	time.Sleep(5 * time.Millisecond)
	p := e.get(t, "", 100)
	if diff := cmp.Diff(cat(pins(11, 15), pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
		t.Fatalf("page (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cat(pins(11, 15), pins(6, 10)), freshPins(p)); diff != "" {
		t.Errorf("fresh (-want +got):\n%s", diff)
	}
}

// The write that marks a prepared chunk served comes after the page, and a store can come back
// with the row prepared: the write lost, a standby promoted before the mark was copied to it, a
// restore from a backup. The process that showed the chunk has no memory of it any more, so it
// shows it as feed items, never fresh again, whether its materialization was lost too or not;
// each pin is in the feed once and none is lost.
func TestPreparedChunkLostFlip(t *testing.T) {
	for _, jobSurvived := range []bool{false, true} {
		t.Run(map[bool]string{false: "job lost", true: "job survived"}[jobSurvived], func(t *testing.T) {
			e, p := newPreparedEnv(t, nil)
			e.gen.fail() // nothing more to prepare or generate
			if diff := cmp.Diff(pins(6, 10), freshPins(e.get(t, "", 100))); diff != "" {
				t.Fatalf("visit fresh (-want +got):\n%s", diff)
			}
			e.svc.Wait()
			// The store comes back without the served mark: the row is prepared again.
			if err := e.repl.Apply(t.Context(), []zen.Mutation{{Key: pendingKey(e.user, p.seq), Value: p.row}}); err != nil {
				t.Fatal(err)
			}
			var wantFresh []zen.ID
			if jobSurvived {
				e.materialize(t)
			} else {
				e.queue.take()
			}
			page := e.get(t, "", 100)
			if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(page)); diff != "" {
				t.Errorf("page after the crash (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantFresh, freshPins(page)); diff != "" {
				t.Errorf("fresh after the crash (-want +got):\n%s", diff)
			}
			e.svc.Wait()
			e.materialize(t)
			page = e.get(t, "", 100)
			if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(page)); diff != "" {
				t.Errorf("materialized feed (-want +got):\n%s", diff)
			}
			e.wantSettled(t, "after materialization")
		})
	}
}

// stallCAS is a table whose compare-and-sets, while stall is set, signal started and wait
// for release: a page that waits on one cannot return until then.
type stallCAS struct {
	zen.Table
	stall   atomic.Bool
	started chan struct{}
	release chan struct{}
}

func (s *stallCAS) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if s.stall.Load() {
		s.started <- struct{}{}
		<-s.release
	}
	return s.Table.CheckAndSet(ctx, key, expected, value)
}

// A page that shows a prepared chunk writes nothing before it answers: with every
// compare-and-set of the primary stalled, it returns the chunk fresh; the served mark is
// written after it, and then the chunk is materialized in its place.
func TestPreparedChunkNoWriteOnPage(t *testing.T) {
	st := &stallCAS{started: make(chan struct{}, 16), release: make(chan struct{})}
	e, _ := newPreparedEnv(t, func(d *Deps) { st.Table = d.Primary; d.Primary = st })
	e.gen.fail() // nothing more to prepare
	st.stall.Store(true)
	type got struct {
		p   Page
		err error
	}
	done := make(chan got, 1)
	go func() {
		p, err := e.svc.GetFeed(t.Context(), Request{User: e.user, PageSize: 100})
		done <- got{p, err}
	}()
	var g got
	select {
	case g = <-done:
	case <-time.After(10 * time.Second):
		close(st.release)
		t.Fatal("the page waited on a stalled compare-and-set")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	if diff := cmp.Diff(pins(6, 10), freshPins(g.p)); diff != "" {
		t.Errorf("fresh with the primary's compare-and-sets stalled (-want +got):\n%s", diff)
	}
	select {
	case <-st.started: // the served mark, after the answer
	case <-time.After(10 * time.Second):
		t.Fatal("no served mark after the page")
	}
	st.stall.Store(false)
	close(st.release)
	e.svc.Wait()
	e.materialize(t)
	e.wantSettled(t, "after the mark and the materialization")
	if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(e.get(t, "", 100))); diff != "" {
		t.Errorf("feed (-want +got):\n%s", diff)
	}
}

// A prepared chunk is shown fresh only by the incarnation that prepared it. Another one (a
// second process on the same stores, or this one restarted) shows it as feed items and marks
// it served, and then the first one does not show it fresh either: the chunk was seen. A row
// written before rows named their owner is shown by nobody as fresh.
func TestPreparedChunkOtherIncarnation(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "owned", true: "no owner"}[legacy], func(t *testing.T) {
			e, row := newPreparedEnv(t, nil)
			if legacy {
				pc := row.pc
				pc.Owner = 0
				if err := e.repl.Apply(t.Context(), []zen.Mutation{{Key: pendingKey(e.user, row.seq), Value: encodePending(pc)}}); err != nil {
					t.Fatal(err)
				}
			} else if row.pc.Owner != e.svc.incarnation {
				t.Fatalf("prepared row owner %d, want the preparing service's %d", row.pc.Owner, e.svc.incarnation)
			}
			e.gen.fail() // nothing fresh of its own for either
			first := e.svc
			e.rebuild(t, nil) // a second process on the same stores
			if e.svc.incarnation == first.incarnation {
				t.Fatal("two services share an incarnation")
			}
			p := e.get(t, "", 100)
			if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
				t.Errorf("the other's page (-want +got):\n%s", diff)
			}
			if got := freshPins(p); len(got) != 0 {
				t.Errorf("the other incarnation showed %v as fresh", got)
			}
			e.svc.Wait()
			e.svc = first
			p = e.get(t, "", 100)
			if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
				t.Errorf("the preparer's page (-want +got):\n%s", diff)
			}
			if got := freshPins(p); len(got) != 0 {
				t.Errorf("the preparer showed %v as fresh after another showed them as feed items", got)
			}
			e.svc.Wait()
			e.materialize(t)
			e.wantSettled(t, "after materialization")
		})
	}
}

// The preparation knobs are live: the knobs file and the admin API set them, and an admin
// client that does not know them (sends neither field) leaves them as they are.
func TestPrepareKnobs(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.svc.ApplyKnobs([]byte(`{"service": {"prepare_after": "250ms", "prepared_max_age": "5s"}}`)); err != nil {
		t.Fatal(err)
	}
	if c := e.svc.Config(); c.PrepareAfter != 250*time.Millisecond || c.PreparedMaxAge != 5*time.Second {
		t.Fatalf("after the knobs file: prepare after %v, max age %v", c.PrepareAfter, c.PreparedMaxAge)
	}
	if err := e.svc.ApplyKnobs([]byte(`{"service": {"prepared_max_age": "0s"}}`)); err == nil {
		t.Error("prepared_max_age 0s accepted")
	}
	_, admin := dial(t, e)
	ctx := t.Context()
	c, err := admin.GetServiceConfig(ctx, &feedv1.GetServiceConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c.GetPrepareAfterMs() != 250 || c.GetPreparedMaxAgeMs() != 5000 {
		t.Errorf("admin config: prepare_after_ms %v, prepared_max_age_ms %v; want 250, 5000", c.GetPrepareAfterMs(), c.GetPreparedMaxAgeMs())
	}
	c.PrepareAfterMs, c.PreparedMaxAgeMs = nil, nil
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Config().PrepareAfter; got != 250*time.Millisecond {
		t.Errorf("prepare after %v after a config without it, want 250ms kept", got)
	}
	c.PrepareAfterMs = proto.Float64(0)
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Config().PrepareAfter; got != 0 {
		t.Errorf("prepare after %v, want 0 (off)", got)
	}
}

// A page whose generator call failed schedules no preparation: it would ask the failing
// generator again.
func TestPrepareNotAfterGeneratorFailure(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter = time.Millisecond })
	e.gen.mu.Lock()
	e.gen.err = errGen
	e.gen.mu.Unlock()
	if p := e.get(t, "", 100); p.FreshStatus != FreshGeneratorError {
		t.Fatalf("status %q, want generator_error", p.FreshStatus)
	}
	e.svc.Wait()
	e.gen.mu.Lock()
	defer e.gen.mu.Unlock()
	if e.gen.attempts != 1 {
		t.Errorf("generator calls = %d, want 1 (no preparation after a failure)", e.gen.attempts)
	}
}

// With PrepareReturning a single visit prepares nothing; a user back within PreparedMaxAge
// gets the next chunk prepared, and one back after longer is a single visit again.
func TestPrepareReturning(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.PrepareAfter, c.PrepareReturning, c.PreparedMaxAge = time.Millisecond, true, 30*time.Second
	})
	var nowMs atomic.Int64
	nowMs.Store(1_800_000_000_000)
	e.rebuild(t, func(d *Deps) { d.Now = func() time.Time { return time.UnixMilli(nowMs.Load()) } })
	visit := func(at time.Duration, wantCalls int, wantFresh []zen.ID) {
		t.Helper()
		nowMs.Store(1_800_000_000_000 + at.Milliseconds())
		p := e.get(t, "", 100)
		e.svc.Wait()
		e.materialize(t)
		if diff := cmp.Diff(wantFresh, freshPins(p)); diff != "" {
			t.Errorf("visit at %v: fresh (-want +got):\n%s", at, diff)
		}
		if got := e.gen.calls(); got != wantCalls {
			t.Errorf("visit at %v: generator calls %d, want %d", at, got, wantCalls)
		}
	}
	visit(0, 1, pins(1, 5))                // a first visit: nothing prepared after it
	visit(10*time.Second, 3, pins(6, 10))  // back within 30 s: its own chunk, then one prepared
	visit(12*time.Second, 4, pins(11, 15)) // the prepared chunk, then the next prepared
	// Back after 60 s: the prepared chunk (16-20) is old, served after a new one (21-25), and
	// nothing is prepared after it.
	visit(72*time.Second, 5, cat(pins(21, 25), pins(16, 20)))
}

// A preparation still queued when the user's next first page asks the generator is taken over
// by that page: the pools are asked once for the visit, and the worker that later dequeues the
// preparation skips it. The preparation waits because the only background lane is held.
func TestQueuedPreparationTakenByPage(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, 0 })
	lanes := quiet.NewLanes(1)
	e.rebuild(t, func(d *Deps) { d.Lanes = lanes })
	if err := lanes.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	held := true
	defer func() {
		if held {
			lanes.Release()
		}
	}()
	queued := func() float64 { return testutil.ToFloat64(e.svc.m.prepQueued) }
	taken := func() float64 { return testutil.ToFloat64(e.svc.m.prepSchedule.WithLabelValues(prepTaken)) }

	p := e.get(t, "", 100) // asks the generator (pins 1-5), schedules the preparation
	if diff := cmp.Diff(pins(1, 5), freshPins(p)); diff != "" {
		t.Fatalf("first page: fresh (-want +got):\n%s", diff)
	}
	waitFor(t, "the preparation queued behind the held lane", func() bool { return queued() == 1 })

	p = e.get(t, "", 100) // the preparation has not run: the page asks the generator itself
	if diff := cmp.Diff(pins(6, 10), freshPins(p)); diff != "" {
		t.Errorf("second page: fresh (-want +got):\n%s", diff)
	}
	if got := taken(); got != 1 {
		t.Errorf("preparations taken over by a page: %v, want 1", got)
	}
	if got := e.gen.calls(); got != 2 {
		t.Errorf("generator calls after two pages: %d, want 2", got)
	}

	// The second page scheduled a preparation of its own; the taken-over one, dequeued once the
	// lane is free, asks nothing.
	lanes.Release()
	held = false
	e.svc.Wait()
	if got := e.gen.calls(); got != 3 {
		t.Errorf("generator calls once the lane is free: %d, want 3 (the second page's preparation only)", got)
	}
	if got := queued(); got != 0 {
		t.Errorf("preparations still counted as queued: %v, want 0", got)
	}
	e.materialize(t)
	after, err := readPage(t.Context(), e.primary, e.user, nil, 100, 0)
	if err != nil || len(after.prepared) != 1 {
		t.Fatalf("prepared rows: %d (%v), want 1: the second page's", len(after.prepared), err)
	}
	var prepared []zen.ID
	for _, it := range after.prepared[0].pc.Items {
		prepared = append(prepared, it.Pin)
	}
	if diff := cmp.Diff(pins(11, 15), prepared); diff != "" {
		t.Errorf("prepared chunk (-want +got):\n%s", diff)
	}
}
