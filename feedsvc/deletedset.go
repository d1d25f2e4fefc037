package feedsvc

import (
	"context"
	"fmt"
	"sync"

	"github.com/smartfeed/smartfeed/zen"
)

// DeletionLog is the graph's log of deleted objects, numbered from 1 without gaps (cmd wires
// zen.Graph.DeletionsAfter over the uncached store).
type DeletionLog interface {
	// DeletionsAfter returns the IDs of up to limit rows after the first `after`, in order.
	// When it returns fewer than limit, no deletion acknowledged before the call is missing.
	DeletionsAfter(ctx context.Context, after uint64, limit int) ([]zen.ID, error)
}

// DeletedSet is a Liveness kept in memory: the set of every object the graph's deletion log
// names (deleted pins, and the pins of deleted users, which their deletion deletes one by one).
// Each Live call first catches up with the log, which in the steady state (no deletion since
// the last call) is one point read of the log's next row, instead of a read of every pin of the
// page; a pin is live unless the set names it. Because a deletion is logged before it is
// acknowledged and the log has no gaps, a deletion acknowledged before a page began is never
// served by that page, whichever process ran it and whichever feed process serves the page.
//
// Unlike a read of the objects, the set does not tell absent objects from live ones: the
// materialized feed holds only pins that existed when their chunks were generated, and objects
// are never removed, only soft-deleted. The set grows by one entry per deletion (about 40
// bytes); a process that starts reads the whole log once.
type DeletedSet struct {
	log  DeletionLog
	page int

	mu      sync.RWMutex
	deleted map[zen.ID]struct{}
	seen    uint64 // rows of the log applied to deleted
}

// NewDeletedSet returns an empty DeletedSet over log; the first Live call reads the log.
func NewDeletedSet(log DeletionLog) *DeletedSet {
	return &DeletedSet{log: log, page: zen.MaxDeletionsPage, deleted: map[zen.ID]struct{}{}}
}

// Live implements Liveness: the valid pins the deletion log does not name, as of the call.
func (d *DeletedSet) Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	if err := d.CatchUp(ctx); err != nil {
		return nil, err
	}
	out := make(map[zen.ID]bool, len(pins))
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, p := range pins {
		if _, gone := d.deleted[p]; !gone && p.Valid() {
			out[p] = true
		}
	}
	return out, nil
}

// Deleted reports whether the set names id (as of the last catch-up).
func (d *DeletedSet) Deleted(id zen.ID) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, gone := d.deleted[id]
	return gone
}

// CatchUp applies the log's rows past those already applied. Concurrent calls may read the
// same rows; each row is applied once, in order.
func (d *DeletedSet) CatchUp(ctx context.Context) error {
	for {
		d.mu.RLock()
		after := d.seen
		d.mu.RUnlock()
		ids, err := d.log.DeletionsAfter(ctx, after, d.page)
		if err != nil {
			return fmt.Errorf("deleted set: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		d.mu.Lock()
		for i, id := range ids {
			if n := after + 1 + uint64(i); n == d.seen+1 {
				d.deleted[id] = struct{}{}
				d.seen = n
			}
		}
		d.mu.Unlock()
		if len(ids) < d.page {
			return nil
		}
	}
}
