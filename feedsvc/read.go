package feedsvc

import (
	"bytes"
	"context"
	"fmt"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// Reading the materialized feed: one hedged read of a page from the top or after a cursor,
// pending chunks merged in their place.

// entry is one item read from the feed with its position.
type entry struct {
	Item
	at position
	// prepared marks an item of a prepared chunk not served yet: checked against the
	// removals before it is shown (filterRemoved).
	prepared bool
}

// pageRead is what one materialized read returns.
type pageRead struct {
	entries []entry
	more    bool
	stale   []MaterializeTask
	// consumed is the position of the last item read, deleted ones included (set by
	// filterLive).
	consumed *position
	// pendingPins are the pins of every pending chunk the read met, whole, those past the
	// page included. pastPending is set when the read went past them: it met a materialized
	// item or the end of the feed.
	pendingPins []zen.ID
	pastPending bool
	// prepared are the unserved prepared chunks the read met (see Config.PrepareAfter), newest
	// first, each with its row as read (the served mark's expected value).
	prepared []preparedRow
	// version is the feed's head version row as a read from the top met it, and served the
	// served chunks it met not yet materialized, stale or not (headcache.go).
	version []byte
	served  []servedChunk
}

// preparedRow is an unserved prepared chunk met by a read.
type preparedRow struct {
	seq uint64
	row []byte
	pc  pendingChunk
}

// read reads up to size live entries after `after` (nil: from the top), hedged across the
// stores, the prepared chunks it met checked against the removals (filterRemoved).
func (s *Service) read(ctx context.Context, user zen.ID, after *position, size int) (pageRead, hedge.Outcome, error) {
	res, out, err := s.readRaw(ctx, user, after, size)
	if err != nil {
		return res, out, err
	}
	res, err = s.filterLive(ctx, user, res, size)
	if err != nil {
		return res, out, err
	}
	return s.filterRemoved(ctx, user, res), out, nil
}

// readRaw reads up to size entries after `after` (nil: from the top), hedged across the stores.
func (s *Service) readRaw(ctx context.Context, user zen.ID, after *position, size int) (pageRead, hedge.Outcome, error) {
	cut := s.now().Add(-s.Config().StalePending).UnixMilli()
	readFrom := func(t zen.Table) hedge.ReadFunc[pageRead] {
		return func(ctx context.Context) (pageRead, error) { return readPage(ctx, t, user, after, size, cut) }
	}
	fromPrimary := readFrom(s.primary)
	if after == nil && s.head.enabled() {
		fromPrimary = s.headReadFrom(s.primary, user, size, cut)
	}
	res, out, err := hedge.Traced(ctx, s.hedger, fromPrimary, readFrom(s.standby))
	if err != nil {
		return pageRead{}, out, fmt.Errorf("%w: read feed of %d: %w", ErrUnavailable, user, err)
	}
	return res, out, nil
}

// notePending records a pending chunk a read met (before its items, which the read merges):
// its pins, and whether it is prepared (fromTop: a first page's read), served or stale.
func (res *pageRead) notePending(user zen.ID, seq uint64, row []byte, pc pendingChunk, fromTop bool, cutMs int64) {
	for _, it := range pc.Items {
		res.pendingPins = append(res.pendingPins, it.Pin)
	}
	task := MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: seq}
	switch {
	case pc.Prepared && fromTop:
		res.prepared = append(res.prepared, preparedRow{seq: seq, row: bytes.Clone(row), pc: pc})
	case !pc.Prepared && fromTop:
		res.served = append(res.served, servedChunk{task, pc.ServedMs})
	}
	// A prepared chunk waits for its user's next visit, not for a materialization.
	if pc.ServedMs < cutMs && !pc.Prepared {
		res.stale = append(res.stale, task)
	}
}

// readPage scans t for up to size entries of user's feed after `after`, pending chunks merged
// in their place and each pin once. Pending chunks served before cutMs are reported as stale.
func readPage(ctx context.Context, t zen.Table, user zen.ID, after *position, size int, cutMs int64) (pageRead, error) {
	var res pageRead
	startKey, stop := FeedRange(user)
	if after != nil {
		startKey = pendingKey(user, after.Seq)
	}
	isAfter := func(p position) bool {
		return after == nil || p.Seq < after.Seq || (p.Seq == after.Seq && p.Pos > after.Pos)
	}
	pendingSeqs := map[uint64]bool{}
	seen := make(map[zen.ID]bool, size)
	res.entries = make([]entry, 0, size)
	batch := PageScanRows(size)
	for {
		rows, err := t.Scan(ctx, zen.ScanOptions{Start: startKey, Stop: stop, Limit: batch})
		if err != nil {
			return pageRead{}, fmt.Errorf("scan feed of %d: %w", user, err)
		}
		for _, kv := range rows {
			if len(res.entries) >= size {
				res.more = true
				return res, nil
			}
			pos, pending, err := feedKey(kv.Key)
			if err != nil {
				if isHeadVersionKey(kv.Key) {
					res.version = kv.Value
				}
				continue // not an item; never fail a page on one bad row
			}
			if pending {
				pc, err := decodePending(kv.Value)
				if err != nil {
					continue
				}
				pendingSeqs[pos.Seq] = true
				res.notePending(user, pos.Seq, kv.Value, pc, after == nil, cutMs)
				for j, it := range pc.Items {
					at := position{Seq: pos.Seq, Pos: pc.Pos[j]}
					if !isAfter(at) || seen[it.Pin] {
						continue
					}
					if len(res.entries) >= size {
						res.more = true
						return res, nil
					}
					seen[it.Pin] = true
					res.entries = append(res.entries, entry{Item: it, at: at, prepared: pc.Prepared})
				}
				continue
			}
			res.pastPending = true
			if pendingSeqs[pos.Seq] || !isAfter(pos) {
				continue
			}
			it, err := decodeItem(kv.Value)
			if err != nil || seen[it.Pin] {
				continue
			}
			seen[it.Pin] = true
			res.entries = append(res.entries, entry{Item: it, at: pos})
		}
		if len(rows) < batch {
			res.pastPending = true
			return res, nil
		}
		startKey = append(bytes.Clone(rows[len(rows)-1].Key), 0)
	}
}
