package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Admission control (docs/reliability.md, "Overload"). GetFeed calls run at most
// Config.MaxInflight at once; a call past that waits in line, at most MaxInflight of them, for
// up to Config.AdmissionWait, and is then shed: it fails with an *OverloadError (gRPC
// RESOURCE_EXHAUSTED with a RetryInfo) having done nothing. An overloaded process so answers
// the calls it takes at the latency of a loaded one, not of a queue growing without bound, and
// says so to the others instead of answering them late or degraded; when the load falls the
// line empties and nothing is shed.

// ErrOverloaded is wrapped by the error of a call shed by admission control.
var ErrOverloaded = errors.New("feed service overloaded")

// OverloadError is the error of a call shed by admission control: it was not run.
type OverloadError struct {
	// Reason is "queue_full" (the line was full) or "queue_timeout" (no slot within
	// Config.AdmissionWait), the reason label of smartfeed_feed_shed_total.
	Reason string
	// RetryAfter is how long the caller should wait before it tries again.
	RetryAfter time.Duration
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("%v (%s): retry after %v", ErrOverloaded, e.Reason, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadError) Unwrap() error { return ErrOverloaded }

// Shed reasons, the label values of smartfeed_feed_shed_total.
const (
	shedQueueFull    = "queue_full"
	shedQueueTimeout = "queue_timeout"
)

// DefaultMaxInflight is Config.MaxInflight's value when 0: 64 calls per processor the Go
// runtime may use (GOMAXPROCS). A page on an embedded store is a fraction of a millisecond of
// processor time and waits on I/O (a synced write, the generator) for a few milliseconds, so
// far fewer are in flight below saturation; the bound only stops a queue from growing.
func DefaultMaxInflight() int { return 64 * runtime.GOMAXPROCS(0) }

// admission is a semaphore with a bounded line, whose limit may change at run time.
type admission struct {
	mu      sync.Mutex
	running int
	line    []chan struct{} // FIFO; a slot is handed over by closing the channel
}

// acquire takes a slot for one call: at once when fewer than limit run, else after waiting in
// line (at most limit waiting) up to wait. It returns the shed reason when it got none, or
// ctx's error.
func (a *admission) acquire(ctx context.Context, limit int, wait time.Duration) (string, error) {
	a.mu.Lock()
	if a.running < limit {
		a.running++
		a.mu.Unlock()
		return "", nil
	}
	if len(a.line) >= limit || wait <= 0 {
		a.mu.Unlock()
		return shedQueueFull, nil
	}
	ch := make(chan struct{})
	a.line = append(a.line, ch)
	a.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	reason := shedQueueTimeout
	select {
	case <-ch:
		return "", nil
	case <-t.C:
	case <-ctx.Done():
		err, reason = ctx.Err(), ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, c := range a.line {
		if c == ch {
			a.line = append(a.line[:i], a.line[i+1:]...)
			return reason, err
		}
	}
	// Handed a slot as it gave up: keep it.
	return "", nil
}

// release gives a slot back: to the first in line, if any, while no more than limit run.
func (a *admission) release(limit int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.line) > 0 && a.running <= limit {
		close(a.line[0])
		a.line = a.line[1:]
		return
	}
	a.running--
}

// inflight returns the calls running and waiting.
func (a *admission) inflight() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, len(a.line)
}

// admit takes a slot for a GetFeed call under cfg's limits and returns the limit to give it
// back under (s.adm.release). A call that gets none is shed: an *OverloadError, counted in
// smartfeed_feed_shed_total.
func (s *Service) admit(ctx context.Context, cfg Config) (limit int, err error) {
	limit = cfg.MaxInflight
	if limit == 0 {
		limit = DefaultMaxInflight()
	}
	reason, err := s.adm.acquire(ctx, limit, cfg.AdmissionWait)
	if err != nil {
		return 0, err
	}
	if reason != "" {
		s.m.shed.WithLabelValues(reason).Inc()
		return 0, &OverloadError{Reason: reason, RetryAfter: retryAfter(cfg)}
	}
	return limit, nil
}

// retryAfter is the delay a shed call is told to wait: the line's wait, at least 10ms, so that
// the retries of shed calls come after the line has moved.
func retryAfter(cfg Config) time.Duration {
	return max(cfg.AdmissionWait, 10*time.Millisecond)
}
