package hedge

import (
	"context"
	"fmt"
	"runtime"
	"strings"
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
// before the cutoff, and the standby is never called. The check names goroutines by the one
// that created them, so goroutines of other tests starting or ending meanwhile do not count.
func TestHealthyPrimaryStartsNoGoroutine(t *testing.T) {
	h := quietHedger(t)
	caller := goroutineID(t, stacks(false))
	var readOn int
	var startedByCaller []string
	primary := func(context.Context) (int, error) {
		readOn = goroutineID(t, stacks(false))
		startedByCaller = createdBy(stacks(true), caller)
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
	if readOn != caller {
		t.Errorf("the primary was read on goroutine %d, want the caller's, %d", readOn, caller)
	}
	if len(startedByCaller) > 0 {
		t.Errorf("during the primary read, %d goroutines started by the caller were running:\n%s",
			len(startedByCaller), strings.Join(startedByCaller, "\n\n"))
	}
}

// stacks is runtime.Stack's dump of this goroutine, or of all of them.
func stacks(all bool) string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, all)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID reads the number of the first goroutine in a stack dump ("goroutine 7 [running]:").
func goroutineID(tb testing.TB, dump string) int {
	tb.Helper()
	var id int
	if _, err := fmt.Sscanf(dump, "goroutine %d ", &id); err != nil {
		tb.Fatalf("reading the goroutine number of %q: %v", dump[:min(len(dump), 40)], err)
	}
	return id
}

// createdBy returns the stacks of a dump whose goroutine was created by goroutine id.
func createdBy(dump string, id int) []string {
	var out []string
	suffix := fmt.Sprintf(" in goroutine %d\n", id)
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g+"\n", suffix) {
			out = append(out, g)
		}
	}
	return out
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
