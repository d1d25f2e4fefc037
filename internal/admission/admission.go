// Package admission lets a process's background writes yield the CPU to the requests a user
// waits on. When the fanout and the feed share a process on a small machine, a GetFeed's
// goroutines otherwise queue in the Go scheduler behind the fanout's (docs/read-path.md, "The
// demo's client-side tail is waiting for a CPU"). Requests bracket themselves with Begin and its
// end function; a background step calls Yield before it starts, which waits while any request
// is in flight, at most the gate's MaxWait, so the background work slows but never stops.
// CockroachDB's admission control makes the same split between foreground and elastic work.
package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Gate counts the requests in flight and holds background steps back while there are any. A
// nil *Gate admits everything at once. It is safe for concurrent use.
type Gate struct {
	maxWait time.Duration
	active  atomic.Int64 // requests in flight (read without the lock by Yield's fast path)
	mu      sync.Mutex
	idle    chan struct{} // closed when the last request in flight ends
	yields  prometheus.Counter
	waited  prometheus.Counter
}

// New returns a gate whose Yield waits at most maxWait (> 0). reg, when not nil, receives
// smartfeed_admission_yields_total and smartfeed_admission_yield_seconds_total.
func New(maxWait time.Duration, reg prometheus.Registerer) (*Gate, error) {
	if maxWait <= 0 {
		return nil, errors.New("admission: max wait must be positive")
	}
	g := &Gate{maxWait: maxWait,
		yields: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_admission_yields_total",
			Help: "Background steps (fanout inserts) that waited for requests in flight to end."}),
		waited: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_admission_yield_seconds_total",
			Help: "Time background steps spent waiting for requests in flight (at most the max wait each)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{g.yields, g.waited} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return g, nil
}

// Begin marks a request in flight; call the function it returns when the request ends.
func (g *Gate) Begin() (end func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.active.Add(1) == 1 {
		g.idle = make(chan struct{})
	}
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			if g.active.Add(-1) == 0 {
				close(g.idle)
			}
			g.mu.Unlock()
		})
	}
}

// InFlight returns the number of requests in flight.
func (g *Gate) InFlight() int64 {
	if g == nil {
		return 0
	}
	return g.active.Load()
}

// Yield returns at once when no request is in flight; otherwise it waits until none is, the
// max wait passes or ctx ends, whichever is first.
func (g *Gate) Yield(ctx context.Context) {
	if g == nil || g.active.Load() == 0 {
		return
	}
	g.mu.Lock()
	if g.active.Load() == 0 {
		g.mu.Unlock()
		return
	}
	idle := g.idle
	g.mu.Unlock()
	start := time.Now()
	t := time.NewTimer(g.maxWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	}
	g.yields.Inc()
	g.waited.Add(time.Since(start).Seconds())
}
