package zen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// Errors of Order. Each is wrapped with the IDs involved.
var (
	// ErrBadMove is wrapped for a malformed move: IDs of the wrong type, a pin placed next to
	// itself, before equal to after.
	ErrBadMove = errors.New("zen: bad move")
	// ErrNotOnBoard is wrapped when the moved pin, or before or after, is not on the board.
	ErrNotOnBoard = errors.New("zen: pin not on board")
	// ErrNotAdjacent is wrapped when before and after are not neighbours in the board's current
	// order (the moved pin left out), or an end is named but the other side is not at that end.
	ErrNotAdjacent = errors.New("zen: before and after are not neighbours")
)

// Defaults of OrderOptions.
var (
	// DefaultRespaceBelow is the gap under which a move asks for a respace: 2^20, about 20 more
	// moves to the same spot before the plain scheme runs out.
	DefaultRespaceBelow = seq.Seq{Lo: 1 << 20}
	// DefaultRespaceTo is the gap a respace restores around a tight spot: 2^64, 44 moves to the
	// same spot before the next respace is asked for.
	DefaultRespaceTo = seq.Seq{Hi: 1}
)

// DefaultMaxRespacePlan bounds the pins re-spaced under one board-row commit.
const DefaultMaxRespacePlan = 4096

// OrderOptions tunes Order. Zero values take the defaults.
type OrderOptions struct {
	// RespaceBelow: a gap between neighbours below this is tight; a move that leaves one
	// reports NeedsRespace, and RespaceBoard re-spaces every tight gap.
	RespaceBelow seq.Seq
	// RespaceTo: RespaceBoard widens each tight spot until its gaps are at least this.
	RespaceTo seq.Seq
	// MaxRespacePlan bounds the pins moved under one commit of RespaceBoard (it commits again
	// until no tight gap is left).
	MaxRespacePlan int
}

// Order keeps the user's order of the pins of a board: the board→pins edge list (EdgeBoardPins)
// ordered by (seq, pin). A pin never moved sits at its creation time (ms × 10^25); a move gives
// it the floor of the midpoint of its new neighbours' seqs.
//
// Rows. Besides the edge and point rows of the list (see Graph.AddEdge), each board has one
// order row in the "edges" table, key board(8) | EdgeBoardPins(2) | 0x02, value
// version(8) | intent. Every move and respace is committed by one compare-and-set of that row
// (the version serialises them across processes, HBase included) which also records its
// intent: for a move (pin, old seq, new seq), for a respace the list of such steps. The intent
// is then carried out; whoever next reads the order row (a move, a respace, List) first makes
// sure the intent recorded there is complete, so a crash after the commit is finished by the
// next caller, and a move never computes its neighbours from a half-applied state.
//
// One write per move. A move rewrites the position of exactly one pin and no row of any other
// pin: physically four row writes, always the same four: the order-row compare-and-set, the
// put of the pin's new edge row, the compare-and-set of its point row (old seq → new seq, the
// truth ListEdges checks), the delete of its old edge row. The new edge row goes first so a
// concurrent reader always finds the pin at its old or its new place.
//
// Respacing writes the same three rows per moved pin, in an order (pins moving down in
// ascending order, then pins moving up in descending order) under which every prefix of the
// plan is still in the visible order: a reader during a respace, or after a crash in one, sees
// the same order. Order is safe for concurrent use.
type Order struct {
	g       *Graph
	below   seq.Seq
	target  seq.Seq
	maxPlan int
}

// NewOrder returns the ordered-list operations over g.
func NewOrder(g *Graph, o OrderOptions) *Order {
	ord := &Order{g: g, below: o.RespaceBelow, target: o.RespaceTo, maxPlan: o.MaxRespacePlan}
	if ord.below == (seq.Seq{}) {
		ord.below = DefaultRespaceBelow
	}
	if ord.target == (seq.Seq{}) {
		ord.target = DefaultRespaceTo
	}
	if ord.target.Cmp(ord.below) < 0 {
		ord.target = ord.below
	}
	if ord.maxPlan <= 0 {
		ord.maxPlan = DefaultMaxRespacePlan
	}
	return ord
}

// MoveResult is the outcome of Reorder.
type MoveResult struct {
	// Seq is the pin's sequence after the move.
	Seq seq.Seq
	// Moved is false when the pin already sat between before and after (nothing written).
	Moved bool
	// NeedsRespace reports that the move left a gap below RespaceBelow next to the pin: the
	// caller should have RespaceBoard run in the background (a pinlater respace task).
	NeedsRespace bool
	// Respaced counts the pins a synchronous respace moved because the move found no room.
	Respaced int
}

