package hedge

import (
	"math"
	rtmetrics "runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The breaker judges the primary by how long its reads take, timed from this process. Those
// times include the time each goroutine of the read waited for a processor: when the process
// itself is short of processors, every read is slow, the primary's and the standby's alike, and
// the store is not to blame. So while the process is saturated (its scheduling latency is at
// least a quarter of Policy.Max: a healthy store's read, which waits for a processor several
// times, can take Max) the breaker counts none of the verdicts taken on time: reads answered
// after Max, reads beaten by the standby, and reads past PrimaryTimeout are excused (see judge),
// and they neither open the breaker nor mark the primary hung. Errors always count. Below
// saturation every verdict counts: a read beaten by a standby that answered within the cutoff is
// how the breaker sees the onset of a hang, and a busy machine's scheduling latency of a
// millisecond or two must not hide it.

// schedWindow: the latency is computed over the scheduling events of the last one to two
// schedWindows (the runtime times a sample of the goroutines' transitions, so a shorter span
// holds too few of them). schedEvery is how often the runtime's histogram is read at most (a
// read costs a few microseconds).
const (
	schedWindow = 500 * time.Millisecond
	schedEvery  = 10 * time.Millisecond
)

// schedMinEvents is the least number of scheduling events a latency is computed over; fewer
// (an idle process) report 0.
const schedMinEvents = 16

// schedQuantile is the quantile of the scheduling latencies reported.
const schedQuantile = 0.99

// schedShare: the process is saturated when its scheduling latency is at least 1/schedShare of
// Policy.Max. A read waits for a processor several times (its goroutine starts, wakes after
// I/O or a lock, and the caller wakes on its answer), so a quarter of the limit per wait is
// enough to make it late with a healthy store.
const schedShare = 4

const schedMetric = "/sched/latencies:seconds"

// RuntimeSchedLatency returns a function reporting the recent scheduling latency of this
// process: the schedQuantile of the time runnable goroutines waited for a processor
// (runtime/metrics /sched/latencies:seconds) over roughly the last schedWindow. It reads the
// runtime's histogram at most once per schedEvery, on the caller's goroutine, and is safe for
// concurrent use. It is the default of Options.SchedLatency.
func RuntimeSchedLatency() func() time.Duration {
	w := &schedWatch{sample: []rtmetrics.Sample{{Name: schedMetric}}}
	w.mu.Lock()
	w.refresh(time.Now().UnixNano())
	w.mu.Unlock()
	return w.latency
}

// schedWatch turns the runtime's cumulative scheduling-latency histogram into the latency of
// the recent past: the events since base, a sample between one and two schedWindows old (mid
// becomes the base as it reaches schedWindow).
type schedWatch struct {
	next   atomic.Int64 // unix nanoseconds of the next read
	lat    atomic.Int64 // nanoseconds
	mu     sync.Mutex
	sample []rtmetrics.Sample
	base   []uint64
	mid    []uint64
	midAt  int64
}

func (w *schedWatch) latency() time.Duration {
	now := time.Now().UnixNano()
	if now >= w.next.Load() && w.mu.TryLock() {
		w.refresh(now)
		w.mu.Unlock()
	}
	return time.Duration(w.lat.Load())
}

// refresh reads the histogram and stores the quantile of the events since base; mu held.
func (w *schedWatch) refresh(now int64) {
	w.next.Store(now + int64(schedEvery))
	rtmetrics.Read(w.sample)
	if w.sample[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return
	}
	h := w.sample[0].Value.Float64Histogram()
	if len(w.base) != len(h.Counts) {
		w.base, w.mid, w.midAt = slices.Clone(h.Counts), slices.Clone(h.Counts), now
		return
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - w.base[i]
	}
	lat := int64(0)
	if total >= schedMinEvents {
		rank := uint64(math.Ceil(float64(total) * schedQuantile))
		var seen uint64
		for i, c := range h.Counts {
			seen += c - w.base[i]
			if seen >= rank {
				// The bucket's lower bound: a conservative reading.
				if b := h.Buckets[i]; b > 0 && !math.IsInf(b, 0) {
					lat = int64(b * float64(time.Second))
				}
				break
			}
		}
	}
	w.lat.Store(lat)
	if now-w.midAt >= int64(schedWindow) {
		w.base, w.mid = w.mid, w.base
		copy(w.mid, h.Counts)
		w.midAt = now
	}
}

// Kinds of excused verdicts, the verdict label of smartfeed_hedge_breaker_excused_total.
const (
	excuseLate    = "late"    // answered after Policy.Max
	excuseBeaten  = "beaten"  // lost to a standby that answered within the cutoff
	excuseTimeout = "timeout" // failed at its own deadline, Policy.PrimaryTimeout
)

// judge returns v, a verdict on a primary read's time (of the given kind), or excused when the
// process is saturated: its scheduling latency is at least 1/schedShare of Policy.Max.
func (h *Hedger) judge(p Policy, v verdict, kind string) verdict {
	if h.sched == nil || h.sched()*schedShare < p.Max {
		return v
	}
	h.m.excused.WithLabelValues(kind).Inc()
	return excused
}
