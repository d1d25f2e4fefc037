package zen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// Fold moves the board's overrides into its edge list (see Order) and returns how many it
// folded. The visible order does not change; moves running meanwhile are never lost. The respace
// task folds too (RespaceBoard), so a board rarely needs Fold alone.
func (o *Order) Fold(ctx context.Context, board ID) (int, error) {
	if err := board.Check(TypeBoard); err != nil {
		return 0, fmt.Errorf("fold: %w", err)
	}
	n, err := o.fold(ctx, board)
	if err != nil {
		return n, fmt.Errorf("fold board %d: %w", board, err)
	}
	return n, nil
}

// fold folds the overrides of one read of the order row: for each valid one, the index is moved
// to its seq (apply: new edge row, point row, old edge row); then the order row drops every
// override still equal to one folded or found void.
func (o *Order) fold(ctx context.Context, board ID) (int, error) {
	v, err := o.load(ctx, board, true)
	if err != nil {
		return 0, err
	}
	if len(v.st.ovr) == 0 {
		return 0, nil
	}
	pins := make([]ID, len(v.st.ovr))
	for i, x := range v.st.ovr {
		pins[i] = x.pin
	}
	if err := o.check(ctx, board, v, pins); err != nil {
		return 0, err
	}
	for _, x := range v.st.ovr {
		if _, ok := v.known[x.pin]; !ok {
			continue // void: dropped below
		}
		if err := o.foldStep(ctx, board, x); err != nil {
			return 0, err
		}
	}
	done := v.st.ovr
	raw, st := v.raw, v.st
	for range maxCASAttempts {
		keep := make([]override, 0, len(st.ovr))
		for _, x := range st.ovr {
			if _, found := slices.BinarySearchFunc(done, x, func(a, b override) int {
				if c := cmp.Compare(a.pin, b.pin); c != 0 {
					return c
				}
				if c := a.seq.Cmp(b.seq); c != 0 {
					return c
				}
				return cmp.Compare(a.nonce, b.nonce)
			}); !found {
				keep = append(keep, x) // moved again since the read: a newer override stays
			}
		}
		next := orderState{version: st.version + 1, kind: st.kind, steps: st.steps, ovr: keep}
		won, err := o.casOrder(ctx, board, raw, next.encode())
		if err != nil {
			return 0, err
		}
		if won {
			return len(done), nil
		}
		if raw, st, err = o.readOrder(ctx, board); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("drop folded overrides: still conflicting after %d attempts", maxCASAttempts)
}

// foldStep moves the index of a pin to its override's seq (moveIndex), while the override is
// still the pin's on the order row: a folder whose read of the order row is old must not move
// the index back under a newer move that another folder has already folded.
func (o *Order) foldStep(ctx context.Context, board ID, x override) error {
	return o.moveIndex(ctx, board, x.pin, nil, x.seq, func(ctx context.Context) (bool, error) {
		_, st, err := o.readOrder(ctx, board)
		if err != nil {
			return false, err
		}
		i, found := slices.BinarySearchFunc(st.ovr, x.pin, func(a override, p ID) int { return cmp.Compare(a.pin, p) })
		return found && st.ovr[i] == x, nil
	})
}

// stillRow returns a check that the board's order row still holds exactly raw.
func (o *Order) stillRow(board ID, raw []byte) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		now, err := o.g.edges.Get(ctx, orderKey(board))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("read order row: %w", err)
		}
		return bytes.Equal(now, raw), nil
	}
}