// RespaceResult is the outcome of RespaceBoard.
type RespaceResult struct {
	// Moved counts the pins given a new seq; 0 when no gap was tight.
	Moved int
	// Windows counts the runs of pins re-spaced.
	Windows int
}

const (
	tagOrder byte = 0x02

	intentNone    byte = 0
	intentMove    byte = 1
	intentRespace byte = 2

	stepLen = 8 + 2*seq.Size
)

// step moves one pin from seq old to seq new.
type step struct {
	pin      ID
	old, new seq.Seq
}

// orderState is a decoded order row.
type orderState struct {
	version uint64
	kind    byte
	steps   []step
}

func orderKey(board ID) []byte { return edgeListPrefix(board, EdgeBoardPins, tagOrder) }

func (st orderState) encode() []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 13+len(st.steps)*stepLen), st.version)
	v = append(v, st.kind)
	if st.kind == intentRespace {
		v = binary.BigEndian.AppendUint32(v, uint32(len(st.steps)))
	}
	for _, s := range st.steps {
		v = appendID(v, s.pin)
		v = s.old.AppendKey(v)
		v = s.new.AppendKey(v)
	}
	return v
}

func decodeOrder(v []byte) (orderState, error) {
	if len(v) < 9 {
		return orderState{}, fmt.Errorf("order row: %d bytes", len(v))
	}
	st := orderState{version: binary.BigEndian.Uint64(v), kind: v[8]}
	rest := v[9:]
	n := 0
	switch st.kind {
	case intentNone:
	case intentMove:
		n = 1
	case intentRespace:
		if len(rest) < 4 {
			return orderState{}, fmt.Errorf("order row: truncated respace intent")
		}
		n, rest = int(binary.BigEndian.Uint32(rest)), rest[4:]
	default:
		return orderState{}, fmt.Errorf("order row: intent kind %d", st.kind)
	}
	if len(rest) != n*stepLen {
		return orderState{}, fmt.Errorf("order row: %d bytes of steps for %d steps", len(rest), n)
	}
	for i := range n {
		b := rest[i*stepLen:]
		st.steps = append(st.steps, step{pin: ID(binary.BigEndian.Uint64(b)), old: seq.FromKey(b[8:]), new: seq.FromKey(b[8+seq.Size:])})
	}
	return st, nil
}

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

// settle makes sure the intent of the order row is carried out. A move intent is checked with
// one read (its new edge row) and finished only when incomplete; a respace intent is run to the
// end and cleared. It reports whether it changed the order row (the caller reads it again).
func (o *Order) settle(ctx context.Context, board ID, raw []byte, st orderState) (bool, error) {
	switch st.kind {
	case intentMove:
		return false, o.settleMove(ctx, board, st.steps[0])
	case intentRespace:
		for _, s := range st.steps {
			if err := o.apply(ctx, board, s); err != nil {
				return false, err
			}
		}
		cleared := orderState{version: st.version + 1}.encode()
		if _, err := o.g.edges.CheckAndSet(ctx, orderKey(board), raw, cleared); err != nil {
			return false, fmt.Errorf("clear respace intent: %w", err)
		}
		return true, nil
	}
	return false, nil
}

// settleMove checks the last committed move with two reads and finishes it if a crash (or a
// caller still at work) left it incomplete.
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
		return o.apply(ctx, board, s)
	case s.new:
		_, err := o.g.edges.Get(ctx, edgeRowKey(board, EdgeBoardPins, s.new, s.pin))
		if errors.Is(err, ErrNotFound) {
			return o.finish(ctx, board, s, p.data)
		}
		if err != nil {
			return fmt.Errorf("check move of %d: %w", s.pin, err)
		}
	}
	return nil
}

