package hedge

import (
	"sync"
	"time"
)

// Breaker states.
const (
	// BreakerClosed: reads go to the primary first (hedged as the policy says).
	BreakerClosed = "closed"
	// BreakerOpen: the primary is sick; reads go to the standby first and do not spend budget.
	BreakerOpen = "open"
	// BreakerHalfOpen: one probe read at a time tries the primary; the others go to the standby.
	BreakerHalfOpen = "half-open"
)

// primary read outcomes recorded by the breaker.
type verdict int

const (
	good   verdict = iota
	slow           // answered, but after Policy.Max, or lost to a standby that answered within the cutoff
	failed         // erred or timed out
)

// route is where a call goes first.
type route int

const (
	routePrimary route = iota // closed: the ordinary hedged read
	routeProbe                // half-open: the one call that tries the primary
	routeStandby              // open: the standby first, the primary only if it fails
)

// breaker is outlier detection on the primary (Envoy's consecutive-errors and
// success-rate ejection, in one process): it opens on BreakerFailures consecutive failed or slow
// reads (a read that lost to a standby answering within the cutoff counts as slow; one that lost
// to a standby as slow as itself does not count: the trouble is shared, not the primary's) or
// when at least BreakerSlowRate of the last BreakerWindow primary reads were slow or failed;
// after BreakerOpenFor it lets one probe through at a time and closes after BreakerProbes good
// probes in a row (a bad probe opens it again).
type breaker struct {
	mu       sync.Mutex
	state    string
	consec   int
	ring     []verdict
	next, n  int
	openedAt time.Time
	probing  bool
	probesOK int
	onChange func(from, to string, why string)
}

func newBreaker(onChange func(from, to, why string)) *breaker {
	return &breaker{state: BreakerClosed, onChange: onChange}
}

// set moves to state to; mu held. The callback runs under mu (it only logs and counts).
func (b *breaker) set(to, why string, now time.Time) {
	from := b.state
	b.state = to
	b.consec, b.n, b.next, b.probing, b.probesOK = 0, 0, 0, false, 0
	if to == BreakerOpen {
		b.openedAt = now
	}
	if b.onChange != nil && from != to {
		b.onChange(from, to, why)
	}
}

// route decides where a call goes, moving open → half-open once BreakerOpenFor has passed.
func (b *breaker) route(p Policy, now time.Time) route {
	if p.BreakerFailures == 0 {
		return routePrimary
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		if now.Sub(b.openedAt) < p.BreakerOpenFor {
			return routeStandby
		}
		b.set(BreakerHalfOpen, "open for "+p.BreakerOpenFor.String(), now)
		fallthrough
	case BreakerHalfOpen:
		if b.probing {
			return routeStandby
		}
		b.probing = true
		return routeProbe
	}
	return routePrimary
}

// record adds the outcome of a primary read made on route r.
func (b *breaker) record(p Policy, r route, v verdict, now time.Time) {
	if p.BreakerFailures == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r == routeProbe && b.state == BreakerHalfOpen:
		b.probing = false
		if v != good {
			b.set(BreakerOpen, "probe "+v.String(), now)
			return
		}
		b.probesOK++
		if b.probesOK >= p.BreakerProbes {
			b.set(BreakerClosed, "probes succeeded", now)
		}
	case r == routePrimary && b.state == BreakerClosed:
		if len(b.ring) != p.BreakerWindow {
			b.ring, b.next, b.n = make([]verdict, p.BreakerWindow), 0, 0
		}
		b.ring[b.next] = v
		b.next = (b.next + 1) % len(b.ring)
		b.n = min(b.n+1, len(b.ring))
		if v != good {
			// A hanging primary never fails: its reads are cut at the cutoff and lose to the
			// standby. Consecutive slow reads open the breaker as consecutive errors do.
			b.consec++
		} else {
			b.consec = 0
		}
		bad := 0
		for i := range b.n {
			if b.ring[i] != good {
				bad++
			}
		}
		switch {
		case b.consec >= p.BreakerFailures:
			b.set(BreakerOpen, "consecutive failed or slow reads", now)
		case b.n >= p.BreakerWindow && float64(bad) >= p.BreakerSlowRate*float64(b.n):
			b.set(BreakerOpen, "slow or failed reads over the window", now)
		}
	}
}

// release frees the probe slot of a half-open breaker when the probe ended with no verdict.
func (b *breaker) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen {
		b.probing = false
	}
}

// State returns the breaker's state (closed, open or half-open).
func (b *breaker) State() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (v verdict) String() string {
	switch v {
	case slow:
		return "slow"
	case failed:
		return "failed"
	}
	return "good"
}
