package hedge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// TestBreakerStateMachine drives the breaker with a fake clock through its transitions.
func TestBreakerStateMachine(t *testing.T) {
	p := DefaultPolicy()
	p.BreakerFailures, p.BreakerWindow, p.BreakerSlowRate, p.BreakerProbes = 3, 4, 0.5, 2
	p.BreakerOpenFor = time.Second
	type step struct {
		advance time.Duration
		record  verdict // recorded on the route just taken, unless skip
		skip    bool
	}
	tests := []struct {
		name       string
		steps      []step
		wantRoutes []route
		wantStates []string
	}{
		{
			name:       "failures open it once they are the minimum count; it stays open until open-for passes",
			steps:      []step{{record: failed}, {record: failed}, {record: failed}, {skip: true}, {advance: 500 * time.Millisecond, skip: true}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routeStandby, routeStandby},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerOpen, BreakerOpen, BreakerOpen},
		},
		{
			name:       "a good read between failures: 3 bad of 4 reads is over the rate",
			steps:      []step{{record: failed}, {record: failed}, {record: good}, {record: failed}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routePrimary},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerClosed, BreakerOpen},
		},
		{
			name:       "slow reads open it (a primary that hangs instead of failing)",
			steps:      []step{{record: slow}, {record: slow}, {record: slow}, {skip: true}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routeStandby},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerOpen, BreakerOpen},
		},
		{
			name:       "half the reads slow: it opens when the slow ones reach the minimum count",
			steps:      []step{{record: slow}, {record: good}, {record: slow}, {record: good}, {record: slow}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routePrimary, routePrimary},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerClosed, BreakerClosed, BreakerOpen},
		},
		{
			name: "a third of the reads slow stays under the rate",
			steps: []step{{record: slow}, {record: good}, {record: good}, {record: slow}, {record: good},
				{record: good}, {record: slow}, {record: good}, {record: good}},
			wantRoutes: slices.Repeat([]route{routePrimary}, 9),
			wantStates: slices.Repeat([]string{BreakerClosed}, 9),
		},
		{
			name: "the interval's reads are the window when there are more of them than the ring holds",
			// 6 good reads, then 3 slow ones 100ms later, all within the 1s interval: 3 of 9 is
			// under the rate, though the ring's last 4 hold 3 slow.
			steps: []step{{record: good}, {record: good}, {record: good}, {record: good}, {record: good}, {record: good},
				{advance: 100 * time.Millisecond, record: slow}, {record: slow}, {record: slow}},
			wantRoutes: slices.Repeat([]route{routePrimary}, 9),
			wantStates: slices.Repeat([]string{BreakerClosed}, 9),
		},
		{
			name: "past the interval the ring is the window again",
			steps: []step{{record: good}, {record: good}, {record: good}, {record: good}, {record: good}, {record: good},
				{advance: 2 * time.Second, record: slow}, {record: slow}, {record: slow}},
			wantRoutes: slices.Repeat([]route{routePrimary}, 9),
			wantStates: append(slices.Repeat([]string{BreakerClosed}, 8), BreakerOpen),
		},
		{
			name: "half-open lets one probe through; good probes close it",
			steps: []step{{record: failed}, {record: failed}, {record: failed},
				{advance: time.Second, record: good}, {record: good}, {record: good}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routeProbe, routeProbe, routePrimary},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerOpen, BreakerHalfOpen, BreakerClosed, BreakerClosed},
		},
		{
			name: "a bad probe opens it again",
			steps: []step{{record: failed}, {record: failed}, {record: failed},
				{advance: time.Second, record: slow}, {skip: true}},
			wantRoutes: []route{routePrimary, routePrimary, routePrimary, routeProbe, routeStandby},
			wantStates: []string{BreakerClosed, BreakerClosed, BreakerOpen, BreakerOpen, BreakerOpen},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			var changes []string
			b := newBreaker(func(from, to, why string) { changes = append(changes, to) })
			var routes []route
			var states []string
			for _, s := range tc.steps {
				now = now.Add(s.advance)
				r := b.route(p, now)
				routes = append(routes, r)
				if !s.skip {
					b.record(p, r, s.record, now, now)
				}
				states = append(states, b.State())
			}
			if diff := cmp.Diff(tc.wantRoutes, routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStates, states); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
	// While half-open, a second call during the probe goes to the standby.
	b := newBreaker(nil)
	now := time.Unix(0, 0)
	for range 3 {
		b.record(p, b.route(p, now), failed, now, now)
	}
	now = now.Add(time.Second)
	if r1, r2 := b.route(p, now), b.route(p, now); r1 != routeProbe || r2 != routeStandby {
		t.Errorf("half-open routes = %v, %v; want a probe, then the standby", r1, r2)
	}
	// Off: always the primary.
	off := p
	off.BreakerFailures = 0
	for range 10 {
		b.record(off, routePrimary, failed, now, now)
	}
	if r := newBreaker(nil).route(off, now); r != routePrimary {
		t.Errorf("breaker off: route %v", r)
	}
}

