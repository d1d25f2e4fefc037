package hedge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Store names which side answered a call.
type Store int

const (
	// Primary is the store read first.
	Primary Store = iota
	// Standby is the hot copy read on error or after the cutoff.
	Standby
)

// String returns "primary" or "standby".
func (s Store) String() string {
	if s == Standby {
		return "standby"
	}
	return "primary"
}

// Outcome describes how a call was answered.
type Outcome struct {
	// From is the store whose answer was returned.
	From Store
	// Hedged is set when the standby was asked (on error, after the cutoff, or when the breaker
	// found the primary hung while the call waited on it).
	Hedged bool
	// Reason is "error", "cutoff" or "breaker" when Hedged.
	Reason string
	// BudgetExhausted is set when the cutoff passed but the budget refused the hedge.
	BudgetExhausted bool
	// PrimaryErr is the primary's error, if it answered with one.
	PrimaryErr error
	// Failover is set when the open circuit breaker sent the call to the standby first.
	Failover bool
}

// Options configures a Hedger at construction; the Policy can change later, these cannot.
type Options struct {
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// WindowSize is the number of recent primary latencies kept. Default 4096.
	WindowSize int
	// WarmupTimeout bounds a warm-up read. Default 1s.
	WarmupTimeout time.Duration
	// Logger receives a line per breaker state change; nil logs nothing.
	Logger *zap.Logger
	// Now is the clock of the breaker (tests); nil means time.Now.
	Now func() time.Time
	// SchedLatency reports how long this process's runnable goroutines wait for a processor
	// now: a read judged slow is not held against the primary when that wait explains it (the
	// process is short of processors, not the store slow). nil means RuntimeSchedLatency();
	// NoSchedLatency judges every read by its time alone.
	SchedLatency func() time.Duration
}

// NoSchedLatency is an Options.SchedLatency that reports no scheduling latency: every slow read
// counts against the primary.
func NoSchedLatency() time.Duration { return 0 }

// Hedger runs hedged reads under a live-updatable Policy. It is safe for concurrent use.
type Hedger struct {
	policy  atomic.Pointer[Policy]
	win     *window
	warmTO  time.Duration
	m       *metrics
	mu      sync.Mutex // guards tokens and warmAcc
	tokens  float64
	warmAcc float64
	// warmups tracks warm-up reads so tests and shutdown can wait for them.
	warmups sync.WaitGroup
	br      *breaker
	now     func() time.Time
	sched   func() time.Duration
}

// New returns a Hedger with the policy p.
func New(p Policy, o Options) (*Hedger, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if o.WindowSize == 0 {
		o.WindowSize = 4096
	}
	if o.WindowSize < 16 || o.WindowSize > 1<<20 {
		return nil, fmt.Errorf("hedge: window size %d is not in [16, 2^20]", o.WindowSize)
	}
	if o.WarmupTimeout <= 0 {
		o.WarmupTimeout = time.Second
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SchedLatency == nil {
		o.SchedLatency = RuntimeSchedLatency()
	}
	h := &Hedger{win: newWindow(o.WindowSize, max(16, o.WindowSize/16)), warmTO: o.WarmupTimeout, m: m, now: o.Now,
		sched: o.SchedLatency}
	h.br = newBreaker(func(from, to, why string) {
		h.m.brState.Set(map[string]float64{BreakerClosed: 0, BreakerOpen: 1, BreakerHalfOpen: 2}[to])
		h.m.brChanges.WithLabelValues(to).Inc()
		lvl := o.Logger.Info
		if to == BreakerOpen {
			lvl = o.Logger.Warn
		}
		lvl("primary circuit breaker", zap.String("from", from), zap.String("to", to), zap.String("why", why))
	})
	h.tokens = p.BudgetBurst
	h.store(p)
	return h, nil
}

func (h *Hedger) store(p Policy) {
	h.policy.Store(&p)
	h.m.setPolicy(p)
}

// Policy returns the current policy.
func (h *Hedger) Policy() Policy { return *h.policy.Load() }

// SetPolicy replaces the policy; calls already running keep the one they started with.
func (h *Hedger) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	h.mu.Lock()
	h.tokens = min(h.tokens, p.BudgetBurst)
	h.mu.Unlock()
	h.store(p)
	return nil
}

// Cutoff returns the delay after which a call would hedge now, and whether hedging on the
// cutoff is on at all.
func (h *Hedger) Cutoff() (time.Duration, bool) { return h.cutoff(h.Policy()) }

func (h *Hedger) cutoff(p Policy) (time.Duration, bool) {
	var d time.Duration
	switch p.Mode {
	case ModeOff:
		return 0, false
	case ModeFixed:
		d = p.Delay
	default:
		q, n := h.win.percentile(p.Percentile)
		if n < p.MinSamples {
			d = p.Max
		} else {
			d = min(max(q, p.Min), p.Max)
		}
	}
	h.m.cutoff.Set(d.Seconds())
	return d, true
}

