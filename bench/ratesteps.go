package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// MinAchievedShare is the share of the offered rate a step must achieve to count as held.
const MinAchievedShare = 0.9

// ReadStep is one offered rate of a read-throughput search (GetFeed or the Redis peer's
// ZREVRANGE): what was offered, what was served, and the latencies of the calls that succeeded.
type ReadStep struct {
	Offered  float64 `json:"offered_per_sec"`
	Seconds  float64 `json:"seconds"`
	Calls    int     `json:"calls"`
	Achieved float64 `json:"achieved_per_sec"` // successful calls per second of the step
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	P999Ms   float64 `json:"p999_ms"`
	// SchedP99Ms is the p99 measured from each call's scheduled send time rather than from its
	// start: it also counts the time a call waited for a free slot of the load generator
	// (coordinated omission), so it is at least P99Ms and far above it when the calls back up.
	SchedP99Ms float64 `json:"p99_from_schedule_ms"`
	Errors     int     `json:"errors"`
	// Held: some call succeeded, p99 under the bound and at least MinAchievedShare of the
	// offered rate achieved.
	Held bool `json:"held"`
	// Stages are the system's per-stage histograms over the step (GetFeed steps only).
	Stages []StageResult `json:"stages,omitempty"`
}

// held is the stop rule of the search: a step is held when its p99 is under bound and it
// achieved at least MinAchievedShare of the offered rate (errors do not count as achieved).
func (s ReadStep) held(bound time.Duration) bool {
	return s.Calls-s.Errors > 0 && s.P99Ms < ms(bound) && s.Achieved >= MinAchievedShare*s.Offered
}

// readStep offers call at rate with conc in flight for d and measures it.
func readStep(ctx context.Context, rate float64, d time.Duration, conc int, bound time.Duration, call func(i int) error) ReadStep {
	lat, sched := &Latencies{}, &Latencies{}
	var errs atomic.Int64
	start := time.Now()
	n := pacedAt(ctx, rate, d, 0, conc, func(i int, due time.Time) {
		t := time.Now()
		err := call(i)
		end := time.Now()
		if err != nil {
			errs.Add(1)
			return
		}
		lat.Add(end.Sub(t))
		sched.Add(end.Sub(due))
	})
	el := time.Since(start).Seconds()
	s := lat.Summary()
	st := ReadStep{Offered: rate, Seconds: el, Calls: n, Achieved: float64(s.N) / el, P50Ms: s.P50, P99Ms: s.P99,
		P999Ms: s.P999, SchedP99Ms: sched.Summary().P99, Errors: int(errs.Load())}
	st.Held = st.held(bound)
	return st
}

// rateSteps offers call at each rate in turn, for d each (longer at low rates, until minCalls
// calls are offered, so that the p99 is not the worst call or two) with conc in flight, and
// stops after the first step that is not held. It returns the steps and the highest offered
// rate held (0 when the first step was not).
//
// snap, when not nil, snapshots the system's stage histograms; each step then reports them.
func rateSteps(ctx context.Context, name string, rates []float64, d time.Duration, minCalls, conc int, bound time.Duration,
	call func(i int) error, snap func() []StageHist, say func(string, ...any)) ([]ReadStep, float64) {
	var steps []ReadStep
	best := 0.0
	for _, rate := range rates {
		if ctx.Err() != nil {
			break
		}
		sd := max(d, time.Duration(float64(minCalls)/rate*float64(time.Second)))
		var before []StageHist
		if snap != nil {
			before = snap()
		}
		st := readStep(ctx, rate, sd, conc, bound, call)
		if snap != nil {
			st.Stages = stageDiff(before, snap())
		}
		steps = append(steps, st)
		verdict := "held"
		if !st.Held {
			verdict = "not held: stop"
		}
		if say != nil {
			say("%s rate: %.0f/s offered → %.0f/s achieved, p50 %.2f ms, p99 %.2f ms (%.2f ms from schedule), %d errors (%s)",
				name, rate, st.Achieved, st.P50Ms, st.P99Ms, st.SchedP99Ms, st.Errors, verdict)
		}
		if !st.Held {
			break
		}
		best = rate
	}
	return steps, best
}

