package bench

import (
	"slices"
	"sync"
	"time"
)

// Latencies collects durations from many goroutines.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Summary returns the count and the percentiles of what was recorded.
func (l *Latencies) Summary() Summary {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	return Summarize(d)
}

// Summary is a latency distribution in milliseconds.
type Summary struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Summarize computes a Summary (nearest-rank percentiles).
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Summary{N: len(s), P50: ms(Quantile(s, 0.50)), P99: ms(Quantile(s, 0.99)), P999: ms(Quantile(s, 0.999)),
		Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

// Quantile is the nearest-rank q-quantile of sorted samples.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
