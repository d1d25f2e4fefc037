package hedge

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counter returns the value of the named counter or gauge (with the given label pairs) in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func newHedger(t *testing.T, mod func(*Policy)) (*Hedger, *prometheus.Registry) {
	t.Helper()
	p := DefaultPolicy()
	p.Warmup = 0
	mod(&p)
	reg := prometheus.NewRegistry()
	h, err := New(p, Options{Registerer: reg, WindowSize: 64, SchedLatency: NoSchedLatency})
	if err != nil {
		t.Fatal(err)
	}
	return h, reg
}

func answer(v string, d time.Duration, err error) ReadFunc[string] {
	return func(ctx context.Context) (string, error) {
		select {
		case <-time.After(d):
			return v, err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		mod     func(*Policy)
		primary ReadFunc[string]
		standby ReadFunc[string]
		want    string
		wantOut Outcome
		wantErr error
		taken   time.Duration // on the bubble's fake clock, so exact
	}{
		{
			name:    "primary fast",
			mod:     func(p *Policy) { p.Mode = ModeFixed; p.Delay = 50 * time.Millisecond },
			primary: answer("p", 0, nil), standby: answer("s", 0, nil),
			want: "p", wantOut: Outcome{From: Primary},
		},
		{
			name:    "primary error fails over at once even with no budget and hedging off",
			mod:     func(p *Policy) { p.Mode = ModeOff; p.Budget = 0; p.BudgetBurst = 1 },
			primary: answer("", 0, boom), standby: answer("s", 0, nil),
			want: "s", wantOut: Outcome{From: Standby, Hedged: true, Reason: "error", PrimaryErr: boom},
		},
		{
			name:    "slow primary loses to the standby after the fixed cutoff",
			mod:     func(p *Policy) { p.Mode = ModeFixed; p.Delay = 5 * time.Millisecond },
			primary: answer("p", 5*time.Second, nil), standby: answer("s", 0, nil),
			want: "s", wantOut: Outcome{From: Standby, Hedged: true, Reason: "cutoff"},
			taken: 5 * time.Millisecond,
		},
		{
			name:    "hedging off waits for the slow primary",
			mod:     func(p *Policy) { p.Mode = ModeOff },
			primary: answer("p", 30*time.Millisecond, nil), standby: answer("s", 0, nil),
			want: "p", wantOut: Outcome{From: Primary},
			taken: 30 * time.Millisecond,
		},
		{
			name:    "standby error after cutoff: the primary still answers",
			mod:     func(p *Policy) { p.Mode = ModeFixed; p.Delay = time.Millisecond },
			primary: answer("p", 30*time.Millisecond, nil), standby: answer("", 0, boom),
			want: "p", wantOut: Outcome{From: Primary, Hedged: true, Reason: "cutoff"},
			taken: 30 * time.Millisecond,
		},
		{
			name:    "both fail",
			mod:     func(p *Policy) {},
			primary: answer("", 0, boom), standby: answer("", 0, boom),
			wantOut: Outcome{From: Primary, Hedged: true, Reason: "error", PrimaryErr: boom},
			wantErr: ErrBothFailed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := newHedger(t, tt.mod)
				start := time.Now()
				got, out, err := Do(t.Context(), h, tt.primary, tt.standby)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != tt.want {
					t.Errorf("value = %q, want %q", got, tt.want)
				}
				if diff := cmp.Diff(tt.wantOut, out, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
					t.Errorf("outcome (-want +got):\n%s", diff)
				}
				if took := time.Since(start); took != tt.taken {
					t.Errorf("took %v, want %v", took, tt.taken)
				}
			})
		})
	}
}

func TestLoserIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, reg := newHedger(t, func(p *Policy) { p.Mode = ModeFixed; p.Delay = 2 * time.Millisecond })
		cancelled := make(chan struct{})
		primary := func(ctx context.Context) (string, error) {
			<-ctx.Done()
			close(cancelled)
			return "", ctx.Err()
		}
		// Bounded: a Do that waits for its loser must fail the test, not hang it.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		got, _, err := Do(ctx, h, primary, answer("s", 0, nil))
		if err != nil || got != "s" {
			t.Fatalf("Do = %q, %v; want s, nil", got, err)
		}
		select {
		case <-cancelled:
		case <-time.After(2 * time.Second):
			t.Fatal("the losing primary read was not cancelled")
		}
		if got := counter(t, reg, "smartfeed_hedge_won_total"); got != 1 {
			t.Errorf("hedges won = %v, want 1", got)
		}
		if got := counter(t, reg, "smartfeed_hedge_issued_total", "reason", "cutoff"); got != 1 {
			t.Errorf("hedges issued on cutoff = %v, want 1", got)
		}
	})
}

func TestContextBoundsStuckReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := newHedger(t, func(p *Policy) { p.Mode = ModeFixed; p.Delay = time.Millisecond })
		// A standby read that ignores its context (a broken store client) ends with the test, so
		// goleak sees no goroutine left behind; the primary, read on the caller's goroutine,
		// honours its context as ReadFunc requires.
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		stuck := func(context.Context) (string, error) { <-release; return "", errors.New("released") }
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, out, err := Do(ctx, h, answer("p", time.Hour, nil), stuck)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		if !out.Hedged {
			t.Errorf("outcome %+v: the standby was never asked", out)
		}
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("a stuck standby read held the call for %v, want the 20ms deadline", took)
		}
	})
}

func TestBudgetCapsCutoffHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Every read is slow, the standby's as much as the primary's: a global slowdown. With a
		// 10% budget and a burst of 1, about one call in ten may hedge; the rest wait for the
		// primary (the breaker does not count a race the standby won in more than the cutoff).
		h, reg := newHedger(t, func(p *Policy) {
			p.Mode = ModeFixed
			p.Delay = time.Microsecond
			p.Budget = 0.1
			p.BudgetBurst = 1
		})
		var standbyReads atomic.Int64
		standby := func(ctx context.Context) (string, error) {
			standbyReads.Add(1)
			return answer("s", 2*time.Millisecond, nil)(ctx)
		}
		primary := answer("p", 2*time.Millisecond, nil)
		const calls = 100
		for range calls {
			if _, _, err := Do(t.Context(), h, primary, standby); err != nil {
				t.Fatal(err)
			}
		}
		// One token at start, then 0.1 per call: 1 + 100*0.1 = 11 at most.
		if got := standbyReads.Load(); got < 9 || got > 11 {
			t.Errorf("standby reads = %d of %d calls, want 9..11 (10%% budget)", got, calls)
		}
		if got := counter(t, reg, "smartfeed_hedge_budget_exhausted_total"); got < calls-11 {
			t.Errorf("budget exhausted = %v, want >= %d", got, calls-11)
		}
	})
}

func TestErrorsFailOverWithoutBudget(t *testing.T) {
	// The breaker off: every call meets the failing primary first (breaker_test.go covers it on).
	h, reg := newHedger(t, func(p *Policy) { p.Budget = 0; p.BudgetBurst = 1; p.BreakerFailures = 0 })
	for range 50 {
		got, _, err := Do(t.Context(), h, answer("", 0, errors.New("down")), answer("s", 0, nil))
		if err != nil || got != "s" {
			t.Fatalf("Do = %q, %v; want s, nil", got, err)
		}
	}
	if got := counter(t, reg, "smartfeed_hedge_issued_total", "reason", "error"); got != 50 {
		t.Errorf("error failovers = %v, want 50", got)
	}
}

func TestWarmupFraction(t *testing.T) {
	h, reg := newHedger(t, func(p *Policy) { p.Warmup = 0.25 })
	var warm atomic.Int64
	standby := func(context.Context) (string, error) { warm.Add(1); return "s", nil }
	for range 100 {
		got, out, err := Do(t.Context(), h, answer("p", 0, nil), standby)
		if err != nil || got != "p" || out.From != Primary {
			t.Fatalf("Do = %q, %+v, %v; warm-up answers must be dropped", got, out, err)
		}
	}
	h.Wait()
	if got := warm.Load(); got != 25 {
		t.Errorf("warm-up reads = %d, want 25", got)
	}
	if got := counter(t, reg, "smartfeed_hedge_warmup_reads_total"); got != 25 {
		t.Errorf("warm-up metric = %v, want 25", got)
	}
}

