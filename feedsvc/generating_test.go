package feedsvc

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
)

// TestMaxGenerating: with Config.MaxGenerating first pages waiting on the generator, another
// first page serves the feed as it stands, flagged deferred, and asks the generator nothing;
// the bound holds until the generator call returns, late or not, and then frees.
func TestMaxGenerating(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.MaxGenerating, c.GeneratorDeadline = 1, 10*time.Millisecond
	})
	ctx := t.Context()
	b := userID(t, 2)
	getB := func() Page {
		t.Helper()
		p, err := e.svc.GetFeed(ctx, Request{User: b, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// B's feed holds a chunk already, to show a deferred page is the feed as it stands.
	if p := getB(); p.FreshStatus != FreshIncluded {
		t.Fatalf("B's first page: status %q, want included", p.FreshStatus)
	}
	e.svc.Wait()
	e.materialize(t)

	// The generator hangs past its deadline on A's page: the page leaves, the call does not.
	block := make(chan struct{})
	e.gen.mu.Lock()
	e.gen.block = block
	e.gen.mu.Unlock()
	if p := e.get(t, "", 100); p.FreshStatus != FreshTimeout {
		t.Fatalf("A's page: status %q, want generator_timeout", p.FreshStatus)
	}
	p := getB()
	if p.FreshStatus != FreshDeferred {
		t.Errorf("B's page while A's generator call runs: status %q (%s), want deferred", p.FreshStatus, p.FreshDetail)
	}
	if diff := cmp.Diff(pins(1, 5), pagePins(p)); diff != "" {
		t.Errorf("B's deferred page (-want +got):\n%s", diff)
	}
	if fresh := freshPins(p); len(fresh) != 0 {
		t.Errorf("B's deferred page has fresh pins %v", fresh)
	}
	e.gen.mu.Lock()
	attempts := e.gen.attempts
	e.gen.block = nil
	e.gen.mu.Unlock()
	if attempts != 2 {
		t.Errorf("generator calls = %d, want 2 (the deferred page asks nothing)", attempts)
	}

	close(block)
	e.svc.Wait() // A's late answer settled: the call returned
	if n := e.svc.generating.Load(); n != 0 {
		t.Fatalf("%d first pages counted as waiting on the generator after every call returned", n)
	}
	p = getB()
	if p.FreshStatus != FreshIncluded || len(freshPins(p)) == 0 {
		t.Errorf("B's page once the generator is free: status %q, fresh %v; want included", p.FreshStatus, freshPins(p))
	}
}

// TestDeferredWhileMaterializationsBehind: with materializeBehindAt served chunks waiting for
// their materialization in the process, a first page takes no new chunk from the pools (it is
// served deferred, saying why) and a preparation asks nothing; once the backlog is worked off,
// the next first page asks the generator again.
func TestDeferredWhileMaterializationsBehind(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize, c.PrepareAfter = 4, time.Millisecond })
	for range materializeBehindAt { // queued without a worker: nothing takes them
		e.svc.matQueue <- MaterializeTask{}
	}
	p := e.get(t, "", 100)
	if p.FreshStatus != FreshDeferred || !strings.Contains(p.FreshDetail, "materialization") {
		t.Errorf("first page behind the materializations: status %q (%s), want deferred, saying why", p.FreshStatus, p.FreshDetail)
	}
	if got := e.gen.calls(); got != 0 {
		t.Errorf("generator calls while behind: %d, want 0", got)
	}
	if e.svc.prepare(e.user) {
		t.Errorf("a preparation while behind reported empty pools")
	}
	if got := testutil.ToFloat64(e.svc.m.prepared.WithLabelValues(prepDeferred)); got != 1 || e.gen.calls() != 0 {
		t.Errorf("preparation while behind: deferred %v, generator calls %d; want 1, 0", got, e.gen.calls())
	}
	for range materializeBehindAt {
		<-e.svc.matQueue
	}
	if p := e.get(t, "", 100); p.FreshStatus != FreshIncluded || e.gen.calls() != 1 {
		t.Errorf("first page once caught up: status %q, generator calls %d; want included, 1", p.FreshStatus, e.gen.calls())
	}
	e.svc.Wait()
}
