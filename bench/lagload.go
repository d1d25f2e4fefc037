package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

// ReadLoad starts GetFeed calls at rate per second from the load generator in a process of its
// own, over users, and returns the function that stops it and returns its report (the phase's
// one window). cmd/smartfeed starts `smartfeed loadgen` for it.
type ReadLoad func(ctx context.Context, users []uint64, rate float64) (stop func() (*loadgen.Report, error), err error)

// LagUnderReads is the sustained event rate under read load: events published at stepped rates
// while the load generator, in its own process, offers GetFeed at ReadRate throughout.
type LagUnderReads struct {
	ReadRate float64 `json:"getfeed_offered_per_sec"`
	// GetFeed is the generator's window over the whole phase (achieved rate, latency from
	// schedule and from send, errors); absent when its report could not be read.
	GetFeed *loadgen.Window `json:"getfeed,omitempty"`
	// ReadsSeenAfter is how long after the generator started the server counted its first
	// GetFeed: the steps started then.
	ReadsSeenAfter float64      `json:"reads_seen_after_seconds"`
	Steps          []StepResult `json:"steps"`
	BoundMs        float64      `json:"lag_p99_bound_ms"`
	// MaxRate is the highest event rate whose fanout lag p99 stayed under the bound (0: none).
	MaxRate float64 `json:"max_event_rate_lag_p99_under_bound"`
	// EventRate is the profile's sustained event rate, and LagP99AtEventRate the fanout lag
	// p99 at it under the read load, in seconds (fanout_lag_p99_s_at_read_load).
	EventRate         float64 `json:"event_rate"`
	LagP99AtEventRate float64 `json:"lag_p99_s_at_event_rate"`
	// BySecond is the lag of the events published in each second of the phase, for a plot.
	BySecond []LagSecond `json:"lag_by_second"`
	// GeneratorPeakRSSMiB is the load generator process's peak RSS.
	GeneratorPeakRSSMiB float64 `json:"loadgen_peak_rss_mib"`

	series []lagPoint
}

