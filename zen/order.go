package zen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"time"

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

// Defaults of OrderOptions.
const (
	// DefaultMaxRespacePlan bounds the pins re-spaced under one board-row commit.
	DefaultMaxRespacePlan = 4096
	// DefaultFoldAbove is the number of moved pins held on the order row above which a move
	// asks for a fold (MoveResult.NeedsFold; the respace task folds).
	DefaultFoldAbove = 64
	// DefaultMaxOverrides bounds the moved pins held on the order row (32 bytes each): a move
	// that would go beyond folds synchronously first.
	DefaultMaxOverrides = 256
)

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
	// FoldAbove: a move leaving more moved pins than this on the order row reports NeedsFold.
	FoldAbove int
	// MaxOverrides: a move that would leave more moved pins than this on the order row folds
	// them into the edge list first (at least FoldAbove+1).
	MaxOverrides int
}

// Order keeps the user's order of the pins of a board: the board→pins edge list (EdgeBoardPins)
// ordered by (seq, pin). A pin never moved sits at its creation time (ms × 10^25); a move gives
// it the floor of the midpoint of its new neighbours' seqs.
//
// Rows. Besides the edge and point rows of the list (see Graph.AddEdge, "the index" below), each
// board has one order row in the "edges" table, key board(8) | EdgeBoardPins(2) | 0x02, value
//
//	version(8) | intent(1) | [respace steps] | [n(2) | n × override(pin(8) | seq(16) | nonce(8))]
//
// An override says "this pin sits at this seq", whatever its index row says; it is valid while
// the pin's point row is live and carries the same nonce (a removed and re-added pin does not
// inherit it). The visible order (List, Gaps, a move's neighbours) is the index with every pin
// that has a valid override shown at the override's seq instead.
//
// One write per move. A move reads the order row, computes its neighbours and the new seq from
// the merged view, and commits with one compare-and-set of the order row: version + 1 and the
// pin's override set. That is the only row a move writes. Since every move of the board (and
// every respace commit) compare-and-sets the same row, moves serialise across processes (HBase
// included: one single-row check-and-put): a move whose read is stale loses the compare-and-set,
// re-reads, and lands or is refused with ErrNotAdjacent. The result is exactly that of the moves
// run one after another in commit order.
//
// Folding moves overrides into the index (RespaceBoard does it first; Fold alone; a move folds
// synchronously when the row would hold more than MaxOverrides). Per override: put the new edge
// row, compare-and-set the point row old seq → override seq, delete the old edge row; then one
// compare-and-set of the order row drops the folded overrides still equal to what was folded (a
// newer move's override is kept). Folding never changes the visible order: an override and its
// folded index row name the same seq, and an index row whose point row names another seq is
// skipped.
//
// Respacing runs on a row with no override (it folds first, and its commit fails if a move added
// one meanwhile). Its plan is recorded on the order row as an intent and carried out; pins moving
// down go in ascending order, then pins moving up in descending order, so every prefix of the
// plan is still in the visible order, and whoever next reads the order row (a move, a respace, a
// fold) finishes it. A reader during a respace, or after a crash in one, sees the same order: it
// shows the plan's pins at their new seqs (like overrides) and skips their index rows.
//
// Reads are checked. A page is read from the order row, then index rows, then point rows: a
// respace or fold committed after the order row was read could move a pin between the two
// later reads. Every such change is committed on the order row first, so a read re-reads the
// order row last and starts over when it changed; a page is the order at one moment, and a move
// is refused as not adjacent only against an order that held when it was read.
//
// Paging. A cursor is the (seq, pin) of the last pin shown; when that pin has another seq by the
// next page (a respace spread its window, or it was moved), the page starts after the pin where
// it now is. Pins moved between two pages by users may still be shown twice or not at all in
// that listing, as in any paged list; one page (up to MaxEdgePage pins) is always exact.
// Order is safe for concurrent use.
type Order struct {
	g         *Graph
	below     seq.Seq
	target    seq.Seq
	maxPlan   int
	foldAbove int
	maxOvr    int
}

