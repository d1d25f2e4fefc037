package zen

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// settle makes sure the intent of the order row is carried out: a respace intent is run to the
// end and cleared (the overrides kept), a move intent of an earlier version is finished. It
// reports whether it changed the order row (the caller reads it again).
func (o *Order) settle(ctx context.Context, board ID, raw []byte, st orderState) (bool, error) {
	switch st.kind {
	case intentMove:
		return false, o.settleMove(ctx, board, st.steps[0])
	case intentRespace:
		still := o.stillRow(board, raw)
		for _, s := range st.steps {
			if err := o.apply(ctx, board, s, still); err != nil {
				return false, err
			}
		}
		cleared := orderState{version: st.version + 1, ovr: st.ovr}.encode()
		if _, err := o.casOrder(ctx, board, raw, cleared); err != nil {
			return false, fmt.Errorf("clear respace intent: %w", err)
		}
		return true, nil
	}
	return false, nil
}

// settleMove checks a move intent left by an earlier version with two reads and finishes it if
// a crash left it incomplete.
func (o *Order) settleMove(ctx context.Context, board ID, s step) error {
	v, err := o.g.edges.Get(ctx, pointKey(board, EdgeBoardPins, s.pin))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check move of %d: %w", s.pin, err)
	}
	p, ok, err := livePoint(v)
	if err != nil || !ok {
		return err
	}
	switch p.seq {
	case s.old:
		return o.apply(ctx, board, s, nil)
	case s.new:
		return o.ensureRow(ctx, board, s, p.data)
	}
	return nil
}

// ensureRow puts the edge row of a pin whose point row already holds s.new if it is missing
// (a reader deleted it as stale before the point row moved, or a crash), and deletes the old one.
func (o *Order) ensureRow(ctx context.Context, board ID, s step, data []byte) error {
	_, err := o.g.edges.Get(ctx, edgeRowKey(board, EdgeBoardPins, s.new, s.pin))
	if errors.Is(err, ErrNotFound) {
		return o.finish(ctx, board, s, data)
	}
	if err != nil {
		return fmt.Errorf("check move of %d: %w", s.pin, err)
	}
	return nil
}

// apply carries out one step of a respace, idempotently: it moves the pin's index as a fold does
// (moveIndex: point row first, then the new edge row, then the old one deleted). A step whose
// pin was removed, or already moved on, changes nothing. Point first matters: a reader finds an
// edge row and then reads its point row, and deletes the row as stale when the point names
// another seq; were the new row put before the point moved, a reader could delete it just
// after this step checked it, losing the pin from the index. Readers never see the pin
// missing meanwhile: those that loaded the order row with the intent skip its index rows and
// show it at its new seq, and those that loaded it before the intent find the order row
// changed when they check it after reading, and read again. still (see moveIndex) stops a
// settler that comes late, after the intent was finished and cleared.
func (o *Order) apply(ctx context.Context, board ID, s step, still func(context.Context) (bool, error)) error {
	if s.old == s.new {
		return nil
	}
	return o.moveIndex(ctx, board, s.pin, &s.old, s.new, still)
}

// finish deletes the old edge row of a step whose point row holds the new seq, putting the new
// edge row back first if a reader deleted it as stale before the point row moved.
func (o *Order) finish(ctx context.Context, board ID, s step, data []byte) error {
	newRow := edgeRowKey(board, EdgeBoardPins, s.new, s.pin)
	var muts []Mutation
	if s.old != s.new {
		muts = append(muts, Mutation{Key: edgeRowKey(board, EdgeBoardPins, s.old, s.pin), Delete: true})
	}
	if _, err := o.g.edges.Get(ctx, newRow); errors.Is(err, ErrNotFound) {
		muts = append(muts, Mutation{Key: newRow, Value: nonEmpty(data)})
	} else if err != nil {
		return fmt.Errorf("move %d: %w", s.pin, err)
	}
	if len(muts) == 0 {
		return nil
	}
	if err := o.g.edges.Apply(ctx, muts); err != nil {
		return fmt.Errorf("move %d: delete old edge row: %w", s.pin, err)
	}
	return nil
}

// RespaceBoard restores room in the board's order: it folds the overrides first, then widens
// every gap between neighbours below RespaceBelow (ties included) by spreading the pins of a
// window around it evenly (seq.Spread) between the window's fixed outer neighbours, the window
// growing toward the wider side until its gaps reach RespaceTo. The visible order never changes,
// not even part-way; the plan is committed on the board's order row, so concurrent moves wait
// for it (or finish it themselves). Running it again when nothing is tight and nothing is left
// to fold writes nothing.
func (o *Order) RespaceBoard(ctx context.Context, board ID) (RespaceResult, error) {
	if err := board.Check(TypeBoard); err != nil {
		return RespaceResult{}, fmt.Errorf("respace: %w", err)
	}
	res, err := o.respace(ctx, board, false)
	if err != nil {
		return res, fmt.Errorf("respace board %d: %w", board, err)
	}
	return res, nil
}

