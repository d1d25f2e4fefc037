package hedge

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// quietHedger is a Hedger with a fixed cutoff far above the reads of these tests, no warm-up
// reads and no scheduling-latency sampling: what Do costs when the primary answers well.
func quietHedger(tb testing.TB) *Hedger {
	tb.Helper()
	p := DefaultPolicy()
	p.Warmup = 0
	p.Mode = ModeFixed
	p.Delay = 500 * time.Millisecond
	h, err := New(p, Options{Registerer: prometheus.NewRegistry(), WindowSize: 64, SchedLatency: NoSchedLatency})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// A healthy primary is read on the caller's goroutine: Do starts no goroutine of its own
// before the cutoff, and the standby is never called.
func TestHealthyPrimaryStartsNoGoroutine(t *testing.T) {
	h := quietHedger(t)
	before := runtime.NumGoroutine()
	during := -1
	primary := func(context.Context) (int, error) {
		during = runtime.NumGoroutine()
		return 7, nil
	}
	standby := func(context.Context) (int, error) {
		t.Error("the standby was read although the primary answered before the cutoff")
		return 0, nil
	}
	got, out, err := Do(t.Context(), h, primary, standby)
	if err != nil || got != 7 || out.From != Primary || out.Hedged {
		t.Fatalf("Do = %d, %+v, %v; want 7 from the primary, not hedged", got, out, err)
	}
	if during != before {
		t.Errorf("goroutines during the primary read = %d, before Do = %d: Do started %d", during, before, during-before)
	}
}

// BenchmarkDoHealthy is one hedged read whose primary answers at once: the steady state of
// the read path.
func BenchmarkDoHealthy(b *testing.B) {
	h := quietHedger(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	primary := func(context.Context) (int, error) { return 1, nil }
	standby := func(context.Context) (int, error) { return 2, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Do(ctx, h, primary, standby); err != nil {
			b.Fatal(err)
		}
	}
}

// A healthy read allocates only its call state, the primary's context and the cutoff timer:
// no channel, goroutine or closure per store.
func TestHealthyReadAllocs(t *testing.T) {
	h := quietHedger(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	primary := func(context.Context) (int, error) { return 1, nil }
	standby := func(context.Context) (int, error) { return 2, nil }
	const most = 8
	if n := testing.AllocsPerRun(200, func() {
		if _, _, err := Do(ctx, h, primary, standby); err != nil {
			t.Fatal(err)
		}
	}); n > most {
		t.Errorf("a healthy hedged read allocates %v times, want at most %d", n, most)
	}
}
