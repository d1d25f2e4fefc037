package quiet

import (
	"context"
	"time"
)

// Lanes bound how much of a process's background work runs at once, so that it cannot hold
// every processor while requests wait for one. One Lanes is shared by every kind of background
// work of a process that serves requests: the feed's preparations and inline materializations,
// and the CPU-heavy part of the fanout deliveries a worker runs in the same process. A nil
// *Lanes bounds nothing. Its methods are safe for concurrent use.
type Lanes struct {
	sem chan struct{}
}

// NewLanes returns n lanes (at least one).
func NewLanes(n int) *Lanes {
	return &Lanes{sem: make(chan struct{}, max(1, n))}
}

// Cap is the number of lanes (0 for nil Lanes: no bound).
func (l *Lanes) Cap() int {
	if l == nil {
		return 0
	}
	return cap(l.sem)
}

// InUse is the number of lanes taken now.
func (l *Lanes) InUse() int {
	if l == nil {
		return 0
	}
	return len(l.sem)
}

// Acquire waits for a lane until ctx is done. Every nil return is matched by one Release.
func (l *Lanes) Acquire(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryAcquire waits up to wait for a lane, or until ctx is done, and reports whether it got one
// (then the caller releases it).
func (l *Lanes) TryAcquire(ctx context.Context, wait time.Duration) bool {
	if l == nil {
		return true
	}
	select {
	case l.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Release gives back a lane Acquire or TryAcquire took.
func (l *Lanes) Release() {
	if l != nil {
		<-l.sem
	}
}