// earn adds one call's share of budget; spend takes a token if there is one.
func (h *Hedger) earnAndWarm(p Policy) (warm bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens = min(h.tokens+p.Budget, p.BudgetBurst)
	h.warmAcc += p.Warmup
	if h.warmAcc >= 1 {
		h.warmAcc--
		return true
	}
	return false
}

// spend takes a token if more than reserve would be left.
func (h *Hedger) spend(reserve float64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens >= 1+reserve {
		h.tokens--
		return true
	}
	return false
}

// BreakerState returns the circuit breaker's state: closed, open or half-open.
func (h *Hedger) BreakerState() string { return h.br.State() }

// Wait blocks until the warm-up reads started so far have finished.
func (h *Hedger) Wait() { h.warmups.Wait() }

// Reasons a call read the standby (Outcome.Reason, the reason label of
// smartfeed_hedge_issued_total).
const (
	// ReasonError: the primary answered with an error.
	ReasonError = "error"
	// ReasonCutoff: the primary had not answered by the cutoff and the budget allowed a hedge.
	ReasonCutoff = "cutoff"
	// ReasonBreaker: the call waited on the primary past its cutoff, its hedge refused by the
	// budget, and the breaker found the primary hung (it opened, or the latest read judged was
	// bad with none started since answering).
	ReasonBreaker = "breaker"
)

// ReadFunc is one read against one store. It must honour ctx: a cancelled loser must return.
type ReadFunc[T any] func(ctx context.Context) (T, error)

type result[T any] struct {
	v    T
	err  error
	from Store
	took time.Duration
}

