package hedge

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeStore is a store read with a latency of 1–3 ms drawn from a seeded generator, plus extra
// delays chosen by slowFor; a read honours its context.
type fakeStore struct {
	mu      sync.Mutex
	rng     *rand.Rand
	slowFor func(start time.Time) time.Duration // extra delay of a read started at start; nil: none
	took    []time.Duration                     // every drawn latency, extra included
}

func newFakeStore(seed uint64) *fakeStore {
	return &fakeStore{rng: rand.New(rand.NewPCG(seed, seed+1))}
}

func (f *fakeStore) read(ctx context.Context) (string, error) {
	f.mu.Lock()
	d := time.Millisecond + time.Duration(f.rng.Int64N(int64(2*time.Millisecond)))
	if f.slowFor != nil {
		d += f.slowFor(time.Now())
	}
	f.took = append(f.took, d)
	f.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return "ok", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (f *fakeStore) set(slowFor func(time.Time) time.Duration) {
	f.mu.Lock()
	f.slowFor = slowFor
	f.mu.Unlock()
}

// p99 of the store's drawn latencies.
func (f *fakeStore) p99() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := slices.Clone(f.took)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// callers runs n calls of Do from c concurrent callers (the bubble's clock) and returns their
// latencies, sorted, and how many the standby answered.
func callers(t *testing.T, h *Hedger, c, n int, primary, standby ReadFunc[string]) ([]time.Duration, int) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	fromStandby := 0
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				start := time.Now()
				_, out, err := Do(t.Context(), h, primary, standby)
				d := time.Since(start)
				if err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				mu.Lock()
				took = append(took, d)
				if out.From == Standby {
					fromStandby++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(took)
	return took, fromStandby
}

// TestHangOnsetConcurrent: 16 callers read a healthy primary, then every primary read hangs
// (+2 s, never failing) while the hedge budget is far too small for every call to hedge. The
// calls in flight at the onset, whose hedges the budget refuses, must not wait for the primary's
// 1 s timeout: the breaker's knowledge that the primary is hung sends them to the standby. The
// 99th percentile stays within the cutoff + the standby's p99 + 50 ms.
func TestHangOnsetConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := DefaultPolicy()
		p.Warmup = 0
		h, err := New(p, Options{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		primary, standby := newFakeStore(1), newFakeStore(2)
		healthy, _ := callers(t, h, 16, 1000, primary.read, standby.read)
		cutoff, _ := h.Cutoff()
		primary.set(func(time.Time) time.Duration { return 2 * time.Second })
		hung, fromStandby := callers(t, h, 16, 1000, primary.read, standby.read)
		bound := cutoff + standby.p99() + 50*time.Millisecond
		p99 := hung[len(hung)*99/100]
		waited := len(hung) - slices.IndexFunc(hung, func(d time.Duration) bool { return d >= p.PrimaryTimeout })
		if waited > len(hung) {
			waited = 0
		}
		t.Logf("healthy p99 %v; hung: p50 %v p99 %v max %v, %d calls waited the %v primary timeout, %d answered by the standby; cutoff %v, standby p99 %v, breaker %s",
			healthy[len(healthy)*99/100], hung[len(hung)/2], p99, hung[len(hung)-1], waited, p.PrimaryTimeout,
			fromStandby, cutoff, standby.p99(), h.BreakerState())
		if p99 > bound {
			t.Errorf("p99 %v with the primary hung, want at most %v (cutoff %v + standby p99 %v + 50ms)", p99, bound, cutoff, standby.p99())
		}
		if waited > 0 {
			t.Errorf("%d calls waited the primary timeout (%v)", waited, p.PrimaryTimeout)
		}
		if got := counter(t, reg, "smartfeed_hedge_breaker_transitions_total", "to", "open"); got == 0 {
			t.Errorf("the breaker never opened with every primary read hung")
		}
	})
}

// TestBreakerIgnoresOnePercentTail: a primary slow 1% of the time must not open the breaker, and
// the share of calls the standby answers stays near the slow share. Two shapes of 1%, with 16
// callers: 1% of reads slow by 1 s, each on its own; and the primary stalling for 50 ms every
// 5 s (a compaction or a pause: every read in flight stalls at once, so the 16 callers meet it
// together and a run of slow reads arrives with no good one between them).
func TestBreakerIgnoresOnePercentTail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		slowFor func(rng *rand.Rand, epoch time.Time) func(time.Time) time.Duration
	}{
		{"1% of reads slow by 1s", func(rng *rand.Rand, _ time.Time) func(time.Time) time.Duration {
			return func(time.Time) time.Duration {
				if rng.Float64() < 0.01 {
					return time.Second
				}
				return 0
			}
		}},
		{"stalled 50ms every 5s", func(_ *rand.Rand, epoch time.Time) func(time.Time) time.Duration {
			const every, stall = 5 * time.Second, 50 * time.Millisecond
			return func(now time.Time) time.Duration {
				// A read started in the stall answers when it ends.
				if in := now.Sub(epoch) % every; in >= every-stall {
					return every - in
				}
				return 0
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				p := DefaultPolicy()
				p.Warmup = 0
				h, err := New(p, Options{Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				primary, standby := newFakeStore(3), newFakeStore(4)
				// The rng is used under primary.mu (slowFor runs there).
				primary.set(tc.slowFor(rand.New(rand.NewPCG(5, 6)), time.Now()))
				const calls = 60_000 // about 7.5 s on the bubble's clock: one stall
				start := time.Now()
				took, fromStandby := callers(t, h, 16, calls, primary.read, standby.read)
				slowShare := 0.01
				share := float64(fromStandby) / calls
				opened := counter(t, reg, "smartfeed_hedge_breaker_transitions_total", "to", "open")
				t.Logf("%v on the clock: p50 %v p99 %v p99.9 %v max %v; standby answered %.2f%%; breaker opened %v times",
					time.Since(start), took[len(took)/2], took[len(took)*99/100], took[len(took)*999/1000], took[len(took)-1], 100*share, opened)
				if opened > 0 {
					t.Errorf("the breaker opened %v times on a primary slow 1%% of the time", opened)
				}
				if share > 2*slowShare {
					t.Errorf("the standby answered %.2f%% of the calls, want at most %.0f%% (twice the slow share)", 100*share, 200*slowShare)
				}
			})
		})
	}
}