// TestHangingPrimary: every primary read hangs (2 s) and the hedge budget is nearly empty. The
// first call is hedged at the cutoff and its primary loses; each later one, its hedge refused,
// reads the standby at its cutoff (the primary's latest read lost and none answered since), not
// at PrimaryTimeout; the breaker opens after BreakerFailures of them, and from then on calls go
// to the standby at once without spending budget; when the primary heals, probes close the
// breaker and reads return to it.
func TestHangingPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		p := DefaultPolicy()
		p.Warmup, p.Budget, p.BudgetBurst = 0, 0, 1
		p.PrimaryTimeout, p.BreakerOpenFor = 200*time.Millisecond, 300*time.Millisecond
		h, err := New(p, Options{Registerer: reg, WindowSize: 64})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		hang := true
		primary := func(ctx context.Context) (string, error) {
			mu.Lock()
			d := time.Duration(0)
			if hang {
				d = 2 * time.Second
			}
			mu.Unlock()
			return answer("p", d, nil)(ctx)
		}
		standby := answer("s", time.Millisecond, nil)
		var took []time.Duration
		var outs []Outcome
		for range 60 {
			t0 := time.Now()
			v, out, err := Do(t.Context(), h, primary, standby)
			took = append(took, time.Since(t0))
			outs = append(outs, out)
			if err != nil || v != "s" {
				t.Fatalf("Do = %q, %v; want the standby's answer", v, err)
			}
		}
		if h.BreakerState() == BreakerClosed {
			t.Fatalf("breaker closed with a hanging primary")
		}
		slowCalls := 0
		for _, d := range took {
			if d > 50*time.Millisecond {
				slowCalls++
			}
		}
		// Only the calls before the breaker opened, plus a probe per open period, wait.
		if slowCalls > p.BreakerFailures+4 {
			t.Errorf("%d of 60 calls took over 50 ms (want at most %d): %v", slowCalls, p.BreakerFailures+4, took)
		}
		// The slow ones took the cutoff (Max: the window has no samples) and a standby read.
		if longest := slices.Max(took); longest > p.Max+time.Millisecond {
			t.Errorf("longest call %v, want at most the cutoff (Max %v) + the standby's 1ms", longest, p.Max)
		}
		if n := counter(t, reg, "smartfeed_hedge_routed_total", "route", "standby"); n < 40 {
			t.Errorf("failover routes = %v, want most calls", n)
		}
		if !outs[len(outs)-1].Failover && !outs[len(outs)-1].Hedged {
			t.Errorf("last outcome %+v: neither failover nor hedged", outs[len(outs)-1])
		}
		// Healed: within a few open periods the probes close the breaker.
		mu.Lock()
		hang = false
		mu.Unlock()
		deadline := time.Now().Add(5 * time.Second)
		for h.BreakerState() != BreakerClosed {
			if time.Now().After(deadline) {
				t.Fatal("breaker did not close after the primary healed")
			}
			if _, _, err := Do(t.Context(), h, primary, standby); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, out, err := Do(t.Context(), h, primary, standby)
		if err != nil || out.From != Primary || out.Failover {
			t.Errorf("after recovery: %+v, %v; want the primary", out, err)
		}
	})
}