// rateStepsLabel renders the highest rate held for the report: "none" when the first step
// failed, "≥ R" when the last step tried was held (the search stops at the first step not
// held, so every step was held and the limit lies above the rates tried).
func rateStepsLabel(steps []ReadStep, best float64) string {
	switch {
	case len(steps) == 0:
		return "not measured"
	case best == 0:
		return fmt.Sprintf("none (not even %.0f/s)", steps[0].Offered)
	case steps[len(steps)-1].Held:
		return fmt.Sprintf("≥ %.0f/s (held every step tried)", best)
	}
	return fmt.Sprintf("%.0f/s", best)
}

// rateSearches are readRates' results: the steps of each search and the highest rate it held.
type rateSearches struct {
	getfeed, redis, floor             []ReadStep
	getfeedBest, redisBest, floorBest float64
}

// readRates runs the read-throughput search: GetFeed for readers' first pages at each of
// opts.ReadStepRates, then the Redis peer's ZREVRANGE for the same users at the same steps,
// then, when sys is a Pinger, an empty call over GetFeed's transport (the ceiling the transport
// and the load generator allow in this process on this machine), with fanout running in the
// background at opts.EventRate throughout (as in the reads phase).
func readRates(ctx context.Context, sys System, base Baseline, w *World, readers []int, opts Options, t0 time.Time,
	say func(string, ...any)) rateSearches {
	pinger, _ := sys.(Pinger)
	searches := 2
	if pinger != nil {
		searches = 3
	}
	bg, stopBG := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Long enough for every search at every rate; cancelled when they end.
		var d time.Duration
		for _, r := range opts.ReadStepRates {
			d += time.Duration(searches) * max(opts.ReadStepFor, time.Duration(float64(opts.ReadStepMinCalls)/r*float64(time.Second)))
		}
		d += opts.ReadStepFor
		_, _, _ = fanout(bg, sys, w, opts.EventRate, d, 5, nil, t0)
	}()
	say("read rates: GetFeed, then Redis ZREVRANGE%s at %v/s, %v each (at least %d calls), %d concurrent, fanout running; stop at p99 ≥ %v or under %.0f%% of offered achieved",
		map[bool]string{true: ", then an empty gRPC call", false: ""}[pinger != nil],
		opts.ReadStepRates, opts.ReadStepFor, opts.ReadStepMinCalls, opts.ReadStepConcurrency, opts.ReadP99Bound, 100*MinAchievedShare)
	search := func(name string, call func(i int) error, snap func() []StageHist) ([]ReadStep, float64) {
		return rateSteps(ctx, name, opts.ReadStepRates, opts.ReadStepFor, opts.ReadStepMinCalls, opts.ReadStepConcurrency, opts.ReadP99Bound,
			call, snap, say)
	}
	var r rateSearches
	r.getfeed, r.getfeedBest = search("GetFeed",
		func(i int) error { return sys.GetFeed(ctx, w.IDs[readers[i%len(readers)]], opts.PageSize) },
		func() []StageHist { return stages(sys) })
	r.redis, r.redisBest = search("Redis ZREVRANGE", func(i int) error {
		_, err := base.Read(ctx, w.IDs[readers[i%len(readers)]], opts.PageSize)
		return err
	}, nil)
	if pinger != nil {
		r.floor, r.floorBest = search("empty gRPC call", func(int) error { return pinger.Ping(ctx) }, nil)
	}
	stopBG()
	<-done
	// The steps past the limit leave work queued (materializations, fanout); let it finish
	// before the next phase.
	drain(ctx, sys, time.Minute)
	line := fmt.Sprintf("read rates: GetFeed held %s with p99 under %v; Redis ZREVRANGE %s",
		rateStepsLabel(r.getfeed, r.getfeedBest), opts.ReadP99Bound, rateStepsLabel(r.redis, r.redisBest))
	if pinger != nil {
		line += "; an empty gRPC call " + rateStepsLabel(r.floor, r.floorBest)
	}
	say("%s", line)
	return r
}

// RateStepsSummary is the read-throughput search in one line, for the command's output.
func (r *Results) RateStepsSummary() string {
	s := fmt.Sprintf("GetFeed held %s with p99 under %.0f ms; Redis ZREVRANGE held %s",
		rateStepsLabel(r.GetFeedRateSteps, r.GetFeedMaxRate), r.RateStepBoundMs, rateStepsLabel(r.RedisRateSteps, r.RedisMaxRate))
	if len(r.FloorRateSteps) > 0 {
		s += "; an empty gRPC call held " + rateStepsLabel(r.FloorRateSteps, r.FloorMaxRate)
	}
	return s
}