// apply carries out one step, idempotently: (1) put the new edge row, (2) compare-and-set the
// point row from the old seq to the new, (3) delete the old edge row. A step whose pin was
// removed, or already moved on, changes nothing. After (2) the new row matches the point row,
// so no reader deletes it as stale; if one did so between (1) and (2), (3) puts it back.
func (o *Order) apply(ctx context.Context, board ID, s step) error {
	if s.old == s.new {
		return nil
	}
	pk := pointKey(board, EdgeBoardPins, s.pin)
	newRow := edgeRowKey(board, EdgeBoardPins, s.new, s.pin)
	putDone := false
	for range maxCASAttempts {
		cur, err := o.g.edges.Get(ctx, pk)
		if errors.Is(err, ErrNotFound) {
			return nil // removed meanwhile: nothing to move
		}
		if err != nil {
			return fmt.Errorf("move %d: %w", s.pin, err)
		}
		p, err := decodePoint(cur)
		if err != nil {
			return fmt.Errorf("move %d: %w", s.pin, err)
		}
		if p.state == pointRemoving {
			return nil
		}
		switch p.seq {
		case s.old:
			if !putDone {
				if err := o.g.edges.Apply(ctx, []Mutation{{Key: newRow, Value: nonEmpty(p.data)}}); err != nil {
					return fmt.Errorf("move %d: put edge row: %w", s.pin, err)
				}
				putDone = true
			}
			moved := point{state: p.state, nonce: p.nonce, seq: s.new, data: p.data}.encode()
			won, err := o.g.casPoint(ctx, pk, cur, moved)
			if err != nil {
				return fmt.Errorf("move %d: point row: %w", s.pin, err)
			}
			if !won {
				continue // an add finished or a remove started: look again
			}
			return o.finish(ctx, board, s, p.data)
		case s.new:
			return o.finish(ctx, board, s, p.data)
		default:
			return nil // moved on since: this step is history
		}
	}
	return fmt.Errorf("move %d: still conflicting after %d attempts", s.pin, maxCASAttempts)
}

// finish deletes the old edge row of a step whose point row holds the new seq, putting the new
// edge row back first if a reader deleted it as stale before the point row moved.
func (o *Order) finish(ctx context.Context, board ID, s step, data []byte) error {
	newRow := edgeRowKey(board, EdgeBoardPins, s.new, s.pin)
	muts := []Mutation{{Key: edgeRowKey(board, EdgeBoardPins, s.old, s.pin), Delete: true}}
	if _, err := o.g.edges.Get(ctx, newRow); errors.Is(err, ErrNotFound) {
		muts = append(muts, Mutation{Key: newRow, Value: nonEmpty(data)})
	} else if err != nil {
		return fmt.Errorf("move %d: %w", s.pin, err)
	}
	if err := o.g.edges.Apply(ctx, muts); err != nil {
		return fmt.Errorf("move %d: delete old edge row: %w", s.pin, err)
	}
	return nil
}

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
// The move writes one pin's position (see Order); when its neighbours have no room left it
// re-spaces the spot synchronously and retries, so it never fails for want of room. Concurrent
// moves on one board serialise on the board's order row and retry on conflict.
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
	for range maxCASAttempts {
		raw, st, err := o.readOrder(ctx, board)
		if err != nil {
			return res, err
		}
		if changed, err := o.settle(ctx, board, raw, st); err != nil {
			return res, err
		} else if changed {
			continue
		}
		pts, err := getAll(ctx, o.g.edges, [][]byte{pointKey(board, EdgeBoardPins, pin), pointKey(board, EdgeBoardPins, before), pointKey(board, EdgeBoardPins, after)})
		if err != nil {
			return res, err
		}
		var seqs [3]seq.Seq
		for i, name := range []string{"pin", "before", "after"} {
			id := []ID{pin, before, after}[i]
			if id == 0 {
				continue
			}
			p, ok, err := livePoint(pts[i])
			if err != nil {
				return res, err
			}
			if !ok {
				return res, fmt.Errorf("%s %d: %w", name, id, ErrNotOnBoard)
			}
			seqs[i] = p.seq
		}
		// The pins following before (or the first pins): the moved pin is skipped.
		cur := ""
		if before != 0 {
			cur = encodeCursor(cursor{From: board, Type: EdgeBoardPins, Seq: seqs[1], To: before})
		}
		next, _, err := o.g.ListEdges(ctx, board, EdgeBoardPins, cur, 3, false)
		if err != nil {
			return res, err
		}
		var succ ID
		for _, e := range next {
			if e.To != pin {
				succ = e.To
				break
			}
		}
		if succ != after {
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
			continue
		}
		if err != nil {
			return res, err
		}
		next1 := orderState{version: st.version + 1, kind: intentMove, steps: []step{{pin: pin, old: seqs[0], new: ns}}}
		won, err := o.g.edges.CheckAndSet(ctx, orderKey(board), raw, next1.encode())
		if err != nil {
			return res, fmt.Errorf("commit: %w", err)
		}
		if !won {
			continue // another move or respace committed first: look again
		}
		if err := o.apply(ctx, board, next1.steps[0]); err != nil {
			return res, err
		}
		res.Seq, res.Moved = ns, true
		res.NeedsRespace = (before != 0 && seq.Gap(seqs[1], ns).Cmp(o.below) < 0) ||
			(after != 0 && seq.Gap(ns, seqs[2]).Cmp(o.below) < 0)
		return res, nil
	}
	return res, fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
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