// LagSecond is the fanout lag of the sampled events published in one second of the phase.
type LagSecond struct {
	At     float64 `json:"at_s"`
	Rate   float64 `json:"event_rate"`
	N      int     `json:"n"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	points []time.Duration
}

// lagStepRates are the event rates of the phase: the steps, and the sustained rate, in order.
func lagStepRates(steps []float64, eventRate float64) []float64 {
	rs := slices.Clone(steps)
	if eventRate > 0 {
		rs = append(rs, eventRate)
	}
	slices.Sort(rs)
	return slices.Compact(rs)
}

// lagBySecond groups the series (times from the phase's start) by second, each second labelled
// with the event rate of the step it fell in (rateAt).
func lagBySecond(series []lagPoint, rateAt func(time.Duration) float64) []LagSecond {
	by := map[int]*LagSecond{}
	for _, p := range series {
		s := int(p.at / time.Second)
		ls, ok := by[s]
		if !ok {
			ls = &LagSecond{At: float64(s), Rate: rateAt(p.at)}
			by[s] = ls
		}
		ls.points = append(ls.points, p.lag)
	}
	out := make([]LagSecond, 0, len(by))
	for _, ls := range by {
		sum := Summarize(ls.points)
		ls.N, ls.P50Ms, ls.P99Ms, ls.MaxMs, ls.points = sum.N, sum.P50, sum.P99, sum.Max, nil
		out = append(out, *ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// waitReads waits until sys has counted a GetFeed call more than it had when called (the
// load generator's calls arriving), or limit passes; a System that counts none is not waited
// for.
func waitReads(ctx context.Context, sys System, limit time.Duration) (time.Duration, error) {
	fc, ok := sys.(FreshCounter)
	if !ok {
		return 0, nil
	}
	total := func() uint64 {
		var n uint64
		for _, v := range fc.FreshCounts() {
			n += v
		}
		return n
	}
	n0, start := total(), time.Now()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for total() == n0 {
		if time.Since(start) > limit {
			return time.Since(start), fmt.Errorf("no GetFeed arrived in %v", limit)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-t.C:
		}
	}
	return time.Since(start), nil
}

// lagUnderReads is the phase: the load generator offers GetFeed at opts.LagReadRate over users
// for the whole phase; once its calls arrive, events are published at each rate of
// lagStepRates for opts.StepFor (the queues drained after each), up to the first rate at or
// above the sustained rate whose lag p99 is over opts.LagBound.
func lagUnderReads(ctx context.Context, sys System, w *World, users []uint64, opts Options, say func(string, ...any)) (*LagUnderReads, error) {
	lr := &LagUnderReads{ReadRate: opts.LagReadRate, BoundMs: ms(opts.LagBound), EventRate: opts.EventRate}
	stop, err := opts.ReadLoad(ctx, users, opts.LagReadRate)
	if err != nil {
		return lr, fmt.Errorf("read load: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = stop()
		}
	}()
	seen, err := waitReads(ctx, sys, 30*time.Second)
	lr.ReadsSeenAfter = seen.Seconds()
	if err != nil {
		return lr, fmt.Errorf("read load: %w", err)
	}
	say("lag under reads: GetFeed at %.0f/s from the load generator (seen after %.1f s); events at stepped rates, %v each", opts.LagReadRate, seen.Seconds(), opts.StepFor)
	t0 := time.Now()
	type span struct {
		from, to time.Duration
		rate     float64
	}
	var spans []span
	for i, rate := range lagStepRates(opts.StepRates, opts.EventRate) {
		from := time.Since(t0)
		n, l, ferr := fanout(ctx, sys, w, rate, opts.StepFor, uint64(30+i), &lr.series, t0)
		spans = append(spans, span{from, time.Since(t0), rate})
		// A backlog the step left that does not drain in two more step lengths is the step's
		// verdict (its lag p99 shows it) and the next step's handicap, not a reason to wait.
		drain(ctx, sys, 2*opts.StepFor)
		s := l.Summary()
		st := StepResult{Rate: rate, Events: n, LagP99Ms: s.P99, Sustainable: ferr == nil && s.N > 0 && s.P99 < ms(opts.LagBound)}
		lr.Steps = append(lr.Steps, st)
		say("lag under reads: %.0f events/s → lag p99 %.0f ms (%v)", rate, s.P99, st.Sustainable)
		if st.Sustainable {
			lr.MaxRate = rate
		}
		if rate == opts.EventRate {
			lr.LagP99AtEventRate = s.P99 / 1000
		}
		if ctx.Err() != nil {
			break
		}
		if !st.Sustainable && rate >= opts.EventRate {
			break
		}
	}
	stopped = true
	rep, serr := stop()
	if rep != nil {
		lr.GeneratorPeakRSSMiB = rep.PeakRSSMiB
	}
	if rep != nil && len(rep.Windows) > 0 {
		win := rep.Windows[len(rep.Windows)-1]
		lr.GetFeed = &win
	}
	lr.BySecond = lagBySecond(lr.series, func(at time.Duration) float64 {
		for _, s := range spans {
			if at >= s.from && at < s.to {
				return s.rate
			}
		}
		return math.NaN()
	})
	for i := range lr.BySecond {
		if math.IsNaN(lr.BySecond[i].Rate) {
			lr.BySecond[i].Rate = 0
		}
	}
	if serr != nil {
		return lr, fmt.Errorf("read load: %w", serr)
	}
	if lr.GetFeed == nil {
		return lr, errors.New("read load: the load generator reported no window")
	}
	return lr, ctx.Err()
}

// LagUnderReadsSummary is the phase in a line.
func (lr *LagUnderReads) LagUnderReadsSummary() string {
	g := "GetFeed not measured"
	if w := lr.GetFeed; w != nil {
		g = fmt.Sprintf("GetFeed %.0f/s achieved of %.0f offered, p99 %.1f ms from schedule", w.Achieved, w.Offered, w.FromSchedule.P99)
	}
	return fmt.Sprintf("highest event rate with fanout lag p99 under %.0f ms: %.0f/s; lag p99 at %.0f events/s: %.2f s; %s",
		lr.BoundMs, lr.MaxRate, lr.EventRate, lr.LagP99AtEventRate, g)
}
