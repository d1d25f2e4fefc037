package bench

import (
	"math"
	"runtime/metrics"
)

// schedLatencies is the runtime's histogram of the time goroutines spent runnable before they
// ran (/sched/latencies:seconds): how long a request handler that became ready (its reply came
// in, its timer fired) waited for a CPU. The bench runs the system in its own process, so this
// is the system's scheduling delay, with the load generator's goroutines in it too.
const schedLatencies = "/sched/latencies:seconds"

// schedSnapshot reads the scheduling-latency histogram (nil when the runtime lacks it).
func schedSnapshot() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// SchedResult is the scheduling delay over a phase: the quantiles of the time goroutines
// waited, runnable, for a CPU, from the runtime's histogram (bucket upper bounds).
type SchedResult struct {
	Waits  uint64  `json:"waits"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
}

// schedDiff is the scheduling delay between two snapshots of the histogram.
func schedDiff(before, after *metrics.Float64Histogram) *SchedResult {
	var a schedAcc
	a.add(before, after)
	return a.result()
}

// schedAcc adds up the scheduling delay of several stretches of time (the slices of one kind
// of call in an interleaved phase).
type schedAcc struct {
	counts  []uint64
	buckets []float64
	bad     bool // a snapshot was missing or of another shape
}

// add counts the waits between two snapshots of the histogram.
func (a *schedAcc) add(before, after *metrics.Float64Histogram) {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) ||
		a.counts != nil && len(a.counts) != len(after.Counts) {
		a.bad = true
		return
	}
	if a.counts == nil {
		a.counts, a.buckets = make([]uint64, len(after.Counts)), after.Buckets
	}
	for i := range a.counts {
		a.counts[i] += after.Counts[i] - before.Counts[i]
	}
}

// result is the quantiles of the waits added (nil when a snapshot was missing).
func (a *schedAcc) result() *SchedResult {
	if a.bad || a.counts == nil {
		return nil
	}
	var n uint64
	for _, k := range a.counts {
		n += k
	}
	if n == 0 {
		return &SchedResult{}
	}
	q := func(p float64) float64 {
		want := uint64(math.Ceil(p * float64(n)))
		var c uint64
		for i, k := range a.counts {
			if c += k; c >= want {
				ub := a.buckets[i+1]
				if math.IsInf(ub, 1) {
					ub = a.buckets[i]
				}
				return ub * 1000
			}
		}
		return math.NaN()
	}
	return &SchedResult{Waits: n, P50Ms: q(0.5), P99Ms: q(0.99), P999Ms: q(0.999)}
}
