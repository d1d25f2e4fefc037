package hedge

import (
	"context"
	"crypto/sha256"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSaturatedProcessKeepsBreakerClosed saturates the process (one processor, goroutines
// burning it) while the stores are healthy: each read is a few microseconds of work, and every
// read is slow only because its goroutines wait for the processor behind the burners. Judged by their times alone
// (NoSchedLatency) the reads open the breaker, which proves the process is saturated; with the
// runtime's scheduling latency (the default) they are excused and the breaker stays closed.
func TestSaturatedProcessKeepsBreakerClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("saturates the process for about a second")
	}
	for _, tc := range []struct {
		name     string
		sched    func() time.Duration
		wantOpen bool
	}{
		{"judged by time alone", NoSchedLatency, true},
		{"runtime scheduling latency", RuntimeSchedLatency(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			p.Mode, p.Delay, p.Max, p.Warmup = ModeFixed, 2*time.Millisecond, 5*time.Millisecond, 0
			reg := prometheus.NewRegistry()
			h, err := New(p, Options{Registerer: reg, WindowSize: 64, SchedLatency: tc.sched})
			if err != nil {
				t.Fatal(err)
			}
			opened := func() float64 { return testutil.ToFloat64(h.m.brChanges.WithLabelValues(BreakerOpen)) }

			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			stop := make(chan struct{})
			var burners sync.WaitGroup
			for range 2 {
				burners.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						spin(1000)
					}
				})
			}
			// A healthy store: a read is a little work, the same on both sides, with a point
			// where it waits for the processor again (as a read does after I/O or a lock).
			read := func(v string) ReadFunc[string] {
				return func(context.Context) (string, error) {
					spin(5)
					runtime.Gosched()
					spin(5)
					return v, nil
				}
			}
			var callers sync.WaitGroup
			for range 32 {
				callers.Go(func() {
					for range 6 {
						if _, _, err := Do(t.Context(), h, read("p"), read("s")); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			callers.Wait()
			close(stop)
			burners.Wait()
			h.Wait()
			t.Logf("excused %v slow reads; breaker opened %v times", testutil.ToFloat64(h.m.excused.WithLabelValues(excuseLate)), opened())
			if got := opened() > 0; got != tc.wantOpen {
				t.Errorf("breaker opened: %v, want %v (healthy stores, saturated process)", got, tc.wantOpen)
			}
		})
	}
}

// spin burns the processor for n hashes.
func spin(n int) {
	var b [32]byte
	for range n {
		b = sha256.Sum256(b[:])
	}
	runtime.KeepAlive(b)
}

// TestTimeVerdictsExcusedWhileSaturated: the process's scheduling latency is injected (a fake
// saturation signal) and the stores run on the bubble's clock. While the latency is a quarter of
// the policy's Max or more the process is saturated, and no verdict taken on a read's time
// counts against the primary: a read answered after Max, one beaten by the standby, one past
// PrimaryTimeout. A store that errs opens the breaker whatever the load, and below saturation
// (no latency, or a busy machine's latency of a quarter of the cutoff) slow, beaten and timed
// out reads open it as before.
func TestTimeVerdictsExcusedWhileSaturated(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		name     string
		mode     Mode          // off: no hedge on the cutoff, the primary's own answer is judged
		primary  time.Duration // the primary's answer time (the timeout is 1s)
		err      error         // the primary's answer
		sched    time.Duration
		wantOpen bool
	}{
		{"late, no scheduling latency", ModeOff, 150 * time.Millisecond, nil, 0, true},
		{"late, scheduling latency under a quarter of max", ModeOff, 150 * time.Millisecond, nil, 20 * time.Millisecond, true},
		{"late, saturated", ModeOff, 150 * time.Millisecond, nil, 25 * time.Millisecond, false},
		{"beaten, no scheduling latency", ModeFixed, 80 * time.Millisecond, nil, 0, true},
		{"beaten, busy machine (a quarter of the cutoff)", ModeFixed, 80 * time.Millisecond, nil, 2 * time.Millisecond, true},
		{"beaten, saturated", ModeFixed, 80 * time.Millisecond, nil, 50 * time.Millisecond, false},
		{"timed out, no scheduling latency", ModeOff, 2 * time.Second, nil, 0, true},
		{"timed out, saturated", ModeOff, 2 * time.Second, nil, 300 * time.Millisecond, false},
		{"errors, no scheduling latency", ModeOff, time.Millisecond, errDown, 0, true},
		{"errors, saturated", ModeOff, time.Millisecond, errDown, 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := DefaultPolicy()
				p.Mode, p.Delay, p.Budget, p.BudgetBurst, p.Warmup = tc.mode, 8*time.Millisecond, 1, 100, 0
				p.BreakerFailures = 3
				h, err := New(p, Options{WindowSize: 64, SchedLatency: func() time.Duration { return tc.sched }})
				if err != nil {
					t.Fatal(err)
				}
				for range 10 {
					if _, _, err := Do(t.Context(), h, answer("p", tc.primary, tc.err), answer("s", time.Millisecond, nil)); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				if open := h.BreakerState() != BreakerClosed; open != tc.wantOpen {
					t.Errorf("breaker %s after 10 reads, want open %v", h.BreakerState(), tc.wantOpen)
				}
			})
		})
	}
}

// TestSaturatedProbeGivesNoVerdict: the breaker opened on errors and the primary is back, but
// the process is saturated and the half-open breaker's probes answer after Max. A probe's time
// says nothing then: the breaker neither opens again nor closes, and each probe frees its slot
// for the next. Once the process is no longer saturated the next probes close it.
func TestSaturatedProbeGivesNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sched atomic.Int64
		p := DefaultPolicy()
		p.Mode, p.Warmup, p.BreakerFailures, p.BreakerProbes, p.BreakerOpenFor = ModeOff, 0, 2, 2, 100*time.Millisecond
		reg := prometheus.NewRegistry()
		h, err := New(p, Options{Registerer: reg, WindowSize: 64, SchedLatency: func() time.Duration { return time.Duration(sched.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		openBreaker(t, h)
		// sleep: the breaker's open period ends, so it lets probes through.
		time.Sleep(p.BreakerOpenFor)
		sched.Store(int64(50 * time.Millisecond))
		for i := range 3 {
			_, out, err := Do(t.Context(), h, answer("p", 150*time.Millisecond, nil), answer("s", time.Millisecond, nil))
			if err != nil || out.Failover {
				t.Fatalf("call %d while half-open: %+v, %v; want a probe of the primary", i, out, err)
			}
			if s := h.BreakerState(); s != BreakerHalfOpen {
				t.Fatalf("after %d late probes while saturated: breaker %s, want half-open", i+1, s)
			}
		}
		if got := counter(t, reg, "smartfeed_hedge_breaker_excused_total", "verdict", "late"); got != 3 {
			t.Errorf("excused late reads = %v, want 3", got)
		}
		sched.Store(0)
		for range p.BreakerProbes {
			if _, _, err := Do(t.Context(), h, answer("p", time.Millisecond, nil), answer("s", time.Millisecond, nil)); err != nil {
				t.Fatal(err)
			}
		}
		if s := h.BreakerState(); s != BreakerClosed {
			t.Errorf("after %d prompt probes: breaker %s, want closed", p.BreakerProbes, s)
		}
	})
}
