package zen

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// readOrder returns the raw order row (nil when absent) and its decoded state.
func (o *Order) readOrder(ctx context.Context, board ID) ([]byte, orderState, error) {
	raw, err := o.g.edges.Get(ctx, orderKey(board))
	if errors.Is(err, ErrNotFound) {
		return nil, orderState{}, nil
	}
	if err != nil {
		return nil, orderState{}, fmt.Errorf("read order row: %w", err)
	}
	st, err := decodeOrder(raw)
	if err != nil {
		return nil, orderState{}, err
	}
	return raw, st, nil
}

// casOrder compare-and-sets the order row; on an error it re-reads the row and reports success
// when the row holds exactly value (the version makes value unique to one commit).
func (o *Order) casOrder(ctx context.Context, board ID, expected, value []byte) (bool, error) {
	won, err := o.g.edges.CheckAndSet(ctx, orderKey(board), expected, value)
	if err == nil {
		return won, nil
	}
	if cur, gerr := o.g.edges.Get(ctx, orderKey(board)); gerr == nil && bytes.Equal(cur, value) {
		return true, nil
	}
	return false, fmt.Errorf("commit order row: %w", err)
}

// view is the order row at one read, with its overrides checked lazily: an override is only
// checked against its pin's point row (live, same nonce) when a read needs it.
type view struct {
	raw   []byte
	st    orderState
	ovrOf map[ID]override
	step  map[ID]bool  // pins of an unsettled respace intent, shown at their new seq
	cand  []Edge       // the overrides as edges, ascending by (seq, pin)
	known map[ID]point // checked and valid: the pin's point row
	void  map[ID]bool  // checked and void: the pin was removed (and maybe re-added) since
}

// load reads the order row. A pending intent is finished first (a respace intent only when
// settleRespace is set; List leaves it to the writers).
func (o *Order) load(ctx context.Context, board ID, settleRespace bool) (*view, error) {
	for range maxCASAttempts {
		raw, st, err := o.readOrder(ctx, board)
		if err != nil {
			return nil, err
		}
		if st.kind == intentMove || (st.kind == intentRespace && settleRespace) {
			changed, err := o.settle(ctx, board, raw, st)
			if err != nil {
				return nil, err
			}
			if changed {
				continue
			}
		}
		v := &view{raw: raw, st: st, ovrOf: make(map[ID]override, len(st.ovr)), known: map[ID]point{}, void: map[ID]bool{}}
		for _, x := range st.ovr {
			v.ovrOf[x.pin] = x
			v.cand = append(v.cand, Edge{From: board, Type: EdgeBoardPins, To: x.pin, Seq: x.seq})
		}
		if st.kind == intentRespace {
			// A reader that leaves the respace to the writers shows each pin of the plan at
			// its new seq and skips its index rows, which the plan is moving: the plan keeps the
			// visible order, so the view is the order before, during and after it.
			v.step = make(map[ID]bool, len(st.steps))
			for _, x := range st.steps {
				if _, ok := v.ovrOf[x.pin]; ok {
					continue
				}
				v.step[x.pin] = true
				v.ovrOf[x.pin] = override{pin: x.pin, seq: x.new}
				v.cand = append(v.cand, Edge{From: board, Type: EdgeBoardPins, To: x.pin, Seq: x.new})
			}
		}
		slices.SortFunc(v.cand, cmpEdge)
		return v, nil
	}
	return nil, fmt.Errorf("order row: still conflicting after %d attempts", maxCASAttempts)
}

