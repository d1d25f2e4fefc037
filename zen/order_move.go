package zen

import (
	"context"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// checkMove validates the IDs of a move.
func checkMove(board, pin, before, after ID) error {
	if err := board.Check(TypeBoard); err != nil {
		return fmt.Errorf("%w: board: %w", ErrBadMove, err)
	}
	if err := pin.Check(TypePin); err != nil {
		return fmt.Errorf("%w: pin: %w", ErrBadMove, err)
	}
	for _, x := range []struct {
		name string
		id   ID
	}{{"before", before}, {"after", after}} {
		if x.id == 0 {
			continue
		}
		if err := x.id.Check(TypePin); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadMove, x.name, err)
		}
		if x.id == pin {
			return fmt.Errorf("%w: %s is the moved pin %d itself", ErrBadMove, x.name, pin)
		}
	}
	if before != 0 && before == after {
		return fmt.Errorf("%w: before and after are both %d", ErrBadMove, before)
	}
	return nil
}

// Reorder moves pin on board so that it sits right after before and right before after, in the
// board's ascending (seq, pin) order. before 0 puts the pin first (after must then be the first
// pin other than pin), after 0 puts it last (before must then be the last); both 0 is only valid
// on a board holding pin alone. before and after must be neighbours once pin is left out, else
// the error wraps ErrNotAdjacent; a pin not on the board wraps ErrNotOnBoard.
//
// The move writes one row, the board's order row (see Order); when its neighbours have no room
// left it re-spaces the spot synchronously and retries, so it never fails for want of room.
// Concurrent moves on one board serialise on the order row and retry on conflict.
func (o *Order) Reorder(ctx context.Context, board, pin, before, after ID) (MoveResult, error) {
	if err := checkMove(board, pin, before, after); err != nil {
		return MoveResult{}, fmt.Errorf("reorder: %w", err)
	}
	res, err := o.reorder(ctx, board, pin, before, after)
	if err != nil {
		return res, fmt.Errorf("reorder %d on board %d (before %d, after %d): %w", pin, board, before, after, err)
	}
	return res, nil
}

func (o *Order) reorder(ctx context.Context, board, pin, before, after ID) (MoveResult, error) {
	var res MoveResult
	for attempt := range maxCASAttempts {
		if err := contend(ctx, attempt); err != nil {
			return res, err
		}
		v, err := o.load(ctx, board, true)
		if err != nil {
			return res, err
		}
		pts, err := GetMany(ctx, o.g.edges, [][]byte{pointKey(board, EdgeBoardPins, pin), pointKey(board, EdgeBoardPins, before), pointKey(board, EdgeBoardPins, after)})
		if err != nil {
			return res, err
		}
		seqs, pinPoint, err := v.moveSeqs(pts, [3]ID{pin, before, after})
		if err != nil {
			return res, err
		}
		// The pins following before (or the first pins): the moved pin is skipped.
		cur := ""
		if before != 0 {
			cur = encodeCursor(cursor{From: board, Type: EdgeBoardPins, Seq: seqs[1], To: before})
		}
		next, _, err := o.list(ctx, board, v, cur, 3)
		if errors.Is(err, errViewChanged) {
			continue // a respace, fold or move committed since the load: look again
		}
		if err != nil {
			return res, err
		}
		if succ := firstOther(next, pin); succ != after {
			return res, notAdjacent(before, after, succ)
		}
		if len(next) > 0 && next[0].To == pin {
			// Already in place: nothing to write.
			res.Seq = seqs[0]
			return res, nil
		}
		ns, err := o.place(before, after, seqs[1], seqs[2])
		if errors.Is(err, seq.ErrNoGap) || errors.Is(err, seq.ErrOrder) {
			rr, err := o.respace(ctx, board, true)
			if err != nil {
				return res, fmt.Errorf("make room: %w", err)
			}
			res.Respaced += rr.Moved
			res.Folded += rr.Folded
			continue
		}
		if err != nil {
			return res, err
		}
		// The new row: the overrides (those found void are dropped for free) and the pin's.
		ovr := v.overridesWith(override{pin: pin, seq: ns, nonce: pinPoint.nonce})
		if len(ovr) > o.maxOvr {
			n, err := o.fold(ctx, board)
			if err != nil {
				return res, fmt.Errorf("make room on the order row: %w", err)
			}
			res.Folded += n
			continue
		}
		commit := orderState{version: v.st.version + 1, kind: intentNone, ovr: ovr}
		won, err := o.casOrder(ctx, board, v.raw, commit.encode())
		if err != nil {
			return res, err
		}
		if !won {
			continue // another move, fold or respace committed first: look again
		}
		res.Seq, res.Moved, res.Version = ns, true, commit.version
		res.NeedsRespace = (before != 0 && seq.Gap(seqs[1], ns).Cmp(o.below) < 0) ||
			(after != 0 && seq.Gap(ns, seqs[2]).Cmp(o.below) < 0)
		res.NeedsFold = len(ovr) > o.foldAbove
		return res, nil
	}
	return res, fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
}