// Do reads from primary, and from standby on a primary error or once the cutoff passes (budget
// permitting: a cutoff below Max leaves half the budget for calls still outstanding at Max);
// the first good answer wins and the other read is cancelled. It returns the
// error of the last read to fail when neither succeeds, or ctx's error.
//
// Every primary read has its own deadline (Policy.PrimaryTimeout). A circuit breaker watches the
// primary's reads: while it is open, calls go to the standby first (failover: no budget spent,
// Outcome.Failover set) and to the primary only if the standby fails; half-open, one probe at a
// time reads the primary, hedged at the cutoff whatever the budget.
//
// At its cutoff a call asks the breaker whether the primary looks hung: the breaker opened
// meanwhile, or the latest primary read judged was slow or failed and none started since this
// call's answered (the primary is hung, not this read slow). Then it reads the standby at once,
// spending no budget (Reason "breaker"); otherwise it hedges if the budget allows, and if the
// budget refuses it keeps waiting on the primary while watching the breaker, and reads the
// standby the moment the primary looks hung. At the onset of a hang such a call waits about the
// cutoff plus one standby read (for a hedged read to lose), not the primary timeout. Until the
// cutoff none of this costs anything.
func Do[T any](ctx context.Context, h *Hedger, primary, standby ReadFunc[T]) (T, Outcome, error) {
	p := h.Policy()
	h.m.calls.Inc()
	if p.PrimaryTimeout > 0 {
		inner := primary
		primary = func(ctx context.Context) (T, error) {
			ctx, cancel := context.WithTimeout(ctx, p.PrimaryTimeout)
			defer cancel()
			return inner(ctx)
		}
	}
	began := h.now() // on the breaker's clock
	rt := h.br.route(p, began)
	h.sched() // keeps the scheduling latency current (a clock read between its samples)
	h.m.routed.WithLabelValues([...]string{"primary", "probe", "standby"}[rt]).Inc()
	if rt == routeStandby {
		return failover(ctx, h, p, primary, standby)
	}
	recorded := false
	record := func(v verdict) {
		recorded = true
		h.br.record(p, rt, v, began, h.now())
	}
	if rt == routeProbe {
		// A probe that ends with no verdict (its caller gave up first) frees the slot, or the
		// half-open breaker would never let another through.
		defer func() {
			if !recorded {
				h.br.release()
			}
		}()
	}
	if h.earnAndWarm(p) {
		warm(ctx, h, standby)
	}

	var out Outcome
	var zero T
	results := make(chan result[T], 2)
	run := func(ctx context.Context, s Store, f ReadFunc[T]) {
		start := time.Now()
		v, err := f(ctx)
		results <- result[T]{v: v, err: err, from: s, took: time.Since(start)}
	}
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	start := time.Now()
	go run(pctx, Primary, primary)
	pending, standbyStarted, primaryDone := 1, false, false
	startStandby := func(reason string) {
		standbyStarted, out.Hedged, out.Reason = true, true, reason
		pending++
		h.m.issued.WithLabelValues(reason).Inc()
		go run(sctx, Standby, standby)
	}

	// The cutoff hedge may not spend the last half of the budget: that reserve is kept for the
	// calls still outstanding at Max, which are the likeliest to be stuck (gRPC's throttling
	// stops hedges at half its tokens in the same spirit). A call refused at the cutoff gets
	// a second chance at Max.
	var timer <-chan time.Time
	var t *time.Timer
	d, on := h.cutoff(p)
	secondChance := on && d < p.Max
	if on {
		t = time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	// A call past its cutoff with its hedge refused watches the breaker: woken at each bad
	// verdict or state change, it goes to the standby as soon as the primary looks hung.
	var watch <-chan struct{}
	horizon := p.PrimaryTimeout
	if horizon == 0 {
		horizon = p.Max
	}
	var errs []error
	for pending > 0 {
		select {
		case <-ctx.Done():
			return zero, out, ctx.Err()
		case <-watch:
			watch = nil
			if standbyStarted || primaryDone {
				continue
			}
			sick, ch := h.br.sick(began, horizon)
			if sick {
				startStandby(ReasonBreaker)
				continue
			}
			watch = ch
		case <-timer:
			timer = nil
			if standbyStarted || primaryDone {
				continue
			}
			if rt == routeProbe {
				startStandby(ReasonCutoff)
				continue
			}
			sick, ch := h.br.sick(began, horizon)
			if sick {
				startStandby(ReasonBreaker)
				continue
			}
			reserve := 0.0
			if secondChance {
				reserve = math.Floor(p.BudgetBurst / 2)
			}
			if !h.spend(reserve) {
				out.BudgetExhausted = true
				h.m.exhausted.Inc()
				if secondChance {
					secondChance = false
					t.Reset(p.Max - d)
					timer = t.C
				}
				if p.BreakerFailures > 0 {
					watch = ch
				}
				continue
			}
			startStandby(ReasonCutoff)
		case r := <-results:
			pending--
			h.m.latency.WithLabelValues(r.from.String()).Observe(r.took.Seconds())
			if r.from == Primary {
				primaryDone = true
				if r.err == nil {
					h.win.add(r.took)
				}
				if ctx.Err() == nil {
					v := good
					switch {
					case r.err != nil:
						v = failed
					case r.took > p.Max && !h.excused(p.Max):
						v = slow
					}
					record(v)
				}
			}
			if r.err == nil {
				out.From = r.from
				if r.from == Standby {
					h.m.won.Inc()
					if !primaryDone {
						// The primary loses: record how long it had run, a lower bound on its
						// latency, so a stuck primary still pushes the percentile up.
						h.win.add(time.Since(start))
						// The loss counts against the primary only when the standby answered
						// within the cutoff itself: then the primary was the slow one. A standby
						// as slow as that shares the trouble (a process short of processors, both
						// stores behind one loaded server), and opening the breaker would gain
						// nothing and cost the pages their fresh chunks; a primary that hangs
						// meanwhile still opens it through its PrimaryTimeout failures. A probe's
						// loss counts whatever the standby took: it is the probe's verdict.
						if rt == routeProbe || r.took <= d {
							record(slow)
						}
					}
				}
				return r.v, out, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", r.from, r.err))
			if r.from == Primary {
				out.PrimaryErr = r.err
				if !standbyStarted && ctx.Err() == nil {
					startStandby(ReasonError)
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return zero, out, err
	}
	return zero, out, fmt.Errorf("%w: %w", ErrBothFailed, errors.Join(errs...))
}

// failover reads the standby first (the breaker is open), and the primary only if the standby
// fails: only both down fails the call.
func failover[T any](ctx context.Context, h *Hedger, p Policy, primary, standby ReadFunc[T]) (T, Outcome, error) {
	out := Outcome{From: Standby, Failover: true}
	start := time.Now()
	v, err := standby(ctx)
	h.m.latency.WithLabelValues(Standby.String()).Observe(time.Since(start).Seconds())
	if err == nil {
		h.m.won.Inc()
		return v, out, nil
	}
	if ctx.Err() != nil {
		return v, out, ctx.Err()
	}
	serr := err
	start = time.Now()
	v, err = primary(ctx)
	h.m.latency.WithLabelValues(Primary.String()).Observe(time.Since(start).Seconds())
	if err == nil {
		out.From = Primary
		return v, out, nil
	}
	out.PrimaryErr = err
	if ctx.Err() != nil {
		return v, out, ctx.Err()
	}
	return v, out, fmt.Errorf("%w: %w", ErrBothFailed, errors.Join(fmt.Errorf("primary: %w", err), fmt.Errorf("standby: %w", serr)))
}

// warm starts a warm-up read of the standby whose answer is dropped. It is detached from ctx's
// cancellation (the call may well be over first) and bounded by the warm-up timeout.
func warm[T any](ctx context.Context, h *Hedger, standby ReadFunc[T]) {
	h.m.warmups.Inc()
	h.warmups.Add(1)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.warmTO)
	go func() {
		defer h.warmups.Done()
		defer cancel()
		start := time.Now()
		_, err := standby(wctx)
		h.m.latency.WithLabelValues(Standby.String()).Observe(time.Since(start).Seconds())
		if err != nil {
			h.m.warmupErrors.Inc()
		}
	}()
}