// RespaceBoard restores room in the board's order: every gap between neighbours below
// RespaceBelow (ties included) is widened by spreading the pins of a window around it evenly
// (seq.Spread) between the window's fixed outer neighbours, the window growing toward the wider
// side until its gaps reach RespaceTo. The visible order never changes, not even part-way; the
// plan is committed on the board's order row like a move, so concurrent moves wait for it (or
// finish it themselves). Running it again when nothing is tight writes nothing.
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
// enough for a move that found no room).
func (o *Order) respace(ctx context.Context, board ID, once bool) (RespaceResult, error) {
	var res RespaceResult
	for range maxCASAttempts {
		raw, st, err := o.readOrder(ctx, board)
		if err != nil {
			return res, err
		}
		if changed, err := o.settle(ctx, board, raw, st); err != nil {
			return res, err
		} else if changed {
			continue
		}
		list, err := o.all(ctx, board)
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
		committed := orderState{version: st.version + 1, kind: intentRespace, steps: steps}
		enc := committed.encode()
		won, err := o.g.edges.CheckAndSet(ctx, orderKey(board), raw, enc)
		if err != nil {
			return res, fmt.Errorf("commit: %w", err)
		}
		if !won {
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
	return res, fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
}

// all reads the whole list in order.
func (o *Order) all(ctx context.Context, board ID) ([]Edge, error) {
	var out []Edge
	cur := ""
	for {
		page, next, err := o.g.ListEdges(ctx, board, EdgeBoardPins, cur, MaxEdgePage, false)
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

// dedupEdges keeps the first of repeated pins (a pin read at its old and new place while a
// concurrent move landed between two reads of one page).
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
	type window struct{ l, r int }
	var ws []window
	size := 0
	for i := -1; i < n && size < o.maxPlan; i++ {
		if !tight(i) || (len(ws) > 0 && ws[len(ws)-1].r > i) {
			continue
		}
		w := window{l: max(i, 0), r: min(i+1, n-1)}
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
	var down, up []step
	for _, w := range ws {
		k := w.r - w.l + 1
		vals, err := seq.Spread(k, anchor(w.l-1), anchor(w.r+1))
		if err != nil {
			return nil, 0, fmt.Errorf("spread %d pins: %w", k, err)
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
	return append(down, up...), len(ws), nil
}

// enough reports whether k pins spread in a span leave gaps of at least target.
func enough(span seq.Seq, k int, target seq.Seq) bool {
	need := new(big.Int).Mul(target.Big(), big.NewInt(int64(k)+1))
	return span.Big().Cmp(need) >= 0
}

// List returns up to limit pins of the board in the user's order from cursor ("" = the start),
// and the next cursor ("" = end), after making sure the last committed move is complete.
func (o *Order) List(ctx context.Context, board ID, cur string, limit int) ([]Edge, string, error) {
	if err := board.Check(TypeBoard); err != nil {
		return nil, "", fmt.Errorf("list board: %w", err)
	}
	raw, st, err := o.readOrder(ctx, board)
	if err != nil {
		return nil, "", fmt.Errorf("list board %d: %w", board, err)
	}
	if st.kind == intentMove {
		if _, err := o.settle(ctx, board, raw, st); err != nil {
			return nil, "", fmt.Errorf("list board %d: %w", board, err)
		}
	}
	es, next, err := o.g.ListEdges(ctx, board, EdgeBoardPins, cur, limit, false)
	if err != nil {
		return nil, "", err
	}
	return dedupEdges(es), next, nil
}

// Gaps returns the smallest gap between neighbours of the board's order (seq.Max for fewer than
// two pins): a measure for tests and operators.
func (o *Order) Gaps(ctx context.Context, board ID) (seq.Seq, error) {
	list, err := o.all(ctx, board)
	if err != nil {
		return seq.Seq{}, fmt.Errorf("gaps of board %d: %w", board, err)
	}
	minGap := seq.Max
	for i := 0; i+1 < len(list); i++ {
		if g := seq.Gap(list[i].Seq, list[i+1].Seq); g.Cmp(minGap) < 0 {
			minGap = g
		}
	}
	return minGap, nil
}
