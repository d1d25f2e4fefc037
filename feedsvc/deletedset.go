package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// DeletionLog is the graph's log of deleted objects, numbered from 1 without gaps, and its
// compacted snapshot (cmd wires a zen.Graph over the uncached store).
type DeletionLog interface {
	// DeletionsAfter returns the IDs of up to limit rows after the first `after`, in order.
	// When it returns fewer than limit, no deletion acknowledged before the call is missing.
	// An error wrapping zen.ErrDeletionsTrimmed says rows past `after` were trimmed: the
	// snapshot names them.
	DeletionsAfter(ctx context.Context, after uint64, limit int) ([]zen.ID, error)
	// DeletionSnapshot returns the position the snapshot covers and the IDs of the rows up to
	// it.
	DeletionSnapshot(ctx context.Context) (uint64, []zen.ID, error)
	// CompactDeletions folds the rows past the snapshot into a new one when there are at least
	// minRows, trims the rows it covers, and returns the position of the snapshot in place.
	CompactDeletions(ctx context.Context, minRows int) (uint64, error)
}

// DefaultCompactAfter is how many rows of the deletion log past its snapshot make a DeletedSet
// compact the log (DeletedSet.SetCompactAfter).
const DefaultCompactAfter = 16384

// compactTimeout bounds one compaction in the background.
const compactTimeout = time.Minute

// DeletedSet is a Liveness kept in memory: the set of every object the graph's deletion log
// names (deleted pins, and the pins of deleted users, which their deletion deletes one by one).
// Each Live call first catches up with the log, which in the steady state (no deletion since
// the last call) is one read of the log past its last row, instead of a read of every pin of the
// page; a pin is live unless the set names it. Because a deletion is logged before it is
// acknowledged and the log has no gaps, a deletion acknowledged before a page began is never
// served by that page, whichever process ran it and whichever feed process serves the page.
//
// Unlike a read of the objects, the set does not tell absent objects from live ones: the
// materialized feed holds only pins that existed when their chunks were generated, and objects
// are never removed, only soft-deleted. The set grows by one entry per deleted object (about 40
// bytes). A process that starts loads the log's snapshot (a few rows, about 2-8 bytes per
// deletion) and then the rows past it; once the rows past the snapshot number CompactAfter, the
// set compacts the log in the background (zen.Graph.CompactDeletions), so the log and a start
// stay bounded. Compactions by several processes are safe: one wins, the others find the log
// compacted.
type DeletedSet struct {
	log          DeletionLog
	page         int
	compactAfter int
	// epoch is the origin of asOf and of the flights' starts (its monotonic reading).
	epoch time.Time

	mu      sync.RWMutex
	deleted map[zen.ID]struct{}
	seen    uint64      // rows of the log applied to deleted
	base    uint64      // the position of the latest snapshot this set knows of
	loaded  atomic.Bool // the snapshot was loaded once
	// asOf is when (ns after epoch) the latest read of the log that found nothing past the
	// rows applied began: every deletion acknowledged before asOf is in deleted. It is read
	// and moved without mu, so that pages of a set with no new deletion take no exclusive lock.
	asOf atomic.Int64

	// flight is the read of the log running now, if any: a page that began before it began
	// waits for it instead of reading the log itself.
	flightMu sync.Mutex
	flight   *catchUpFlight

	compacting sync.Mutex // held by the one compaction running
	wg         sync.WaitGroup
	logger     *zap.Logger
	retryAt    time.Time // after a failed compaction, none starts before; under mu
}

// catchUpFlight is one catch-up with the log: began is when (ns after the set's epoch) its
// first read began. Under the set's flightMu: done is made by the first caller that waits for
// it and closed when the read ends, err set before.
type catchUpFlight struct {
	began int64
	done  chan struct{}
	err   error
}

// NewDeletedSet returns an empty DeletedSet over log; the first Live call reads the log.
func NewDeletedSet(log DeletionLog) *DeletedSet {
	d := &DeletedSet{log: log, page: zen.MaxDeletionsPage, compactAfter: DefaultCompactAfter,
		epoch: time.Now(), deleted: map[zen.ID]struct{}{}, logger: zap.NewNop()}
	d.asOf.Store(math.MinInt64)
	return d
}

// SetCompactAfter sets how many rows past the log's snapshot start a compaction (0: never); call
// it before the set is used.
func (d *DeletedSet) SetCompactAfter(n int) { d.compactAfter = n }

// WithLogger sets the logger of the background compactions (a line for each, a warning when
// one fails) and returns d; call it before the set is used.
func (d *DeletedSet) WithLogger(l *zap.Logger) *DeletedSet {
	d.logger = l
	return d
}

// Wait blocks until a compaction running in the background ends.
func (d *DeletedSet) Wait() { d.wg.Wait() }

// Live implements Liveness: the valid pins the deletion log does not name, as of the call (as of
// the page's start for a page's check: see CatchUp).
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