// check reads the point rows of the override pins given (those not checked yet) and records
// whether each override is valid.
func (o *Order) check(ctx context.Context, board ID, v *view, pins []ID) error {
	var todo []ID
	for _, p := range pins {
		if _, ok := v.known[p]; !ok && !v.void[p] && !slices.Contains(todo, p) {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	keys := make([][]byte, len(todo))
	for i, p := range todo {
		keys[i] = pointKey(board, EdgeBoardPins, p)
	}
	pts, err := GetMany(ctx, o.g.edges, keys)
	if err != nil {
		return fmt.Errorf("check overrides: %w", err)
	}
	for i, pin := range todo {
		v.note(pin, pts[i])
	}
	return nil
}

// note records the point row (nil: absent) of an override pin: the override is valid while the
// row is live with the nonce the override was written against.
func (v *view) note(pin ID, raw []byte) {
	x, ok := v.ovrOf[pin]
	if !ok {
		return
	}
	p, live, err := livePoint(raw)
	if err != nil || !live || (!v.step[pin] && p.nonce != x.nonce) {
		v.void[pin] = true
		delete(v.known, pin)
		return
	}
	delete(v.void, pin)
	v.known[pin] = p
}

// maybe reports whether pin has an override not known to be void.
func (v *view) maybe(pin ID) bool {
	_, ok := v.ovrOf[pin]
	return ok && !v.void[pin]
}

// cmpEdge orders edges by (seq, pin).
func cmpEdge(a, b Edge) int {
	if c := a.Seq.Cmp(b.Seq); c != 0 {
		return c
	}
	return cmp.Compare(a.To, b.To)
}

// merge returns up to limit+1 pins of the visible order from index rows (ascending, all after
// pos) and the overrides after pos, up to the last row unless exhausted; need lists the override
// pins not checked yet that the result depends on (emitted, or whose index row was skipped).
func (v *view) merge(rows []Edge, pos *Edge, exhausted bool, limit int) (out []Edge, need []ID) {
	cand := v.cand
	if pos != nil {
		i, found := slices.BinarySearchFunc(cand, *pos, cmpEdge)
		if found {
			i++
		}
		cand = cand[i:]
	}
	for len(out) <= limit {
		for len(rows) > 0 && v.maybe(rows[0].To) {
			if _, ok := v.known[rows[0].To]; !ok {
				need = append(need, rows[0].To)
			}
			rows = rows[1:]
		}
		for len(cand) > 0 && v.void[cand[0].To] {
			cand = cand[1:]
		}
		useCand := len(cand) > 0 && (len(rows) == 0 && exhausted || len(rows) > 0 && cmpEdge(cand[0], rows[0]) < 0)
		switch {
		case useCand:
			e := cand[0]
			cand = cand[1:]
			if p, ok := v.known[e.To]; ok {
				e.Data = p.data
			} else {
				need = append(need, e.To)
			}
			out = append(out, e)
		case len(rows) > 0:
			out, rows = append(out, rows[0]), rows[1:]
		default:
			return out, need
		}
	}
	return out, need
}

// list returns up to limit pins of the visible order after cur (a cursor of the board's list,
// "" = the start) and the next cursor. It pages through the index with ListEdges, skipping the
// rows of pins with a valid override, and merges in the overrides.
func (o *Order) list(ctx context.Context, board ID, v *view, cur string, limit int) ([]Edge, string, error) {
	if limit < 1 || limit > MaxEdgePage {
		return nil, "", fmt.Errorf("list board %d: limit %d out of range [1, %d]", board, limit, MaxEdgePage)
	}
	var pos *Edge
	if cur != "" {
		c, err := decodeCursor(cur)
		if err != nil {
			return nil, "", fmt.Errorf("list board %d: %w", board, err)
		}
		if c.From != board || c.Type != EdgeBoardPins || c.NewestFirst {
			return nil, "", fmt.Errorf("list board %d: %w: cursor is for another list or direction", board, ErrBadCursor)
		}
		pos = &Edge{Seq: c.Seq, To: c.To}
		if at, ok, err := o.visibleSeq(ctx, board, v, c.To); err != nil {
			return nil, "", fmt.Errorf("list board %d: %w", board, err)
		} else if ok && at != c.Seq {
			// The last pin shown has another seq now (a respace spread its window, or it was
			// moved): the next page starts after it, wherever it is.
			pos.Seq = at
			cur = encodeCursor(cursor{From: board, Type: EdgeBoardPins, Seq: at, To: c.To})
		}
	}
	var rows []Edge
	exhausted := false
	page := min(limit+1+min(len(v.cand), limit+1, 16), MaxEdgePage) // room for skipped rows; else one more page
	for {
		out, need := v.merge(rows, pos, exhausted, limit)
		if len(out) > limit || exhausted {
			if len(need) > 0 {
				if err := o.check(ctx, board, v, need); err != nil {
					return nil, "", fmt.Errorf("list board %d: %w", board, err)
				}
				continue
			}
			// The rows and points were read one after another: a respace or fold that began
			// meanwhile may have moved a pin between the reads (the pin read at neither place).
			// Every such change commits on the order row first, so an unchanged order row
			// proves the page is the order at one moment.
			now, err := o.g.edges.Get(ctx, orderKey(board))
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, "", fmt.Errorf("list board %d: read order row: %w", board, err)
			}
			if !bytes.Equal(now, v.raw) {
				return nil, "", errViewChanged
			}
			out = dedupEdges(out)
			if len(out) <= limit {
				return out, "", nil
			}
			out = out[:limit]
			l := out[limit-1]
			return out, encodeCursor(cursor{From: board, Type: EdgeBoardPins, Seq: l.Seq, To: l.To}), nil
		}
		es, next, err := o.g.ListEdges(ctx, board, EdgeBoardPins, cur, page, false)
		if err != nil {
			return nil, "", err
		}
		rows = append(rows, es...)
		if next == "" {
			exhausted = true
		}
		cur = next
	}
}

// errViewChanged is returned by list when the order row changed while it read: the caller loads
// the view again.
var errViewChanged = errors.New("zen: order row changed during the read")

// visibleSeq returns the seq pin is shown at in v: its valid override's, else its point row's;
// ok is false when the pin is not on the board.
func (o *Order) visibleSeq(ctx context.Context, board ID, v *view, pin ID) (seq.Seq, bool, error) {
	raw, err := o.g.edges.Get(ctx, pointKey(board, EdgeBoardPins, pin))
	if errors.Is(err, ErrNotFound) {
		return seq.Seq{}, false, nil
	}
	if err != nil {
		return seq.Seq{}, false, fmt.Errorf("read point of %d: %w", pin, err)
	}
	p, live, err := livePoint(raw)
	if err != nil || !live {
		return seq.Seq{}, false, err
	}
	v.note(pin, raw)
	if _, ok := v.known[pin]; ok {
		return v.ovrOf[pin].seq, true, nil
	}
	return p.seq, true, nil
}

// all reads the whole visible list in order.
func (o *Order) all(ctx context.Context, board ID, v *view) ([]Edge, error) {
	var out []Edge
	cur := ""
	for {
		page, next, err := o.list(ctx, board, v, cur, MaxEdgePage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return dedupEdges(out), nil
		}
		cur = next
	}
}
