package hedge

import (
	"slices"
	"sync"
	"time"
)

// window is a ring of the most recent primary latencies, with the percentile recomputed every
// refreshEvery samples (a selection over a copy, linear in the window) and cached.
type window struct {
	mu       sync.Mutex
	ring     []time.Duration
	n        int // samples ever added, saturating at len(ring) for the fill level
	next     int
	since    int // samples since the last refresh
	refresh  int
	sorted   []time.Duration // scratch
	cachedAt float64         // percentile the cache was computed for
	cached   time.Duration
	valid    bool
}

func newWindow(size, refreshEvery int) *window {
	return &window{ring: make([]time.Duration, size), refresh: refreshEvery}
}

func (w *window) add(d time.Duration) {
	w.mu.Lock()
	w.ring[w.next] = d
	w.next = (w.next + 1) % len(w.ring)
	if w.n < len(w.ring) {
		w.n++
	}
	w.since++
	if w.since >= w.refresh {
		w.valid = false
	}
	w.mu.Unlock()
}

// percentile returns the q-th percentile (0 < q < 100) of the window and the sample count.
func (w *window) percentile(q float64) (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return 0, 0
	}
	if w.valid && w.cachedAt == q {
		return w.cached, w.n
	}
	w.sorted = append(w.sorted[:0], w.ring[:w.n]...)
	// Nearest rank: the smallest sample with at least q% of the samples at or below it.
	rank := int(float64(w.n)*q/100+0.999999999) - 1
	rank = max(0, min(rank, w.n-1))
	w.cached, w.cachedAt, w.valid, w.since = nth(w.sorted, rank), q, true, 0
	return w.cached, w.n
}

// nth returns the value s would hold at index k (0 <= k < len(s)) once sorted, reordering s:
// a quickselect with three-way partitions (so runs of equal latencies, common at a coarse
// clock, stay linear) around a middle pivot.
func nth(s []time.Duration, k int) time.Duration {
	lo, hi := 0, len(s)
	for hi-lo > 16 {
		pivot := median3(s[lo], s[lo+(hi-lo)/2], s[hi-1])
		// s[lo:lt] < pivot, s[lt:i] == pivot, s[gt:hi] > pivot.
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch {
			case s[i] < pivot:
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case s[i] > pivot:
				gt--
				s[gt], s[i] = s[i], s[gt]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k >= gt:
			lo = gt
		default:
			return pivot
		}
	}
	slices.Sort(s[lo:hi])
	return s[k]
}

func median3(a, b, c time.Duration) time.Duration {
	if a > b {
		a, b = b, a
	}
	if b > c {
		b = c
	}
	return max(a, b)
}
