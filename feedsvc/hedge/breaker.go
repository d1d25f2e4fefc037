package hedge

import (
	"fmt"
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
	good    verdict = iota
	slow            // answered, but after Policy.Max, or lost to a standby that answered within the cutoff
	failed          // erred or timed out
	excused         // slow or timed out while this process was saturated: no evidence either way
)

// route is where a call goes first.
type route int

const (
	routePrimary route = iota // closed: the ordinary hedged read
	routeProbe                // half-open: the one call that tries the primary
	routeStandby              // open: the standby first, the primary only if it fails
)

// breakerBuckets is the number of slices the BreakerInterval is counted in.
const breakerBuckets = 10

// bucket counts the verdicts recorded in one slice of the interval.
type bucket struct {
	at        int64 // slice number: time / slice width
	good, bad int
	failed    int // of bad
}

// breaker is outlier detection on the primary, by rate over a window with a minimum count
// (Finagle's and Envoy's success-rate ejection, in one process). The window is the primary reads
// judged over the last BreakerInterval, or the last BreakerWindow reads when the interval holds
// fewer (so a quiet service still judges on a sample); it opens when at least BreakerSlowRate of
// the window's reads were slow or failed and they number at least BreakerFailures. A read that
// lost to a standby answering within the cutoff counts as slow; one that lost to a standby as
// slow as itself does not count: the trouble is shared, not the primary's. A short stall of the
// primary, which every read in flight meets at once, is a small share of an interval's reads and
// does not open it; a primary that stays hung does, once its bad reads are most of the interval.
// After BreakerOpenFor it lets one probe through at a time and closes after BreakerProbes good
// probes in a row (a bad probe opens it again).
//
// Between those states it tells waiting calls whether the primary looks hung now (sick), and
// wakes them on every bad verdict and state change (watch), so a call whose hedge the budget
// refused need not wait for the primary's own timeout.
type breaker struct {
	mu       sync.Mutex
	state    string
	ring     []verdict // the last BreakerWindow verdicts
	next, n  int
	buckets  [breakerBuckets]bucket // the verdicts of the last BreakerInterval
	width    time.Duration          // of a bucket, BreakerInterval / breakerBuckets
	openedAt time.Time
	probing  bool
	probesOK int
	// lastGood and lastBad are the start times of the latest-started primary reads judged good
	// and bad while closed.
	lastGood, lastBad time.Time
	changed           chan struct{} // closed and replaced on every bad verdict and state change
	onChange          func(from, to string, why string)
	why               string // why the breaker moved to its state; "" while closed from the start
}

func newBreaker(onChange func(from, to, why string)) *breaker {
	return &breaker{state: BreakerClosed, onChange: onChange, changed: make(chan struct{})}
}

// set moves to state to; mu held. The callback runs under mu (it only logs and counts).
func (b *breaker) set(to, why string, now time.Time) {
	from := b.state
	b.state, b.why = to, why
	b.n, b.next, b.probing, b.probesOK = 0, 0, false, 0
	b.buckets = [breakerBuckets]bucket{}
	b.lastGood, b.lastBad = time.Time{}, time.Time{}
	if to == BreakerOpen {
		b.openedAt = now
	}
	b.notify()
	if b.onChange != nil && from != to {
		b.onChange(from, to, why)
	}
}

// notify wakes the calls watching the breaker; mu held.
func (b *breaker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
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

// record adds the outcome v of a primary read made on route r that started at start.
func (b *breaker) record(p Policy, r route, v verdict, start, now time.Time) {
	if p.BreakerFailures == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if v == excused {
		// Neither good nor bad: a probe gives its slot to the next call, a closed breaker's
		// window and its view of a hang are left as they were.
		if r == routeProbe && b.state == BreakerHalfOpen {
			b.probing = false
		}
		return
	}
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
		if v == good {
			if start.After(b.lastGood) {
				b.lastGood = start
			}
		} else if start.After(b.lastBad) {
			b.lastBad = start
		}
		bad, nFailed, total := b.add(p, v, now)
		if v != good {
			if bad >= p.BreakerFailures && float64(bad) >= p.BreakerSlowRate*float64(total) {
				b.set(BreakerOpen, fmt.Sprintf("%d of the last %d primary reads failed, %d slow", nFailed, total, bad-nFailed), now)
				return
			}
			b.notify()
		}
	}
}

// add counts v in the ring and the interval's buckets and returns the window's bad (failed
// included), failed and total counts: the interval's, or the ring's when the interval holds
// fewer reads than the ring can; mu held.
func (b *breaker) add(p Policy, v verdict, now time.Time) (bad, nFailed, total int) {
	if len(b.ring) != p.BreakerWindow {
		b.ring, b.next, b.n = make([]verdict, p.BreakerWindow), 0, 0
	}
	b.ring[b.next] = v
	b.next = (b.next + 1) % len(b.ring)
	b.n = min(b.n+1, len(b.ring))
	ringBad, ringFailed := 0, 0
	for i := range b.n {
		if b.ring[i] != good {
			ringBad++
		}
		if b.ring[i] == failed {
			ringFailed++
		}
	}

	if w := p.BreakerInterval / breakerBuckets; w != b.width {
		b.width, b.buckets = max(w, 1), [breakerBuckets]bucket{}
	}
	at := now.UnixNano() / int64(b.width)
	k := &b.buckets[at%breakerBuckets]
	if k.at != at {
		*k = bucket{at: at}
	}
	switch v {
	case good:
		k.good++
	case failed:
		k.failed++
		fallthrough
	default:
		k.bad++
	}
	tBad, tFailed, tTotal := 0, 0, 0
	for _, x := range b.buckets {
		if x.at > at-breakerBuckets && x.at <= at {
			tBad += x.bad
			tFailed += x.failed
			tTotal += x.good + x.bad
		}
	}
	if tTotal > b.n {
		return tBad, tFailed, tTotal
	}
	return ringBad, ringFailed, b.n
}

// sick reports whether a call that started at start and is still waiting on the primary past its
// cutoff should give up on it: the breaker is not closed (it opened meanwhile), or the latest
// primary read judged was bad, no read started at or after start was good, and the bad read
// started within horizon before start. A 1% tail does not make the primary sick: reads that
// started after the slow one answer. A hang does, at the first bad verdict. It also returns a
// channel closed at the next bad verdict or state change, to wait on when it is not sick.
func (b *breaker) sick(start time.Time, horizon time.Duration) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != BreakerClosed {
		return true, b.changed
	}
	s := !b.lastBad.IsZero() && b.lastBad.After(b.lastGood) && b.lastGood.Before(start) &&
		start.Sub(b.lastBad) <= horizon
	return s, b.changed
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

// Status returns the breaker's state and why it moved there.
func (b *breaker) Status() (state, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.why
}

func (v verdict) String() string {
	switch v {
	case slow:
		return "slow"
	case failed:
		return "failed"
	case excused:
		return "excused"
	}
	return "good"
}
