package hedge

import (
	"context"
	"crypto/sha256"
	"runtime"
	"sync"
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
			t.Logf("excused %v slow reads; breaker opened %v times", testutil.ToFloat64(h.m.excused), opened())
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

// TestSlowVerdictExcusedBySchedLatency: a primary answering after Max counts against it only
// when the process's scheduling latency does not explain the wait (at least a quarter of Max);
// a primary beaten by a standby answering within the cutoff counts whatever the latency (the
// onset of a hang is seen that way).
func TestSlowVerdictExcusedBySchedLatency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		primary  time.Duration
		sched    time.Duration
		wantOpen bool
	}{
		{"late, no scheduling latency", 150 * time.Millisecond, 0, true},
		{"late, scheduling latency under a quarter of max", 150 * time.Millisecond, 20 * time.Millisecond, true},
		{"late, scheduling latency a quarter of max", 150 * time.Millisecond, 25 * time.Millisecond, false},
		{"beaten, no scheduling latency", 80 * time.Millisecond, 0, true},
		{"beaten, scheduling latency high", 80 * time.Millisecond, 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := DefaultPolicy()
				p.Mode, p.Delay, p.Budget, p.BudgetBurst, p.Warmup = ModeFixed, 8*time.Millisecond, 1, 100, 0
				p.BreakerFailures = 3
				if tc.primary > p.Max {
					p.Mode = ModeOff // no hedge: the primary's own answer is judged
				}
				h, err := New(p, Options{WindowSize: 64, SchedLatency: func() time.Duration { return tc.sched }})
				if err != nil {
					t.Fatal(err)
				}
				for range 10 {
					if _, _, err := Do(t.Context(), h, answer("p", tc.primary, nil), answer("s", time.Millisecond, nil)); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				if open := h.BreakerState() != BreakerClosed; open != tc.wantOpen {
					t.Errorf("breaker %s, want open %v", h.BreakerState(), tc.wantOpen)
				}
			})
		})
	}
}
