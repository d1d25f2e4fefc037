package bench

import (
	"context"
	"math"
	"slices"
	"time"
)

// turnResult is what one kind of call of a rotation measured, over all of its turns.
type turnResult struct {
	inOrder []time.Duration // every successful call's latency, in the order the calls started
	starts  []time.Time     // when each of them started, beside inOrder
	errs    int
	calls   int           // calls made
	spent   time.Duration // its turns' share of d, together
	wall    time.Duration // its turns' wall time, the calls in flight at their ends waited for
	sched   schedAcc      // the process's scheduling delay during its turns
}

// summary is the distribution of its successful calls' latencies.
func (t *turnResult) summary() Summary { return Summarize(t.inOrder) }

// sorted is a sorted copy of its latencies.
func (t *turnResult) sorted() []time.Duration {
	s := slices.Clone(t.inOrder)
	slices.Sort(s)
	return s
}

// rate is the calls that succeeded per second of its turns' wall time.
func (t *turnResult) rate() float64 {
	if t.wall <= 0 {
		return 0
	}
	return float64(len(t.inOrder)) / t.wall.Seconds()
}

// rotate measures several kinds of call at the same offered load and concurrency in the same
// stretch of time: in turns of slice each (the first kind, then the second, and so on, round
// and round) until each kind has had d. Measured one after the other, each would meet other
// weather: the store compacting what the phases before wrote, the fanout that runs beside the
// reads starting or ending. In turns, a drift of the machine falls on all of them alike.
// slice 0 (or ≥ d) is one turn each, one kind after the other. Call i of a kind is its i-th
// call, counted across its turns.
func rotate(ctx context.Context, rate float64, d, slice time.Duration, conc int, calls ...func(i int) error) []*turnResult {
	if slice <= 0 || slice > d {
		slice = d
	}
	out := make([]*turnResult, len(calls))
	for k := range out {
		out[k] = &turnResult{}
	}
	for ctx.Err() == nil {
		more := false
		for k, call := range calls {
			t := out[k]
			left := d - t.spent
			if left <= 0 {
				continue
			}
			more = true
			turn := min(slice, left)
			base := t.calls
			s0, start := schedSnapshot(), time.Now()
			_, inOrder, errs, _ := reads(ctx, rate, turn, conc, func(i int) error { return call(base + i) })
			t.wall += time.Since(start)
			t.sched.add(s0, schedSnapshot())
			for _, c := range inOrder {
				t.inOrder = append(t.inOrder, c.took)
				t.starts = append(t.starts, c.at)
			}
			t.errs += errs
			t.calls += len(inOrder) + errs // reads waits for every call it started
			t.spent += turn
		}
		if !more {
			break
		}
	}
	return out
}

// timedCall is one successful call: when it started and how long it took.
type timedCall struct {
	at   time.Time
	took time.Duration
}

// p99ByWindow is the p99, in ms, of the calls that started in each window of w from start to
// end, in order. The span is cut into round(span/w) windows (at least one), the last one
// taking what is left, so a phase a little longer than three minutes has three. A window in
// which no call started is 0.
func (t *turnResult) p99ByWindow(start, end time.Time, w time.Duration) []float64 {
	if w <= 0 || !end.After(start) {
		return nil
	}
	n := max(1, int(math.Round(float64(end.Sub(start))/float64(w))))
	groups := make([][]time.Duration, n)
	for i, at := range t.starts {
		k := min(n-1, max(0, int(at.Sub(start)/w)))
		groups[k] = append(groups[k], t.inOrder[i])
	}
	out := make([]float64, n)
	for k, g := range groups {
		if len(g) > 0 {
			out[k] = Summarize(g).P99
		}
	}
	return out
}