// moveIndex moves the index of a pin to seq to, idempotently: (1) compare-and-set the point
// row to the new seq, (2) put the new edge row, (3) delete the old one. With from set, only a
// pin whose point row holds from (or already to) is moved. still, when set, is asked after the
// point row is read and before its compare-and-set whether the move is still wanted (the
// override or the respace intent that asked for it is still on the order row); a point row
// that changes after that answer makes the compare-and-set fail, and the next round asks
// again. So no stale folder or respace settler ever moves a pin's index backwards.
//
// The point row goes first: an edge row is never ahead of its point row, so a reader that
// finds an edge row whose point row names another seq (it scans rows, then reads points) may
// delete it as stale without ever deleting a row about to become valid. Readers never see the
// pin missing meanwhile: an override or the respace intent shows it (see Order). A pin removed,
// or moved on since, is left alone.
func (o *Order) moveIndex(ctx context.Context, board ID, pin ID, from *seq.Seq, to seq.Seq, still func(context.Context) (bool, error)) error {
	pk := pointKey(board, EdgeBoardPins, pin)
	for range maxCASAttempts {
		cur, err := o.g.edges.Get(ctx, pk)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("move index of %d: %w", pin, err)
		}
		p, err := decodePoint(cur)
		if err != nil {
			return fmt.Errorf("move index of %d: %w", pin, err)
		}
		if p.state == pointRemoving {
			return nil
		}
		old := p.seq
		var oldRow []byte // the old edge row's value as this move found it
		if old != to {
			if from != nil && old != *from {
				return nil // moved on since
			}
			if oldRow, err = o.rowValue(ctx, board, old, pin); err != nil {
				return fmt.Errorf("move index of %d: %w", pin, err)
			}
			if still != nil {
				ok, err := still(ctx)
				if err != nil {
					return fmt.Errorf("move index of %d: %w", pin, err)
				}
				if !ok {
					return nil // superseded: whoever superseded it moves the index
				}
			}
			moved := point{state: p.state, nonce: p.nonce, seq: to, data: p.data}.encode()
			won, err := o.g.casPoint(ctx, pk, cur, moved)
			if err != nil {
				return fmt.Errorf("move index of %d: point row: %w", pin, err)
			}
			if !won {
				continue // an add finished, a remove started or another move landed: look again
			}
		} else if from != nil {
			old = *from // finishing a step already half done: its old row may be left
			if oldRow, err = o.rowValue(ctx, board, old, pin); err != nil {
				return fmt.Errorf("move index of %d: %w", pin, err)
			}
		}
		// The new row is written even when one is there: it may be a leftover of an earlier
		// visit of the pin to the same seq that a slower mover or reader is about to delete
		// (below, that delete only takes the value it read, so it misses the rewritten row).
		newRow := edgeRowKey(board, EdgeBoardPins, to, pin)
		if err := o.g.edges.Apply(ctx, []Mutation{{Key: newRow, Value: rowToken(p.data)}}); err != nil {
			return fmt.Errorf("move index of %d: put edge row: %w", pin, err)
		}
		if old != to && oldRow != nil {
			// Only the row this move found: if the pin came back to old since (a later move to
			// the same seq rewrote the row), the row is valid again and stays.
			if _, err := o.g.edges.CheckAndSet(ctx, edgeRowKey(board, EdgeBoardPins, old, pin), oldRow, nil); err != nil {
				return fmt.Errorf("move index of %d: delete old edge row: %w", pin, err)
			}
		}
		return nil
	}
	return fmt.Errorf("move index of %d: still conflicting after %d attempts", pin, maxCASAttempts)
}

// rowValue returns the value of the pin's edge row at s, nil when there is none.
func (o *Order) rowValue(ctx context.Context, board ID, s seq.Seq, pin ID) ([]byte, error) {
	v, err := o.g.edges.Get(ctx, edgeRowKey(board, EdgeBoardPins, s, pin))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read edge row: %w", err)
	}
	return v, nil
}

// rowToken is the value of an edge row written by a move: the pin's data and 8 random bytes, so
// that two visits of a pin to the same seq write different values and a compare-and-delete of
// the first visit's row leaves the second's alone. Readers take a pin's data from its point row,
// never from the edge row.
func rowToken(data []byte) []byte {
	v := make([]byte, 0, len(data)+8)
	v = append(v, data...)
	return binary.BigEndian.AppendUint64(v, rand.Uint64())
}
