package feedsvc

import (
	"sync"
	"time"
)

// LagLog keeps the most recent replication-lag measurements, numbered from 0 in the order they
// were taken, so a caller can take exact percentiles over a window of its own (a benchmark
// phase) where the exported histograms have coarse buckets. It keeps the last Cap measurements;
// older ones are dropped.
type LagLog struct {
	mu  sync.Mutex
	buf []time.Duration
	n   uint64 // measurements ever added
}

func newLagLog(capacity int) *LagLog { return &LagLog{buf: make([]time.Duration, capacity)} }

func (l *LagLog) add(ds ...time.Duration) {
	l.mu.Lock()
	for _, d := range ds {
		l.buf[l.n%uint64(len(l.buf))] = d
		l.n++
	}
	l.mu.Unlock()
}

// Since returns the measurements numbered from `from` on that are still kept, oldest first, and
// the number the next measurement will get (pass it as `from` to read on). dropped counts the
// measurements since `from` that were already overwritten.
func (l *LagLog) Since(from uint64) (lags []time.Duration, next uint64, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since(from)
}

func (l *LagLog) since(from uint64) (lags []time.Duration, next uint64, dropped uint64) {
	capacity := uint64(len(l.buf))
	start := from
	if l.n > capacity && start < l.n-capacity {
		start = l.n - capacity
	}
	if start > l.n {
		start = l.n
	}
	lags = make([]time.Duration, 0, l.n-start)
	for i := start; i < l.n; i++ {
		lags = append(lags, l.buf[i%capacity])
	}
	return lags, l.n, start - min(from, start)
}

// Latest returns the last n measurements still kept, oldest first.
func (l *LagLog) Latest(n int) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lags, _, _ := l.since(l.n - min(l.n, uint64(max(n, 0))))
	return lags
}