// CatchUp applies the log's rows past those already applied: first the snapshot, when the set
// has not loaded it yet or the rows it needs were trimmed. Each row is applied once, in order.
//
// A page's checks (ctx carries when the page began: GetFeed) read nothing when a catch-up that
// began after the page began has completed, its own first check's or another page's: the set
// already names every deletion acknowledged before the page began. A page that finds such a
// catch-up running waits for it instead of reading the log too. So a page reads the log at most
// once, however many checks it makes (the reader, its items, its prepared chunks), concurrent
// pages share reads, and while no deletion arrives a page takes no exclusive lock: the set's
// position moves atomically and the map is written only when the log has new rows.
func (d *DeletedSet) CatchUp(ctx context.Context) error {
	since := time.Since(d.epoch).Nanoseconds()
	if at, isPage := pageStartOf(ctx); isPage {
		since = at.Sub(d.epoch).Nanoseconds()
		if d.loaded.Load() && d.asOf.Load() >= since {
			return nil
		}
	}
	for attempt := 0; ; attempt++ {
		d.flightMu.Lock()
		f := d.flight
		lead := f == nil || f.began < since
		if lead {
			f = &catchUpFlight{began: time.Since(d.epoch).Nanoseconds()}
			d.flight = f
		} else if f.done == nil {
			f.done = make(chan struct{}) // the first to wait for this read
		}
		d.flightMu.Unlock()
		if lead {
			err := d.catchUp(ctx)
			d.flightMu.Lock()
			if d.flight == f {
				d.flight = nil
			}
			f.err = err
			if f.done != nil {
				close(f.done)
			}
			d.flightMu.Unlock()
			return err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("deleted set: %w", ctx.Err())
		}
		if f.err == nil {
			return nil
		}
		if attempt > 0 {
			return f.err
		}
		// The read it waited for failed (its caller's context may have ended): read itself.
	}
}

// catchUp reads the log past the rows applied until it finds its end, applying what it reads.
func (d *DeletedSet) catchUp(ctx context.Context) error {
	if !d.loaded.Load() {
		if err := d.loadSnapshot(ctx); err != nil {
			return err
		}
	}
	for trimmed := 0; ; {
		d.mu.RLock()
		after := d.seen
		d.mu.RUnlock()
		readAt := time.Since(d.epoch).Nanoseconds()
		ids, err := d.log.DeletionsAfter(ctx, after, d.page)
		if errors.Is(err, zen.ErrDeletionsTrimmed) && trimmed < 3 {
			// Compacted past this set's position: the snapshot names the trimmed rows.
			trimmed++
			if err := d.loadSnapshot(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("deleted set: %w", err)
		}
		if len(ids) > 0 {
			d.mu.Lock()
			for i, id := range ids {
				if n := after + 1 + uint64(i); n == d.seen+1 {
					d.deleted[id] = struct{}{}
					d.seen = n
				}
			}
			d.mu.Unlock()
		}
		if len(ids) < d.page {
			// Nothing was past these rows when this read began (the log has no gaps), and
			// the rows before them were applied by then or by this call.
			d.advance(readAt)
			d.maybeCompact()
			return nil
		}
	}
}

// advance moves asOf forward to at.
func (d *DeletedSet) advance(at int64) {
	for {
		cur := d.asOf.Load()
		if cur >= at || d.asOf.CompareAndSwap(cur, at) {
			return
		}
	}
}

// loadSnapshot adds the snapshot's IDs to the set and moves its position to the snapshot's
// when that is ahead. The set only grows, so a snapshot older than the rows applied adds
// nothing wrong.
func (d *DeletedSet) loadSnapshot(ctx context.Context) error {
	pos, ids, err := d.log.DeletionSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("deleted set: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		d.deleted[id] = struct{}{}
	}
	d.seen, d.base = max(d.seen, pos), max(d.base, pos)
	d.loaded.Store(true)
	return nil
}

// maybeCompact starts a compaction of the log in the background when the rows past the latest
// snapshot this set knows of number compactAfter, none is running, and none failed in the last
// compactTimeout.
func (d *DeletedSet) maybeCompact() {
	d.mu.RLock()
	due := d.compactAfter > 0 && d.seen-d.base >= uint64(d.compactAfter)
	retryAt := d.retryAt
	d.mu.RUnlock()
	if !due || time.Now().Before(retryAt) || !d.compacting.TryLock() {
		return
	}
	d.wg.Go(func() {
		defer d.compacting.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), compactTimeout)
		defer cancel()
		start := time.Now()
		pos, err := d.log.CompactDeletions(ctx, d.compactAfter)
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			d.retryAt = time.Now().Add(compactTimeout)
			d.logger.Warn("deletion log compaction failed", zap.Error(err))
			return
		}
		d.base = max(d.base, pos)
		d.logger.Info("deletion log compacted", zap.Uint64("snapshot_position", pos), zap.Duration("took", time.Since(start)))
	})
}