func TestPercentileCutoff(t *testing.T) {
	h, _ := newHedger(t, func(p *Policy) {
		p.Percentile = 90
		p.Min = 3 * time.Millisecond
		p.Max = 80 * time.Millisecond
		p.MinSamples = 10
	})
	if d, on := h.Cutoff(); !on || d != 80*time.Millisecond {
		t.Errorf("cutoff with no samples = %v, %v; want max 80ms", d, on)
	}
	// 64 samples (the window): 1ms..64ms. p90 by nearest rank = the 58th = 58ms.
	for i := 1; i <= 64; i++ {
		h.win.add(time.Duration(i) * time.Millisecond)
	}
	if d, _ := h.Cutoff(); d != 58*time.Millisecond {
		t.Errorf("p90 cutoff = %v, want 58ms", d)
	}
	p := h.Policy()
	p.Max = 20 * time.Millisecond
	if err := h.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.Cutoff(); d != 20*time.Millisecond {
		t.Errorf("clamped cutoff = %v, want 20ms", d)
	}
	p.Percentile, p.Max = 1, time.Second
	if err := h.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.Cutoff(); d != 3*time.Millisecond {
		t.Errorf("cutoff clamped up = %v, want min 3ms", d)
	}
	// The ring forgets old samples: 64 fast ones replace the slow tail.
	for range 64 {
		h.win.add(time.Millisecond)
	}
	p.Percentile, p.Min = 99, 0
	if err := h.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.Cutoff(); d != time.Millisecond {
		t.Errorf("cutoff after the window rolled = %v, want 1ms", d)
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Policy)
		want string
	}{
		{"mode", func(p *Policy) { p.Mode = "sometimes" }, "mode"},
		{"percentile 100", func(p *Policy) { p.Percentile = 100 }, "percentile"},
		{"percentile 0", func(p *Policy) { p.Percentile = 0 }, "percentile"},
		{"min above max", func(p *Policy) { p.Min = time.Second; p.Max = time.Millisecond }, "clamp"},
		{"budget above 1", func(p *Policy) { p.Budget = 1.5 }, "budget"},
		{"negative warmup", func(p *Policy) { p.Warmup = -0.1 }, "warmup"},
		{"negative delay", func(p *Policy) { p.Delay = -1 }, "delay"},
		{"delay over the largest", func(p *Policy) { p.Delay = 2 * time.Hour; p.PrimaryTimeout = 0 }, "delay 2h0m0s is not in [0, 10s]"},
		{"fixed delay 0", func(p *Policy) { p.Mode = ModeFixed; p.Delay = 0 }, "delay 0 in fixed mode"},
		{"fixed delay at the primary timeout", func(p *Policy) { p.Mode = ModeFixed; p.Delay = time.Second }, "not below the primary timeout 1s"},
		{"burst", func(p *Policy) { p.BudgetBurst = 0 }, "burst"},
		{"min samples", func(p *Policy) { p.MinSamples = 0 }, "min samples"},
	}
	h, _ := newHedger(t, func(*Policy) {})
	before := h.Policy()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mod(&p)
			err := h.SetPolicy(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetPolicy error = %v, want one naming %q", err, tt.want)
			}
			if diff := cmp.Diff(before, h.Policy()); diff != "" {
				t.Errorf("a refused policy changed the hedger (-want +got):\n%s", diff)
			}
		})
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
}

func TestPolicyExported(t *testing.T) {
	h, reg := newHedger(t, func(*Policy) {})
	p := h.Policy()
	p.Warmup, p.Percentile = 0.3, 95
	if err := h.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "smartfeed_hedge_policy", "knob", "warmup"); got != 0.3 {
		t.Errorf("exported warmup = %v, want 0.3", got)
	}
	if got := counter(t, reg, "smartfeed_hedge_policy", "knob", "percentile"); got != 95 {
		t.Errorf("exported percentile = %v, want 95", got)
	}
}

// Under a global slowdown the cutoff hedges drain the budget down to the reserve; a call stuck
// past Max still gets the reserve. The budget alone: the breaker is off (with it on, a standby
// that beats every primary read within the cutoff makes the primary look hung).
func TestReserveForStuckCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, reg := newHedger(t, func(p *Policy) {
			p.BreakerFailures = 0
			p.Mode = ModeFixed
			p.Delay = time.Millisecond
			p.Max = 30 * time.Millisecond
			p.Budget = 0
			p.BudgetBurst = 4
		})
		var standbyReads atomic.Int64
		standby := func(context.Context) (string, error) { standbyReads.Add(1); return "s", nil }
		// Moderately slow calls: hedged at the cutoff until 2 tokens (half the burst) remain.
		for range 10 {
			if _, _, err := Do(t.Context(), h, answer("p", 5*time.Millisecond, nil), standby); err != nil {
				t.Fatal(err)
			}
		}
		if got := standbyReads.Load(); got != 2 {
			t.Errorf("cutoff hedges = %d, want 2 (4 tokens, half kept in reserve)", got)
		}
		// A stuck call is hedged at Max from the reserve.
		start := time.Now()
		got, out, err := Do(t.Context(), h, answer("p", 5*time.Second, nil), standby)
		if err != nil || got != "s" || out.From != Standby {
			t.Fatalf("stuck call = %q, %+v, %v; want the standby", got, out, err)
		}
		if took := time.Since(start); took != 30*time.Millisecond {
			t.Errorf("stuck call took %v, want Max (30ms) on the bubble's clock", took)
		}
		// Two more stuck calls: the second finds the bucket empty and waits for the primary.
		if _, out, _ := Do(t.Context(), h, answer("p", 5*time.Second, nil), standby); out.From != Standby {
			t.Errorf("second stuck call from %v, want the standby (last token)", out.From)
		}
		_, out, _ = Do(t.Context(), h, answer("p", 40*time.Millisecond, nil), standby)
		if out.From != Primary || !out.BudgetExhausted {
			t.Errorf("third call: %+v, want the primary with the budget exhausted", out)
		}
		if got := counter(t, reg, "smartfeed_hedge_budget_exhausted_total"); got < 1 {
			t.Errorf("budget exhausted = %v", got)
		}
	})
}
