package zen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
