package zenroute

import (
	"fmt"
	"sync"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrNotCurrent is returned by a write of shard-keyed rows while the process's shard map is not
// confirmed current (its Lease lapsed) and it was not confirmed again within Options.FenceWait.
// It wraps ErrFenced: the process fences every shard for itself until it knows the map again.
var ErrNotCurrent = fmt.Errorf("zenroute: the shard map in use is not confirmed current, so no shard-keyed row is written: %w", ErrFenced)

// ErrLeaseLapsed is returned by a write during which the process's Lease lapsed (the process
// stalled, or lost its ZooKeeper session, while the write was on its way). The write may have
// landed on a store that a newer map no longer names, where nothing reads it: it is not
// acknowledged, and a retry routes by the current map. It wraps zen.ErrUnavailable.
var ErrLeaseLapsed = fmt.Errorf("zenroute: the shard map lease lapsed during the write; its rows may be on a store the current map no longer names: %w", zen.ErrUnavailable)

// Lease is a process's permission to write shard-keyed rows by the map it routes by. The map's
// source extends it while it has confirmed that the map in use is the current one
// (shardwatch.Watcher.WatchZK: a round trip to ZooKeeper that found the version this process has
// applied and acknowledged), and it runs out on its own: a process that stalls (SIGSTOP, a long
// GC pause, a frozen VM) or loses ZooKeeper finds it lapsed when it runs again, and writes
// nothing until the source has confirmed the map again. Its length is shorter than the ZooKeeper
// session timeout, and a mover that stops waiting for a process does so only once that process's
// session has expired; so by the time a map changes without this process, its lease has lapsed.
//
// A Store with a lease checks it twice per write: before the write (a write waits, like one to
// fenced shards, for the lease to be extended, then fails with ErrNotCurrent) and after it (a
// write that returns after the lease lapsed fails with ErrLeaseLapsed, since it may have been
// delayed past a switch of the map). A Lease is safe for concurrent use; the zero value is not
// valid: use NewLease.
type Lease struct {
	mu      sync.Mutex
	until   time.Time
	changed chan struct{} // closed and replaced on every extension
}

// NewLease returns a lease that is not yet valid.
func NewLease() *Lease { return &Lease{changed: make(chan struct{})} }

// Extend makes the lease valid until the given time, unless it already runs longer. until must
// come from time.Now (plus a duration), so that it carries the monotonic clock: a process that
// was stopped finds the time it slept has passed.
func (l *Lease) Extend(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !until.After(l.until) {
		return
	}
	l.until = until
	close(l.changed)
	l.changed = make(chan struct{})
}

// Valid reports whether the lease holds now.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.until)
}

// check reports whether the lease holds now, and a channel closed at its next extension.
func (l *Lease) check() (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.until), l.changed
}