// Both down while the breaker is open: the call fails with both errors, it does not hang.
func TestFailoverBothDown(t *testing.T) {
	p := DefaultPolicy()
	p.Warmup, p.BreakerFailures = 0, 1
	h, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	down := answer("", 0, errors.New("down"))
	_, _, _ = Do(t.Context(), h, down, answer("s", 0, nil)) // opens the breaker
	if h.BreakerState() != BreakerOpen {
		t.Fatalf("state %s, want open", h.BreakerState())
	}
	_, out, err := Do(t.Context(), h, down, down)
	if !errors.Is(err, ErrBothFailed) || !out.Failover {
		t.Errorf("both down: %+v, %v; want ErrBothFailed on the failover route", out, err)
	}
	v, out, err := Do(t.Context(), h, answer("p", 0, nil), down)
	if err != nil || v != "p" || out.From != Primary {
		t.Errorf("standby down, primary up, breaker open: %q %+v %v; want the primary's answer", v, out, err)
	}
}

// openBreaker opens h's breaker with BreakerFailures failed primary reads.
func openBreaker(t *testing.T, h *Hedger) {
	t.Helper()
	for range h.Policy().BreakerFailures {
		if _, _, err := Do(t.Context(), h, answer("p", 0, errors.New("down")), answer("s", 0, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if s := h.BreakerState(); s != BreakerOpen {
		t.Fatalf("breaker %s after %d failed reads, want open", s, h.Policy().BreakerFailures)
	}
}

// TestCancelledProbeReleased: the one probe a half-open breaker lets through belongs to a call
// whose caller gives up before the primary answers. The probe tells nothing, and the next call
// probes again: the breaker closes once the primary answers, rather than sending every read to
// the standby for good.
func TestCancelledProbeReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := newHedger(t, func(p *Policy) {
			p.BreakerFailures, p.BreakerProbes, p.BreakerOpenFor = 2, 1, 100*time.Millisecond
		})
		openBreaker(t, h)
		// sleep: the breaker's 100 ms open period ends, so it lets a probe through.
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		_, out, err := Do(ctx, h, answer("p", time.Second, nil), answer("s", time.Second, nil))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || out.Failover {
			t.Fatalf("the probe's call: %+v, %v; want it to read the primary and end with its caller", out, err)
		}
		synctest.Wait()
		for i := range 3 {
			if _, _, err := Do(t.Context(), h, answer("p", time.Millisecond, nil), answer("s", 0, nil)); err != nil {
				t.Fatal(err)
			}
			if h.BreakerState() == BreakerClosed {
				return
			}
			t.Logf("after %d more calls: %s", i+1, h.BreakerState())
		}
		t.Errorf("breaker %s after a cancelled probe and 3 calls with the primary healthy, want closed", h.BreakerState())
	})
}

// TestSharedSlownessKeepsBreakerClosed: primary and standby are slow together (one process
// short of processors, or both stores on one loaded server). The standby wins the races the
// cutoff starts, but it took longer than the cutoff itself: the primary is not the sick one and
// the breaker stays closed. A standby that answers within the cutoff still opens it.
func TestSharedSlownessKeepsBreakerClosed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		standby  time.Duration
		wantOpen bool
	}{
		{"standby as slow as the primary's wait", 30 * time.Millisecond, false},
		{"standby within the cutoff", time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := newHedger(t, func(p *Policy) {
					p.Mode, p.Delay, p.Budget, p.BudgetBurst = ModeFixed, 5*time.Millisecond, 1, 100
					p.BreakerFailures = 3
				})
				for range 10 {
					_, out, err := Do(t.Context(), h, answer("p", 80*time.Millisecond, nil), answer("s", tc.standby, nil))
					if err != nil || out.From != Standby && !out.Failover {
						t.Fatalf("Do: %+v, %v; want the standby's answer", out, err)
					}
				}
				synctest.Wait()
				if open := h.BreakerState() != BreakerClosed; open != tc.wantOpen {
					t.Errorf("breaker %s after 10 races the standby won in %v, want open %v", h.BreakerState(), tc.standby, tc.wantOpen)
				}
			})
		})
	}
}
