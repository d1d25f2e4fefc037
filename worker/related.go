package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen"
)

// Related pins: a recommender's pin for one user, and the pins that share boards with a saved
// pin, into the saver's related pool.

// insertRecommended puts a recommender's related pin into user's related pool.
func (w *Worker) insertRecommended(ctx context.Context, user, pin, author, board zen.ID, createdMs int64) error {
	pi := &pinInfo{pin: pin, author: author, board: board, createdMs: createdMs}
	if err := w.loadPinInfo(ctx, pi); err != nil {
		return fmt.Errorf("recommended %d for %d: %w", pin, user, err)
	}
	rs, err := w.receivers(ctx, []zen.ID{user}, pi, 0, w.feats)
	if err != nil {
		return fmt.Errorf("recommended %d for %d: %w", pin, user, err)
	}
	if rs[0].skip == "deleted" {
		return nil
	}
	return w.insert(ctx, []zen.PoolEntry{w.entry(rs[0], pi, zen.SourceRelated, 0, 0, "recommended")})
}

// relatedForSaver puts into saver's related pool the pins that share boards with pin (board
// co-occurrence): the newest RelatedPerBoard pins of each of pin's other boards (up to
// RelatedBoards), ranked by the number of boards shared, at most RelatedMax of them, leaving out
// pins already on the saver's board and deleted pins.
func (w *Worker) relatedForSaver(ctx context.Context, saver, pin, board zen.ID, createdMs int64) error {
	boards, _, err := w.g.ListEdges(ctx, pin, zen.EdgePinBoards, "", w.cfg.RelatedBoards, true)
	if err != nil {
		return fmt.Errorf("related %d: boards: %w", pin, err)
	}
	co := map[zen.ID]int{}
	seenOn := map[zen.ID]zen.ID{}
	var order []zen.ID
	for _, b := range boards {
		if b.To == board {
			continue
		}
		ps, _, err := w.g.ListEdges(ctx, b.To, zen.EdgeBoardPins, "", w.cfg.RelatedPerBoard, true)
		if err != nil {
			return fmt.Errorf("related %d: board %d: %w", pin, b.To, err)
		}
		for _, e := range ps {
			if e.To == pin {
				continue
			}
			if co[e.To] == 0 {
				order = append(order, e.To)
				seenOn[e.To] = b.To
			}
			co[e.To]++
		}
	}
	if len(order) == 0 {
		return nil
	}
	// Most shared boards first; ties keep discovery order (newest board first, newest pin first).
	slices.SortStableFunc(order, func(a, b zen.ID) int { return co[b] - co[a] })
	objs, err := w.g.GetMany(ctx, order)
	if err != nil {
		return fmt.Errorf("related %d: pins: %w", pin, err)
	}
	// One read of the saver for all the candidates: the whole profile.
	rs, err := w.readReceivers(ctx, []zen.ID{saver}, &pinInfo{}, 0, w.feats, nil)
	if err != nil {
		return fmt.Errorf("related %d: %w", pin, err)
	}
	if rs[0].skip == "deleted" {
		return nil
	}
	var es []zen.PoolEntry
	for _, c := range order {
		if len(es) >= w.cfg.RelatedMax {
			break
		}
		o, ok := objs[c]
		if !ok {
			continue // deleted
		}
		if _, err := w.g.HasEdge(ctx, c, zen.EdgePinBoards, board); err == nil {
			continue // already on the saver's board
		} else if !errors.Is(err, zen.ErrNotFound) {
			return fmt.Errorf("related %d: %w", pin, err)
		}
		pi := pinFromObject(o, seenOn[c])
		if err := w.loadPinInfo(ctx, &pi); err != nil {
			return fmt.Errorf("related %d: %w", pin, err)
		}
		r := rs[0]
		if pi.author != 0 {
			if r.affinity, err = w.Affinity(ctx, saver, pi.author); err != nil {
				return err
			}
		}
		es = append(es, w.entry(r, &pi, zen.SourceRelated, createdMs-pi.createdMs, float64(co[c]), "related to a saved pin"))
	}
	return w.insert(ctx, es)
}
