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
	// now. While that wait is a quarter of Policy.Max or more the process is saturated, and the
	// breaker counts none of the primary's reads judged on their time (answered after Max,
	// beaten by the standby, past PrimaryTimeout): the process is short of processors, not the
	// store slow. nil means RuntimeSchedLatency(); NoSchedLatency judges every read by its
	// time alone.
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
	if o.SchedLatency == nil {
		o.SchedLatency = RuntimeSchedLatency()
	}
	m, err := newMetrics(o.Registerer, o.SchedLatency)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
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

// BreakerStatus returns the circuit breaker's state and why it moved there: for an open breaker,
// the share of the primary's recent reads that failed or were slow ("5 of the last 8 primary
// reads failed, 0 slow"), or the probe that failed.
func (h *Hedger) BreakerStatus() (state, why string) { return h.br.Status() }

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

// ReadFunc is one read against one store. It must honour ctx: a cancelled loser must return
// promptly. The primary read runs on Do's caller's goroutine, so a primary read that ignores its
// context holds the call (past its deadline and a standby's answer) until it returns.
type ReadFunc[T any] func(ctx context.Context) (T, error)

type result[T any] struct {
	v    T
	err  error
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
// cutoff plus one standby read (for a hedged read to lose), not the primary timeout.
//
// Until the cutoff none of this costs anything: the primary is read on the caller's goroutine,
// and only a timer waits for the cutoff. The standby read starts on a goroutine of its own when
// the timer fires (or, after a primary error, on the caller's); when it wins, the primary's
// context is cancelled and Do returns as soon as the primary read does. A read that ignores
// its context therefore holds the call until it returns (ReadFunc).
func Do[T any](ctx context.Context, h *Hedger, primary, standby ReadFunc[T]) (T, Outcome, error) {
	p := h.Policy()
	h.m.calls.Inc()
	began := h.now() // on the breaker's clock
	rt := h.br.route(p, began)
	h.sched() // keeps the scheduling latency current (a clock read between its samples)
	h.m.routedAs[rt].Inc()
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

	pctx, c := startCall(ctx, h, p, rt, began, standby)
	defer c.pcancel()
	d := c.d

	pv, perr := primary(pctx)
	took := time.Since(c.start)

	c.mu.Lock()
	c.primaryDone = true
	if c.stopWatch != nil {
		close(c.stopWatch)
	}
	out, won, lost, sres, scancel := c.out, c.won, c.lost, c.sres, c.scancel
	c.mu.Unlock()
	if c.t != nil {
		c.t.Stop()
	}
	if scancel != nil {
		defer scancel()
	}
	var zero T
	if won {
		// The standby answered first and cancelled the primary, whose answer is dropped.
		r := <-sres
		if h.standbyWon(r.took, lost, d, rt == routeProbe) {
			record(h.judge(p, slow, excuseBeaten))
		}
		out.From = Standby
		return r.v, out, nil
	}
	h.m.latencyOf[Primary].Observe(took.Seconds())
	if perr == nil {
		h.win.add(took)
	}
	if ctx.Err() == nil {
		record(h.verdict(p, pctx, perr, took))
	}
	if perr == nil {
		out.From = Primary
		return pv, out, nil
	}
	if err := ctx.Err(); err != nil {
		return zero, out, err
	}
	return afterPrimaryError(ctx, h, out, perr, sres, standby)
}

// standbyWon counts a call the standby won in took, the primary having run for lost, and says
// whether the loss counts against the primary, for a call whose cutoff was d. The primary's run is
// recorded, a lower bound on its latency, so a stuck primary still pushes the percentile up. The
// loss counts against the primary only when the standby answered within the cutoff itself: then
// the primary was the slow one. A standby as slow as that shares the trouble (a process short
// of processors, both stores behind one loaded server), and opening the breaker would gain
// nothing and cost the pages their fresh chunks; a primary that hangs meanwhile still opens it
// through its PrimaryTimeout failures. A probe's loss counts whatever the standby took: it is
// the probe's verdict.
func (h *Hedger) standbyWon(took, lost, d time.Duration, probe bool) (againstPrimary bool) {
	h.m.latencyOf[Standby].Observe(took.Seconds())
	h.m.won.Inc()
	h.win.add(lost)
	return probe || took <= d
}

// afterPrimaryError answers a call whose primary read failed (perr) with the standby's answer:
// the hedge's (sres) when one was started, or a standby read made now.
func afterPrimaryError[T any](ctx context.Context, h *Hedger, out Outcome, perr error, sres chan result[T], standby ReadFunc[T]) (T, Outcome, error) {
	var zero T
	out.PrimaryErr = perr
	errs := []error{fmt.Errorf("%s: %w", Primary, perr)}
	var r result[T]
	if sres == nil {
		// The primary failed before the cutoff: the standby is read here.
		out.Hedged, out.Reason = true, ReasonError
		h.m.issued.WithLabelValues(ReasonError).Inc()
		start := time.Now()
		r.v, r.err = standby(ctx)
		r.took = time.Since(start)
	} else {
		select {
		case <-ctx.Done():
			return zero, out, ctx.Err()
		case r = <-sres:
		}
	}
	h.m.latencyOf[Standby].Observe(r.took.Seconds())
	if r.err == nil {
		h.m.won.Inc()
		out.From = Standby
		return r.v, out, nil
	}
	if err := ctx.Err(); err != nil {
		return zero, out, err
	}
	errs = append(errs, fmt.Errorf("%s: %w", Standby, r.err))
	return zero, out, fmt.Errorf("%w: %w", ErrBothFailed, errors.Join(errs...))
}

// verdict judges a primary read that answered perr after took, its context pctx, on a call not
// cancelled by its caller.
func (h *Hedger) verdict(p Policy, pctx context.Context, perr error, took time.Duration) verdict {
	switch {
	case perr != nil && pctx.Err() == context.DeadlineExceeded:
		// The primary's own deadline (PrimaryTimeout) passed: a verdict on its time.
		return h.judge(p, failed, excuseTimeout)
	case perr != nil:
		return failed
	case took > p.Max:
		return h.judge(p, slow, excuseLate)
	}
	return good
}

// call is one Do past its routing: the caller's goroutine reads the primary while the cutoff
// timer (and, past a refused hedge, a watch of the breaker) may start the standby read.
type call[T any] struct {
	h       *Hedger
	p       Policy
	ctx     context.Context
	rt      route
	began   time.Time     // on the breaker's clock
	start   time.Time     // when the primary read began
	d       time.Duration // the cutoff
	horizon time.Duration // how far back the breaker's verdicts tell of a hang
	standby ReadFunc[T]
	pcancel context.CancelFunc

	mu             sync.Mutex
	t              *time.Timer
	primaryDone    bool
	secondChance   bool
	out            Outcome            // Hedged, Reason and BudgetExhausted, set before primaryDone
	stopWatch      chan struct{}      // closed once the primary answered: ends the breaker watch
	sres           chan result[T]     // the standby's answer, once it was started
	scancel        context.CancelFunc // cancels the standby read
	won            bool               // the standby answered well before the primary
	lost           time.Duration      // how long the primary had run when the standby won
	standbyStarted bool
}

// startCall starts a call's primary context (bounded by the policy's PrimaryTimeout) and, when
// hedging is on, the timer of its cutoff.
func startCall[T any](ctx context.Context, h *Hedger, p Policy, rt route, began time.Time, standby ReadFunc[T]) (context.Context, *call[T]) {
	var pctx context.Context
	var pcancel context.CancelFunc
	if p.PrimaryTimeout > 0 {
		pctx, pcancel = context.WithTimeout(ctx, p.PrimaryTimeout)
	} else {
		pctx, pcancel = context.WithCancel(ctx)
	}
	c := &call[T]{h: h, p: p, ctx: ctx, rt: rt, began: began, start: time.Now(), standby: standby, pcancel: pcancel,
		horizon: p.PrimaryTimeout}
	if c.horizon == 0 {
		c.horizon = p.Max
	}
	// The cutoff hedge may not spend the last half of the budget: that reserve is kept for the
	// calls still outstanding at Max, which are the likeliest to be stuck (gRPC's throttling
	// stops hedges at half its tokens in the same spirit). A call refused at the cutoff gets
	// a second chance at Max.
	if d, on := h.cutoff(p); on {
		c.d, c.secondChance = d, d < p.Max
		c.mu.Lock()
		c.t = time.AfterFunc(d, c.fire)
		c.mu.Unlock()
	}
	return pctx, c
}

// fire runs when the cutoff passes with the primary still out (on the timer's goroutine).
func (c *call[T]) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.primaryDone || c.standbyStarted {
		return
	}
	if c.rt == routeProbe {
		c.startStandby(ReasonCutoff)
		return
	}
	sick, ch := c.h.br.sick(c.began, c.horizon)
	if sick {
		c.startStandby(ReasonBreaker)
		return
	}
	reserve := 0.0
	if c.secondChance {
		reserve = math.Floor(c.p.BudgetBurst / 2)
	}
	if c.h.spend(reserve) {
		c.startStandby(ReasonCutoff)
		return
	}
	c.out.BudgetExhausted = true
	c.h.m.exhausted.Inc()
	if c.secondChance {
		c.secondChance = false
		c.t.Reset(c.p.Max - c.d)
	}
	// A call past its cutoff with its hedge refused watches the breaker: woken at each bad
	// verdict or state change, it goes to the standby as soon as the primary looks hung.
	if c.p.BreakerFailures > 0 && c.stopWatch == nil {
		c.stopWatch = make(chan struct{})
		go c.watch(ch, c.stopWatch)
	}
}

