// Package quiet lets a process's background work take the gaps between its requests.
//
// Go's scheduler has no priorities: background work made runnable while a request is in flight
// (a feed page's preparation of the next chunk, the materialization it leaves behind) takes a
// processor that the request's handler, its response writer or, on a shared machine, the
// client's reader is waiting for. The work that a page starts competes first with that page's
// own response (docs/read-path.md, "Background work takes the gaps"). A Gate counts the
// requests in flight; background work calls Wait before it starts, and starts once none is in
// flight, or after a bound, so that it is delayed, never starved. Lanes bound how much of that
// work runs at once, whatever its kind, so that some processors stay free for the requests.
package quiet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/stats"
)

// DefaultGrace is how long no request must be in flight before background work starts. When
// the last request's handler returns, its answer still has to reach the client: written by the
// transport's writer and, for a client on the same machine (a sidecar, `smartfeed bench`), read
// by that client's reader, which waits for the network poller and a processor. Work started
// 100µs after the end delayed that delivery by about a millisecond in the slowest 1% of the
// bench's pages; 1ms left it at a third of that (docs/read-path.md, "Background work takes the
// gaps").
const DefaultGrace = time.Millisecond

// Gate counts the requests in flight and tells background work when there are none. A nil
// *Gate never waits. Its methods are safe for concurrent use.
type Gate struct {
	grace   time.Duration
	n       atomic.Int64
	waiting atomic.Int32
	mu      sync.Mutex
	idle    chan struct{} // closed (and replaced) when the count falls to 0 while someone waits

	waits *prometheus.CounterVec
	// waited is the time background work spent in Wait.
	waited prometheus.Histogram
}

// New returns a Gate; grace ≤ 0 means DefaultGrace. reg, when not nil, receives its metrics:
// smartfeed_quiet_waits_total{outcome} (quiet: started in a gap; bound: started at the bound
// with requests in flight; cancelled) and smartfeed_quiet_wait_seconds.
func New(grace time.Duration, reg prometheus.Registerer) (*Gate, error) {
	if grace <= 0 {
		grace = DefaultGrace
	}
	f := promauto.With(reg)
	g := &Gate{grace: grace, idle: make(chan struct{}),
		waits: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_quiet_waits_total",
			Help: "Background tasks that waited for a gap between requests, by outcome (quiet, bound, cancelled)."}, []string{"outcome"}),
		waited: f.NewHistogram(prometheus.HistogramOpts{Name: "smartfeed_quiet_wait_seconds",
			Help:    "Time background tasks waited for a gap between requests.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14)}),
	}
	return g, nil
}

// Enter counts a request in flight. Every Enter is matched by one Exit.
func (g *Gate) Enter() {
	if g != nil {
		g.n.Add(1)
	}
}

// Exit ends a request Enter counted, and wakes the waiting background work when it was the last.
func (g *Gate) Exit() {
	if g == nil {
		return
	}
	if g.n.Add(-1) == 0 && g.waiting.Load() > 0 {
		g.mu.Lock()
		close(g.idle)
		g.idle = make(chan struct{})
		g.mu.Unlock()
	}
}

// InFlight is the number of requests in flight.
func (g *Gate) InFlight() int64 {
	if g == nil {
		return 0
	}
	return g.n.Load()
}

// Wait returns once no request has been in flight for the grace, or when bound has passed, or
// ctx is done, and reports whether it found such a gap.
func (g *Gate) Wait(ctx context.Context, bound time.Duration) bool {
	if g == nil {
		return true
	}
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	outcome := "bound"
	defer func() {
		g.waits.WithLabelValues(outcome).Inc()
		g.waited.Observe(time.Since(start).Seconds())
	}()
	for {
		if g.n.Load() == 0 {
			// The request that just ended may still be writing its answer: give it the grace.
			time.Sleep(g.grace)
			if g.n.Load() == 0 {
				outcome = "quiet"
				return true
			}
		}
		left := bound - time.Since(start)
		if left <= 0 {
			return false
		}
		g.waiting.Add(1)
		g.mu.Lock()
		idle := g.idle
		g.mu.Unlock()
		if g.n.Load() == 0 {
			// The last request ended before this waiter was counted: it woke nobody.
			g.waiting.Add(-1)
			continue
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-idle:
			g.waiting.Add(-1)
		case <-timer.C:
			g.waiting.Add(-1)
			return false
		case <-ctx.Done():
			g.waiting.Add(-1)
			outcome = "cancelled"
			return false
		}
	}
}

// StatsHandler is a gRPC server stats handler that counts the server's unary calls in the
// Gate, from their start to the end of their answer (streams are left out: a long-lived one
// would never leave a gap).
func (g *Gate) StatsHandler() stats.Handler { return statsHandler{g} }

type statsHandler struct{ g *Gate }

type callKey struct{}

// call marks a call the Gate counted, so that its End is counted out once.
type call struct{ counted bool }

func (h statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, callKey{}, &call{})
}

func (h statsHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		if !s.IsClientStream && !s.IsServerStream && !c.counted {
			c.counted = true
			h.g.Enter()
		}
	case *stats.End:
		if c.counted {
			c.counted = false
			h.g.Exit()
		}
	}
}

func (statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (statsHandler) HandleConn(context.Context, stats.ConnStats) {}
