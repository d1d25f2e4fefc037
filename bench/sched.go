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
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return nil
	}
	counts := make([]uint64, len(after.Counts))
	var n uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		n += counts[i]
	}
	if n == 0 {
		return &SchedResult{}
	}
	q := func(p float64) float64 {
		want := uint64(math.Ceil(p * float64(n)))
		var c uint64
		for i, k := range counts {
			if c += k; c >= want {
				ub := after.Buckets[i+1]
				if math.IsInf(ub, 1) {
					ub = after.Buckets[i]
				}
				return ub * 1000
			}
		}
		return math.NaN()
	}
	return &SchedResult{Waits: n, P50Ms: q(0.5), P99Ms: q(0.99), P999Ms: q(0.999)}
}