// watch starts the standby read (Reason "breaker") once the breaker finds the primary hung,
// unless the primary answers first (stop).
func (c *call[T]) watch(ch <-chan struct{}, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ch:
		}
		c.mu.Lock()
		if c.primaryDone || c.standbyStarted {
			c.mu.Unlock()
			return
		}
		sick, next := c.h.br.sick(c.began, c.horizon)
		if sick {
			c.startStandby(ReasonBreaker)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		ch = next
	}
}

// startStandby starts the standby read on a goroutine of its own; a good answer before the
// primary's wins and cancels the primary read. c.mu is held.
func (c *call[T]) startStandby(reason string) {
	c.standbyStarted, c.out.Hedged, c.out.Reason = true, true, reason
	c.h.m.issued.WithLabelValues(reason).Inc()
	sctx, scancel := context.WithCancel(c.ctx)
	sres := make(chan result[T], 1)
	c.sres, c.scancel = sres, scancel
	go func() {
		start := time.Now()
		v, err := c.standby(sctx)
		r := result[T]{v: v, err: err, took: time.Since(start)}
		if err == nil {
			c.mu.Lock()
			if !c.primaryDone {
				c.won, c.lost = true, time.Since(c.start)
			}
			won := c.won
			c.mu.Unlock()
			if won {
				c.pcancel()
			}
		}
		sres <- r
	}()
}

// failover reads the standby first (the breaker is open), and the primary only if the standby
// fails: only both down fails the call.
func failover[T any](ctx context.Context, h *Hedger, p Policy, primary, standby ReadFunc[T]) (T, Outcome, error) {
	out := Outcome{From: Standby, Failover: true}
	start := time.Now()
	v, err := standby(ctx)
	h.m.latencyOf[Standby].Observe(time.Since(start).Seconds())
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
	h.m.latencyOf[Primary].Observe(time.Since(start).Seconds())
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
		h.m.latencyOf[Standby].Observe(time.Since(start).Seconds())
		if err != nil {
			h.m.warmupErrors.Inc()
		}
	}()
}
