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
// itself is short of processors, every read is slow, and the store is not to blame. So a read
// answered after Policy.Max is not counted as slow when the process's own scheduling latency
// explains it (see excused). Errors and primary timeouts always count, and so does a read
// beaten by a standby that answered within the cutoff: those are bounded by the hedging budget
// (they cannot make half of a busy interval's reads), and they are how the breaker sees the
// onset of a hang, which must not wait for the primary's timeout because the process is busy.

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

// schedShare: a late read is excused when the process's scheduling latency is at least
// 1/schedShare of Policy.Max. A read waits for a processor several times (its goroutine
// starts, wakes after I/O or a lock, and the caller wakes on its answer), so a quarter of the
// limit per wait is enough to make it late with a healthy store.
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

// excused reports whether a read answered after limit (Policy.Max) is explained by the
// process's own scheduling latency rather than the store.
func (h *Hedger) excused(limit time.Duration) bool {
	if h.sched == nil {
		return false
	}
	if h.sched()*schedShare >= limit {
		h.m.excused.Inc()
		return true
	}
	return false
}
