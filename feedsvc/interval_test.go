package feedsvc

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// settableClock is a test clock for Service.now.
type settableClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *settableClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (g *fakeGen) tries() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.attempts
}

// A first page sooner than MinChunkInterval after the user's last generator call serves the
// feed as it stands, with no generator call and the status "recent"; after the interval the
// generator is asked again. A failed call counts as a call: a failing generator is not asked
// on every reload either.
func TestMinChunkInterval(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.MinChunkInterval = time.Minute })
	clk := &settableClock{t: time.Unix(1_800_000_000, 0)}
	e.svc.now = clk.now

	p := e.get(t, "", 100)
	if diff := cmp.Diff(pins(1, 5), freshPins(p)); diff != "" || p.FreshStatus != FreshIncluded {
		t.Fatalf("first visit: status %q, fresh (-want +got):\n%s", p.FreshStatus, diff)
	}
	clk.advance(10 * time.Second)
	p = e.get(t, "", 100)
	if p.FreshStatus != FreshRecent || !strings.Contains(p.FreshDetail, "min_chunk_interval") {
		t.Errorf("visit 10s later: status %q (%q), want recent", p.FreshStatus, p.FreshDetail)
	}
	if diff := cmp.Diff(pins(1, 5), pagePins(p)); diff != "" {
		t.Errorf("visit 10s later: page (-want +got):\n%s", diff)
	}
	if len(freshPins(p)) != 0 {
		t.Errorf("visit 10s later: fresh %v, want none", freshPins(p))
	}
	if got := e.gen.tries(); got != 1 {
		t.Fatalf("generator calls after two visits 10s apart = %d, want 1", got)
	}

	clk.advance(50 * time.Second) // a minute after the first call
	p = e.get(t, "", 100)
	if diff := cmp.Diff(pins(6, 10), freshPins(p)); diff != "" || p.FreshStatus != FreshIncluded {
		t.Fatalf("visit a minute later: status %q, fresh (-want +got):\n%s", p.FreshStatus, diff)
	}
	if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
		t.Errorf("visit a minute later: page (-want +got):\n%s", diff)
	}

	e.gen.mu.Lock()
	e.gen.err = errGen
	e.gen.mu.Unlock()
	clk.advance(time.Minute)
	if p := e.get(t, "", 100); p.FreshStatus != FreshGeneratorError {
		t.Fatalf("status %q with the generator failing, want generator_error", p.FreshStatus)
	}
	clk.advance(time.Second)
	if p := e.get(t, "", 100); p.FreshStatus != FreshRecent {
		t.Errorf("status %q a second after a failed call, want recent", p.FreshStatus)
	}
	if got := e.gen.tries(); got != 3 {
		t.Errorf("generator calls = %d, want 3 (none for the reload after the failure)", got)
	}

	// Another user is not held back by this one's calls.
	other := userID(t, 2)
	if p, err := e.svc.GetFeed(t.Context(), Request{User: other, PageSize: 10}); err != nil || p.FreshStatus == FreshRecent {
		t.Errorf("another user's first visit: status %q, %v; want a generator call", p.FreshStatus, err)
	}
}

// With preparation on, a page served from a prepared chunk prepares the next one no sooner
// than MinChunkInterval after the last generator call, and a page inside the interval still
// serves a prepared chunk it finds.
func TestMinChunkIntervalPreparation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.PrepareAfter, c.MinChunkInterval = time.Millisecond, interval })
		start := time.Now()
		e.get(t, "", 100) // pins 1-5; the preparation waits for the interval
		// sleep: a quarter of the interval passes, in which the preparation must not run.
		time.Sleep(interval / 4)
		if got := e.gen.calls(); got != 1 {
			t.Fatalf("generator calls %v after the first page = %d, want 1 (the preparation waits)", interval/4, got)
		}
		e.svc.Wait()
		// (The clock the interval is kept by counts whole milliseconds.)
		if got, took := e.gen.calls(), time.Since(start); got != 2 || took < interval-5*time.Millisecond {
			t.Fatalf("generator calls = %d after %v, want 2 after at least %v", got, took, interval)
		}
		// Inside the interval of the preparation's call: the prepared chunk is served.
		p := e.get(t, "", 100)
		if diff := cmp.Diff(pins(6, 10), freshPins(p)); diff != "" || p.FreshStatus != FreshIncluded {
			t.Fatalf("second visit: status %q, fresh (-want +got):\n%s", p.FreshStatus, diff)
		}
		// sleep: a quarter of the interval passes, in which the next preparation must not run.
		time.Sleep(interval / 4)
		if got := e.gen.calls(); got != 2 {
			t.Errorf("generator calls soon after the second visit = %d, want 2 (the next preparation waits)", got)
		}
		// A page with no prepared chunk, inside the interval, is the feed as it stands.
		if p := e.get(t, "", 100); p.FreshStatus != FreshRecent {
			t.Errorf("third visit: status %q, want recent", p.FreshStatus)
		}
		e.svc.Wait()
		if got := e.gen.calls(); got != 3 {
			t.Errorf("generator calls after the interval = %d, want 3", got)
		}
	})
}

// The interval is live: the knobs file and the admin API set it. An admin client that does not
// send it keeps it, and an admin change keeps the knobs ServiceConfig does not carry.
func TestMinChunkIntervalKnobs(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.InlineMaterialize = 3 })
	if err := e.svc.ApplyKnobs([]byte(`{"service": {"min_chunk_interval": "2s"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Config().MinChunkInterval; got != 2*time.Second {
		t.Fatalf("after the knobs file: %v, want 2s", got)
	}
	if err := e.svc.ApplyKnobs([]byte(`{"service": {"min_chunk_interval": "2h"}}`)); err == nil {
		t.Error("min_chunk_interval 2h accepted")
	}
	_, admin := dial(t, e)
	ctx := t.Context()
	c, err := admin.GetServiceConfig(ctx, &feedv1.GetServiceConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c.GetMinChunkIntervalMs() != 2000 {
		t.Errorf("admin config: min_chunk_interval_ms %v, want 2000", c.GetMinChunkIntervalMs())
	}
	c.MinChunkIntervalMs = nil
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Config(); got.MinChunkInterval != 2*time.Second || got.InlineMaterialize != 3 {
		t.Errorf("after an admin change without them: interval %v, inline materialize %d; want 2s and 3 kept", got.MinChunkInterval, got.InlineMaterialize)
	}
	c.MinChunkIntervalMs = proto.Float64(0)
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.Config().MinChunkInterval; got != 0 {
		t.Errorf("interval %v, want 0 (no bound)", got)
	}
	c.MinChunkIntervalMs = proto.Float64(-1)
	if _, err := admin.SetServiceConfig(ctx, c); err == nil {
		t.Error("min_chunk_interval_ms -1 accepted")
	}
}