// NewOrder returns the ordered-list operations over g.
func NewOrder(g *Graph, o OrderOptions) *Order {
	ord := &Order{g: g, below: o.RespaceBelow, target: o.RespaceTo, maxPlan: o.MaxRespacePlan, foldAbove: o.FoldAbove, maxOvr: o.MaxOverrides}
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
	if ord.foldAbove <= 0 {
		ord.foldAbove = DefaultFoldAbove
	}
	if ord.maxOvr <= 0 {
		ord.maxOvr = DefaultMaxOverrides
	}
	ord.maxOvr = max(ord.maxOvr, ord.foldAbove+1)
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
	// NeedsFold reports that the order row holds more than FoldAbove moved pins: the caller
	// should have RespaceBoard (which folds first) run in the background.
	NeedsFold bool
	// Respaced counts the pins a synchronous respace moved because the move found no room.
	Respaced int
	// Folded counts the overrides folded synchronously (by a respace for room, or because the
	// order row was full) before the move.
	Folded int
	// Version is the order row's version the move committed (0 when nothing was written):
	// moves of one board applied in Version order give the board's order.
	Version uint64
}

// RespaceResult is the outcome of RespaceBoard.
type RespaceResult struct {
	// Moved counts the pins given a new seq; 0 when no gap was tight.
	Moved int
	// Windows counts the runs of pins re-spaced.
	Windows int
	// Folded counts the overrides folded into the edge list first.
	Folded int
}

const (
	tagOrder byte = 0x02

	intentNone    byte = 0
	intentMove    byte = 1 // written by earlier versions only; still finished when found
	intentRespace byte = 2

	stepLen     = 8 + 2*seq.Size
	overrideLen = 8 + seq.Size + 8
)

// step moves one pin from seq old to seq new.
type step struct {
	pin      ID
	old, new seq.Seq
}

// override places pin at seq while its point row carries nonce.
type override struct {
	pin   ID
	seq   seq.Seq
	nonce uint64
}

// orderState is a decoded order row. ovr is sorted by pin.
type orderState struct {
	version uint64
	kind    byte
	steps   []step
	ovr     []override
}

func orderKey(board ID) []byte { return edgeListPrefix(board, EdgeBoardPins, tagOrder) }

func (st orderState) encode() []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 15+len(st.steps)*stepLen+len(st.ovr)*overrideLen), st.version)
	v = append(v, st.kind)
	if st.kind == intentRespace {
		v = binary.BigEndian.AppendUint32(v, uint32(len(st.steps)))
	}
	for _, s := range st.steps {
		v = appendID(v, s.pin)
		v = s.old.AppendKey(v)
		v = s.new.AppendKey(v)
	}
	if len(st.ovr) > 0 {
		v = binary.BigEndian.AppendUint16(v, uint16(len(st.ovr)))
		for _, o := range st.ovr {
			v = appendID(v, o.pin)
			v = o.seq.AppendKey(v)
			v = binary.BigEndian.AppendUint64(v, o.nonce)
		}
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
	if n < 0 || len(rest) < n*stepLen {
		return orderState{}, fmt.Errorf("order row: %d bytes of steps for %d steps", len(rest), n)
	}
	for i := range n {
		b := rest[i*stepLen:]
		st.steps = append(st.steps, step{pin: ID(binary.BigEndian.Uint64(b)), old: seq.FromKey(b[8:]), new: seq.FromKey(b[8+seq.Size:])})
	}
	rest = rest[n*stepLen:]
	if len(rest) == 0 {
		return st, nil
	}
	if len(rest) < 2 {
		return orderState{}, fmt.Errorf("order row: truncated overrides")
	}
	m := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if len(rest) != m*overrideLen {
		return orderState{}, fmt.Errorf("order row: %d bytes of overrides for %d overrides", len(rest), m)
	}
	for i := range m {
		b := rest[i*overrideLen:]
		o := override{pin: ID(binary.BigEndian.Uint64(b)), seq: seq.FromKey(b[8:]), nonce: binary.BigEndian.Uint64(b[8+seq.Size:])}
		if i > 0 && st.ovr[i-1].pin >= o.pin {
			return orderState{}, fmt.Errorf("order row: overrides out of order")
		}
		st.ovr = append(st.ovr, o)
	}
	return st, nil
}