// respace runs plans until no tight gap is left (or, when once is set, after the first plan:
// enough for a move that found no room). A plan is committed only on an order row without
// overrides: it folds them first, and a move adding one meanwhile makes the commit fail.
func (o *Order) respace(ctx context.Context, board ID, once bool) (RespaceResult, error) {
	var res RespaceResult
	// Folding is progress, not a conflict: only lost commits and changed reads count against
	// the attempts (a board whose owner keeps moving pins would otherwise fold its way past
	// them), and the rounds are bounded all the same.
	lost := 0
	for round := 0; lost < maxCASAttempts && round < 16*maxCASAttempts; round++ {
		if err := contend(ctx, lost); err != nil {
			return res, err
		}
		v, err := o.load(ctx, board, true)
		if err != nil {
			return res, err
		}
		if len(v.st.ovr) > 0 {
			n, err := o.fold(ctx, board)
			if err != nil {
				return res, err
			}
			res.Folded += n
			continue
		}
		list, err := o.all(ctx, board, v)
		if errors.Is(err, errViewChanged) {
			lost++
			continue
		}
		if err != nil {
			return res, err
		}
		steps, windows, err := o.plan(list)
		if err != nil {
			return res, err
		}
		if len(steps) == 0 {
			return res, nil
		}
		committed := orderState{version: v.st.version + 1, kind: intentRespace, steps: steps}
		enc := committed.encode()
		won, err := o.casOrder(ctx, board, v.raw, enc)
		if err != nil {
			return res, err
		}
		if !won {
			lost++
			continue
		}
		if _, err := o.settle(ctx, board, enc, committed); err != nil {
			return res, err
		}
		res.Moved += len(steps)
		res.Windows += windows
		if once {
			return res, nil
		}
	}
	return res, fmt.Errorf("still conflicting after %d lost commits", lost)
}

// dedupEdges keeps the first of repeated pins (a pin read at its old and new place while a
// concurrent fold or respace landed between two reads of one page).
func dedupEdges(es []Edge) []Edge {
	seen := make(map[ID]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if !seen[e.To] {
			seen[e.To] = true
			out = append(out, e)
		}
	}
	return out
}

// plan computes the respace steps of a list in ascending (seq, pin) order, in the safe order:
// pins moving down in ascending order, then pins moving up in descending order.
func (o *Order) plan(list []Edge) ([]step, int, error) {
	n := len(list)
	if n == 0 {
		return nil, 0, nil
	}
	// The open ends: 0 below; above, now (or one millisecond past the last pin when that is not
	// below now), so pins added later still land after everything a respace touched.
	top := list[n-1].Seq.Add(seq.Unit)
	if top.Cmp(list[n-1].Seq) < 0 || top.Cmp(seq.Max) > 0 {
		top = seq.Max
	}
	if now := seq.FromMillis(o.g.now().UnixMilli()); now.Cmp(top) > 0 {
		top = now
	}
	anchor := func(i int) seq.Seq { // the seq bounding a window that ends at i (exclusive)
		switch {
		case i < 0:
			return seq.Seq{}
		case i >= n:
			return top
		}
		return list[i].Seq
	}
	// Gap i lies between anchor(i) and anchor(i+1); the open ends count (a pin squeezed against
	// 0 or seq.Max needs room too).
	tight := func(i int) bool { return seq.Gap(anchor(i), anchor(i+1)).Cmp(o.below) < 0 }
	var ws []respaceWindow
	size := 0
	for i := -1; i < n && size < o.maxPlan; i++ {
		if !tight(i) || (len(ws) > 0 && ws[len(ws)-1].r > i) {
			continue
		}
		w := respaceWindow{l: max(i, 0), r: min(i+1, n-1)}
		if len(ws) > 0 && ws[len(ws)-1].r >= w.l-1 {
			w.l = ws[len(ws)-1].l
			size -= ws[len(ws)-1].r - ws[len(ws)-1].l + 1
			ws = ws[:len(ws)-1]
		}
		for {
			k := w.r - w.l + 1
			span := seq.Gap(anchor(w.l-1), anchor(w.r+1))
			if enough(span, k, o.target) || k >= o.maxPlan-size || (w.l == 0 && w.r == n-1) {
				break
			}
			// Grow toward the side with the wider outer gap.
			left := w.l > 0
			if left && w.r < n-1 {
				left = seq.Gap(anchor(w.l-2), anchor(w.l-1)).Cmp(seq.Gap(anchor(w.r+1), anchor(w.r+2))) >= 0
			}
			if left {
				w.l--
			} else {
				w.r++
			}
			// Swallow a window it now touches.
			if len(ws) > 0 && ws[len(ws)-1].r >= w.l-1 {
				w.l = ws[len(ws)-1].l
				size -= ws[len(ws)-1].r - ws[len(ws)-1].l + 1
				ws = ws[:len(ws)-1]
			}
		}
		ws = append(ws, w)
		size += w.r - w.l + 1
	}
	steps, err := respaceSteps(list, ws, anchor)
	if err != nil {
		return nil, 0, err
	}
	return steps, len(ws), nil
}

// respaceWindow is a run list[l..r] of pins a respace spreads evenly between the seqs around it.
type respaceWindow struct{ l, r int }

// respaceSteps spreads the pins of each window evenly between anchor(l-1) and anchor(r+1), and
// returns the moves in the safe order: pins moving down in ascending order, then pins moving
// up in descending order.
func respaceSteps(list []Edge, ws []respaceWindow, anchor func(int) seq.Seq) ([]step, error) {
	var down, up []step
	for _, w := range ws {
		k := w.r - w.l + 1
		vals, err := seq.Spread(k, anchor(w.l-1), anchor(w.r+1))
		if err != nil {
			return nil, fmt.Errorf("spread %d pins: %w", k, err)
		}
		for j, v := range vals {
			e := list[w.l+j]
			switch e.Seq.Cmp(v) {
			case 1:
				down = append(down, step{pin: e.To, old: e.Seq, new: v})
			case -1:
				up = append(up, step{pin: e.To, old: e.Seq, new: v})
			}
		}
	}
	for i, j := 0, len(up)-1; i < j; i, j = i+1, j-1 {
		up[i], up[j] = up[j], up[i]
	}
	return append(down, up...), nil
}

// enough reports whether k pins spread in a span leave gaps of at least target.
func enough(span seq.Seq, k int, target seq.Seq) bool {
	need := new(big.Int).Mul(target.Big(), big.NewInt(int64(k)+1))
	return span.Big().Cmp(need) >= 0
}