// moveSeqs reads a move's pin, before and after (ids, 0 for none) from their point rows pts,
// as v sees them: each one's seq (its override's when v has one), and the moved pin's point.
func (v *view) moveSeqs(pts [][]byte, ids [3]ID) (seqs [3]seq.Seq, pinPoint point, err error) {
	for i, name := range []string{"pin", "before", "after"} {
		id := ids[i]
		if id == 0 {
			continue
		}
		p, ok, err := livePoint(pts[i])
		if err != nil {
			return seqs, pinPoint, err
		}
		if !ok {
			return seqs, pinPoint, fmt.Errorf("%s %d: %w", name, id, ErrNotOnBoard)
		}
		seqs[i] = p.seq
		v.note(id, pts[i])
		if _, ok := v.known[id]; ok {
			seqs[i] = v.ovrOf[id].seq
		}
		if i == 0 {
			pinPoint = p
		}
	}
	return seqs, pinPoint, nil
}

// livePoint decodes a point row read by getAll; ok is false when it is absent or being removed.
func livePoint(v []byte) (point, bool, error) {
	if v == nil {
		return point{}, false, nil
	}
	p, err := decodePoint(v)
	if err != nil {
		return point{}, false, err
	}
	return p, p.state != pointRemoving, nil
}

func notAdjacent(before, after, succ ID) error {
	switch {
	case before == 0 && succ == 0:
		return fmt.Errorf("%w: the board holds no other pin, yet after is %d", ErrNotAdjacent, after)
	case before == 0:
		return fmt.Errorf("%w: the first pin is %d, not %d", ErrNotAdjacent, succ, after)
	case succ == 0:
		return fmt.Errorf("%w: %d is the last pin, not followed by %d", ErrNotAdjacent, before, after)
	case after == 0:
		return fmt.Errorf("%w: %d is not the last pin (%d follows it)", ErrNotAdjacent, before, succ)
	}
	return fmt.Errorf("%w: %d is followed by %d, not %d", ErrNotAdjacent, before, succ, after)
}

// place returns the new seq between the neighbours' seqs (bs of before, as of after; a zero ID
// is an open end): the floor of the midpoint, one creation millisecond beyond an end (never
// above seq.Max, never below 0). It returns seq.ErrNoGap or seq.ErrOrder when there is no room.
func (o *Order) place(before, after ID, bs, as seq.Seq) (seq.Seq, error) {
	switch {
	case before != 0 && after != 0:
		return seq.Between(bs, as)
	case before != 0: // last: below the current millisecond when there is room, so a pin added
		// now or later still lands after it; else into the next millisecond.
		now := seq.FromMillis(o.g.now().UnixMilli())
		if s, err := seq.Between(bs, now); err == nil {
			return s, nil
		}
		hi := bs
		if now.Cmp(hi) > 0 {
			hi = now
		}
		if t := hi.Add(seq.Unit); t.Cmp(hi) > 0 && t.Cmp(seq.Max) <= 0 {
			hi = t
		} else {
			hi = seq.Max
		}
		return seq.Between(bs, hi)
	case after != 0: // first
		if as.Cmp(seq.Unit) > 0 {
			return as.Sub(seq.Unit), nil
		}
		if as == (seq.Seq{}) {
			return seq.Seq{}, seq.ErrNoGap
		}
		return seq.Between(seq.Seq{}, as)
	}
	return seq.Seq{}, fmt.Errorf("%w: no neighbour given", ErrBadMove)
}

// firstOther is the first edge of next that is not pin's, 0 when there is none.
func firstOther(next []Edge, pin ID) ID {
	for _, e := range next {
		if e.To != pin {
			return e.To
		}
	}
	return 0
}

// overridesWith is v's order row's overrides without those found void, and x.
func (v *view) overridesWith(x override) []override {
	ovr := make([]override, 0, len(v.st.ovr)+1)
	for _, o := range v.st.ovr {
		if !v.void[o.pin] {
			ovr = append(ovr, o)
		}
	}
	return withOverride(ovr, x)
}
