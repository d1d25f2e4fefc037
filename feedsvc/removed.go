package feedsvc

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Removals and prepared chunks (docs/reliability.md, "Removals and prepared chunks").
//
// The worker's removal upkeep (unfollow cleanup, pin delete, user delete) purges the pools, but
// a prepared chunk's pins left the pools when it was composed, possibly before the removal, and
// a preparation in flight may record its chunk after the purge. So a prepared chunk is checked
// against the graph as it stands whenever it is about to reach the reader: when a page serves
// it (fresh or as feed items) and when the recovery pass materializes it unvisited. A pin that
// a removal took from the user (the follow that brought it is gone, or the pin is deleted) is
// left out of the page and out of the row written back, so it is never materialized: it counts
// as removed by policy (smartfeed_feed_prepared_removed_total). The check reads the graph, not
// a record of the removal, so it needs nothing from the process that ran the removal and holds
// from the moment the graph changed (before the upkeep job even ran), for a chunk prepared by
// any process at any time.

// Eligibility tells which pins of a prepared chunk the user may no longer be shown because a
// removal took them: the follow that brought a pin is gone (an unfollow of the user, board or
// interest it came through), or the pin is deleted. cmd wires it to batched reads of the
// graph's follow edges and objects, or, in a process without the graph, to one
// GeneratorService.CheckPins call of the generator's process.
type Eligibility interface {
	// Removed returns the pins among items that user no longer follows the source of, and
	// those deleted; a pin absent from the map may be shown.
	Removed(ctx context.Context, user zen.ID, items []Item) (map[zen.ID]bool, error)
}

// removedOf returns the pins of items a removal took from user: those Eligibility names
// (deleted pins included), or, without an Eligibility, those Liveness finds deleted. One call,
// bounded by the live timeout.
func (s *Service) removedOf(ctx context.Context, user zen.ID, items []Item) (map[zen.ID]bool, error) {
	start := time.Now()
	defer func() { s.m.observeStage(stagePreparedCheck, time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, s.liveTimeout)
	defer cancel()
	if s.elig != nil {
		r, err := s.elig.Removed(ctx, user, items)
		if err != nil {
			return nil, fmt.Errorf("removals of %d: %w", user, err)
		}
		if r == nil {
			r = map[zen.ID]bool{}
		}
		return r, nil
	}
	pins := make([]zen.ID, len(items))
	for i, it := range items {
		pins[i] = it.Pin
	}
	live, err := s.live.Live(ctx, pins)
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	out := map[zen.ID]bool{}
	for _, p := range pins {
		if !live[p] {
			out[p] = true
		}
	}
	return out, nil
}

// filterRemoved checks the prepared chunks a read met against the removals (removedOf): their
// removed pins leave the page's entries and the prepared rows the page will write back as
// served (markServed), so they are neither shown nor materialized. When the check fails, the
// prepared chunks are held back from this page whole (fail closed: shown later, once the check
// answers, or materialized by the recovery pass, which checks them too): a removed pin must not
// be shown for want of the graph, and the page still has the rest of the feed.
func (s *Service) filterRemoved(ctx context.Context, user zen.ID, res pageRead) pageRead {
	if s.elig == nil && s.live == nil {
		return res
	}
	var items []Item
	for _, p := range res.prepared {
		items = append(items, p.pc.Items...)
	}
	for _, e := range res.entries {
		if e.prepared {
			items = append(items, e.Item)
		}
	}
	if len(items) == 0 {
		return res
	}
	removed, err := s.removedOf(ctx, user, items)
	if err != nil {
		s.m.preparedCheckErrors.Inc()
		s.log.Warn("removal check of prepared chunks; holding them back from this page", zap.Stringer("user", user), zap.Error(err))
		res.prepared = nil
		res.entries = dropEntries(res.entries, func(e *entry) bool { return e.prepared })
		return res
	}
	if len(removed) == 0 {
		return res
	}
	res.entries = dropEntries(res.entries, func(e *entry) bool { return e.prepared && removed[e.Pin] })
	prepared := make([]preparedRow, len(res.prepared))
	for i, p := range res.prepared {
		n := len(p.pc.Items)
		p.pc = withoutPins(p.pc, removed)
		if d := n - len(p.pc.Items); d > 0 {
			s.m.preparedRemoved.Add(float64(d))
			s.log.Debug("removed pins left out of a prepared chunk", zap.Stringer("user", user), zap.String("chunk", p.pc.ChunkID), zap.Int("pins", d))
		}
		prepared[i] = p
	}
	res.prepared = prepared
	return res
}

// dropEntries returns es without the entries drop names (a new slice: es may be shared).
func dropEntries(es []entry, drop func(*entry) bool) []entry {
	out := make([]entry, 0, len(es))
	for i := range es {
		if !drop(&es[i]) {
			out = append(out, es[i])
		}
	}
	return out
}

// withoutPins returns pc without the items of removed pins (new slices; positions kept, so the
// items left keep their places and order).
func withoutPins(pc pendingChunk, removed map[zen.ID]bool) pendingChunk {
	items := make([]Item, 0, len(pc.Items))
	pos := make([]uint32, 0, len(pc.Pos))
	for i, it := range pc.Items {
		if !removed[it.Pin] {
			items = append(items, it)
			pos = append(pos, pc.Pos[i])
		}
	}
	pc.Items, pc.Pos = items, pos
	return pc
}