// withOverride returns ovr (sorted by pin) with o set, in a new slice.
func withOverride(ovr []override, o override) []override {
	out := make([]override, 0, len(ovr)+1)
	i, found := slices.BinarySearchFunc(ovr, o.pin, func(x override, p ID) int { return cmp.Compare(x.pin, p) })
	out = append(out, ovr[:i]...)
	out = append(out, o)
	if found {
		i++
	}
	return append(out, ovr[i:]...)
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
		var seqs [3]seq.Seq
		var pinPoint point
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
			v.note(id, pts[i])
			if _, ok := v.known[id]; ok {
				seqs[i] = v.ovrOf[id].seq
			}
			if i == 0 {
				pinPoint = p
			}
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
			res.Folded += rr.Folded
			continue
		}
		if err != nil {
			return res, err
		}
		// The new row: the overrides (those found void are dropped for free) and the pin's.
		ovr := make([]override, 0, len(v.st.ovr)+1)
		for _, x := range v.st.ovr {
			if !v.void[x.pin] {
				ovr = append(ovr, x)
			}
		}
		ovr = withOverride(ovr, override{pin: pin, seq: ns, nonce: pinPoint.nonce})
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
// and the next cursor ("" = end): the edge list with the order row's overrides merged in.
// Cursors are (seq, pin) positions, stable across moves, folds and respaces like ListEdges'.
func (o *Order) List(ctx context.Context, board ID, cur string, limit int) ([]Edge, string, error) {
	if err := board.Check(TypeBoard); err != nil {
		return nil, "", fmt.Errorf("list board: %w", err)
	}
	for attempt := range maxCASAttempts {
		if err := contend(ctx, attempt); err != nil {
			return nil, "", err
		}
		v, err := o.load(ctx, board, false)
		if err != nil {
			return nil, "", fmt.Errorf("list board %d: %w", board, err)
		}
		out, next, err := o.list(ctx, board, v, cur, limit)
		if errors.Is(err, errViewChanged) {
			continue
		}
		return out, next, err
	}
	return nil, "", fmt.Errorf("list board %d: the order changed under %d reads in a row", board, maxCASAttempts)
}

// Gaps returns the smallest gap between neighbours of the board's order (seq.Max for fewer than
// two pins): a measure for tests and operators.
func (o *Order) Gaps(ctx context.Context, board ID) (seq.Seq, error) {
	var list []Edge
	for attempt := 0; ; attempt++ {
		v, err := o.load(ctx, board, false)
		if err != nil {
			return seq.Seq{}, fmt.Errorf("gaps of board %d: %w", board, err)
		}
		list, err = o.all(ctx, board, v)
		if errors.Is(err, errViewChanged) && attempt < maxCASAttempts {
			continue
		}
		if err != nil {
			return seq.Seq{}, fmt.Errorf("gaps of board %d: %w", board, err)
		}
		break
	}
	minGap := seq.Max
	for i := 0; i+1 < len(list); i++ {
		if g := seq.Gap(list[i].Seq, list[i+1].Seq); g.Cmp(minGap) < 0 {
			minGap = g
		}
	}
	return minGap, nil
}

// contend waits before an attempt (0-based) of an optimistic loop on a board's order row: not
// at all for the first two, then a little longer each time, with jitter, so that the writers
// of one hot board take turns instead of failing together.
func contend(ctx context.Context, attempt int) error {
	if attempt < 2 {
		return nil
	}
	d := time.Duration(min(attempt, 16)) * 100 * time.Microsecond
	t := time.NewTimer(d/2 + rand.N(d))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
