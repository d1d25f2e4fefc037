package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// EdgeType names a directed edge list (a mapping table). Inverse directions are separate types.
type EdgeType uint16

// Edge types. The comment gives from → to.
const (
	EdgeUserPins          EdgeType = 1  // user → pin (pins the user saved)
	EdgeBoardPins         EdgeType = 2  // board → pin
	EdgePinBoards         EdgeType = 3  // pin → board
	EdgeUserBoards        EdgeType = 4  // user → board
	EdgeFollowsUser       EdgeType = 10 // user → user
	EdgeFollowedByUser    EdgeType = 11 // user → user (followers)
	EdgeFollowsBoard      EdgeType = 12 // user → board
	EdgeBoardFollowers    EdgeType = 13 // board → user
	EdgeFollowsInterest   EdgeType = 14 // user → interest
	EdgeInterestFollowers EdgeType = 15 // interest → user
	EdgePinInterests      EdgeType = 16 // pin → interest
	EdgeInterestPins      EdgeType = 17 // interest → pin
	EdgeUserLikes         EdgeType = 20 // user → pin
	EdgePinLikers         EdgeType = 21 // pin → user
)

// MaxEdgeData bounds Edge.Data; MaxEdgePage bounds ListEdges' limit.
const (
	MaxEdgeData = 64 << 10
	MaxEdgePage = 10000
)

// ErrBadCursor is wrapped by ListEdges for a malformed, tampered or foreign cursor.
var ErrBadCursor = errors.New("zen: bad cursor")

// edgeInfo returns the endpoint types and the inverse of t; ok is false for an unknown type.
func (t EdgeType) info() (from, to Type, inv EdgeType, ok bool) {
	switch t {
	case EdgeUserPins:
		return TypeUser, TypePin, 0, true
	case EdgeBoardPins:
		return TypeBoard, TypePin, EdgePinBoards, true
	case EdgePinBoards:
		return TypePin, TypeBoard, EdgeBoardPins, true
	case EdgeUserBoards:
		return TypeUser, TypeBoard, 0, true
	case EdgeFollowsUser:
		return TypeUser, TypeUser, EdgeFollowedByUser, true
	case EdgeFollowedByUser:
		return TypeUser, TypeUser, EdgeFollowsUser, true
	case EdgeFollowsBoard:
		return TypeUser, TypeBoard, EdgeBoardFollowers, true
	case EdgeBoardFollowers:
		return TypeBoard, TypeUser, EdgeFollowsBoard, true
	case EdgeFollowsInterest:
		return TypeUser, TypeInterest, EdgeInterestFollowers, true
	case EdgeInterestFollowers:
		return TypeInterest, TypeUser, EdgeFollowsInterest, true
	case EdgePinInterests:
		return TypePin, TypeInterest, EdgeInterestPins, true
	case EdgeInterestPins:
		return TypeInterest, TypePin, EdgePinInterests, true
	case EdgeUserLikes:
		return TypeUser, TypePin, EdgePinLikers, true
	case EdgePinLikers:
		return TypePin, TypeUser, EdgeUserLikes, true
	}
	return 0, 0, 0, false
}

// Inverse returns the edge type of the opposite direction; false when t has none (EdgeUserPins,
// EdgeUserBoards: ownership lives in the object) or is unknown.
func (t EdgeType) Inverse() (EdgeType, bool) {
	_, _, inv, ok := t.info()
	return inv, ok && inv != 0
}

// Endpoints returns the object types t connects; false for an unknown edge type.
func (t EdgeType) Endpoints() (from, to Type, ok bool) {
	from, to, _, ok = t.info()
	return from, to, ok
}

// Edge is one directed edge. Lists are ordered by (Seq, To).
type Edge struct {
	From ID
	Type EdgeType
	To   ID
	Seq  seq.Seq
	Data []byte
}

// checkEdge validates the endpoints of an edge of type t.
func checkEdge(from ID, t EdgeType, to ID) error {
	ft, tt, _, ok := t.info()
	if !ok {
		return fmt.Errorf("edge type %d: unknown", t)
	}
	if err := from.Check(ft); err != nil {
		return fmt.Errorf("edge type %d from: %w", t, err)
	}
	if err := to.Check(tt); err != nil {
		return fmt.Errorf("edge type %d to: %w", t, err)
	}
	return nil
}

// Row layout of the "edges" table, all on from's shard:
//
//	edge row  from(8) | type(2) | 0x01 | seq(16) | to(8)  -> data              (the ordered list)
//	point row from(8) | type(2) | 0x00 | to(8)            -> state(1) | nonce(8) | seq(16) | data
//
// The point row is the source of truth; an edge row whose point row is absent, being removed or
// holds another seq is stale and is skipped by ListEdges (which deletes it in the last case). The state moves
// pending → counted → removing → (deleted), each step a compare-and-set; the one call whose
// compare-and-set makes a step owns that step's count change, so retries never count twice. The
// nonce names the call that made the last step: a call whose compare-and-set returned an error
// re-reads the row and recognises its own write.
const (
	tagPoint byte = 0x00
	tagEdge  byte = 0x01

	pointPending  byte = 0
	pointCounted  byte = 1
	pointRemoving byte = 2

	edgeListPrefixLen = 11
	edgeRowLen        = edgeListPrefixLen + seq.Size + 8
	pointHeaderLen    = 1 + 8 + seq.Size
)

func edgeListPrefix(from ID, t EdgeType, tag byte) []byte {
	k := make([]byte, 0, edgeRowLen)
	k = appendID(k, from)
	k = binary.BigEndian.AppendUint16(k, uint16(t))
	return append(k, tag)
}

func edgeRowKey(from ID, t EdgeType, s seq.Seq, to ID) []byte {
	return appendID(s.AppendKey(edgeListPrefix(from, t, tagEdge)), to)
}

func pointKey(from ID, t EdgeType, to ID) []byte {
	return appendID(edgeListPrefix(from, t, tagPoint), to)
}

func edgeCountKey(from ID, t EdgeType) []byte {
	k := append(appendID(make([]byte, 0, 11), from), counterEdges)
	return binary.BigEndian.AppendUint16(k, uint16(t))
}

// point is a decoded point row.
type point struct {
	state byte
	nonce uint64
	seq   seq.Seq
	data  []byte
}

func (p point) encode() []byte {
	v := make([]byte, 0, pointHeaderLen+len(p.data))
	v = append(v, p.state)
	v = binary.BigEndian.AppendUint64(v, p.nonce)
	v = p.seq.AppendKey(v)
	return append(v, p.data...)
}

func decodePoint(v []byte) (point, error) {
	if len(v) < pointHeaderLen || v[0] > pointRemoving {
		return point{}, fmt.Errorf("edge point row: malformed value (%d bytes)", len(v))
	}
	return point{state: v[0], nonce: binary.BigEndian.Uint64(v[1:9]), seq: seq.FromKey(v[9:]), data: v[pointHeaderLen:]}, nil
}

// casPoint is CheckAndSet on a point row that survives an error after the write landed: on error
// it re-reads the row and reports success when the row holds exactly value (a nonce makes value
// unique to this call; for a delete, value is nil and absence is not proof, so the error stands).
func (g *Graph) casPoint(ctx context.Context, key, expected, value []byte) (bool, error) {
	ok, err := g.edges.CheckAndSet(ctx, key, expected, value)
	if err == nil || value == nil {
		return ok, err
	}
	cur, gerr := g.edges.Get(ctx, key)
	if gerr == nil && bytes.Equal(cur, value) {
		return true, nil
	}
	return false, err
}

// finishRemove completes a removal whose point row is in state removing: it deletes the edge row,
// then the point row. The count was already taken care of by the call that set removing.
//
// Several calls may finish one removal (its remover and any add that finds it half done), and
// one of them can be late: its delete of the edge row may land after another finished the
// removal and an add put the edge back at the same seq (the row's key names only seq and
// member). The point row tells: when this call does not delete it (someone else did, or it
// changed), it restores the edge row of whatever live point now holds the same seq.
func (g *Graph) finishRemove(ctx context.Context, from ID, t EdgeType, to ID, cur []byte, p point) error {
	if err := g.edges.Apply(ctx, []Mutation{{Key: edgeRowKey(from, t, p.seq, to), Delete: true}}); err != nil {
		return err
	}
	ok, err := g.edges.CheckAndSet(ctx, pointKey(from, t, to), cur, nil)
	if err != nil || ok {
		return err
	}
	return g.restoreEdgeRow(ctx, from, t, to, p.seq)
}

// restoreEdgeRow puts back the edge row at seq s after this call deleted it, if the point row
// now holds a live edge at s (a later add of the same member at the same seq, whose row the
// delete may have taken). Any delete of an edge row that may be late is followed by this
// check: an add writes its point row before its edge row, so a point read after the delete
// sees every add whose row the delete could have hit. A restored row whose edge is removed
// meanwhile is left without a point row, which readers skip.
func (g *Graph) restoreEdgeRow(ctx context.Context, from ID, t EdgeType, to ID, s seq.Seq) error {
	v, err := g.edges.Get(ctx, pointKey(from, t, to))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p, err := decodePoint(v)
	if err != nil {
		return err
	}
	if p.state == pointRemoving || p.seq != s {
		return nil
	}
	return g.edges.Apply(ctx, []Mutation{{Key: edgeRowKey(from, t, s, to), Value: nonEmpty(p.data)}})
}

// AddEdge adds e to the list (e.From, e.Type). It is idempotent: re-adding an existing edge keeps
// its seq, data and count. A zero Seq means now in milliseconds × 10^25.
//
// Writes, each safe to replay: (1) put-if-absent the point row (pending), (2) put the edge row,
// (3) compare-and-set the point row pending → counted, and only if that won (4) increment the
// count. A retry after a failure at (1)–(3) finishes the job without counting twice; a failure of
// (4) itself leaves the count one low (RecountEdges repairs it).
//
// When edges and counters commit through one sequential log (the embedded backend), every write
// but the call's last is lazy (zen.Lazily): the last one waits for durability, which makes the
// earlier ones durable too, so a machine crash leaves a prefix of the steps, as a crash between
// durable steps did, and a call that returned nil is durable whole. One fsync wait per add
// instead of four.
func (g *Graph) AddEdge(ctx context.Context, e Edge) error {
	if err := checkEdge(e.From, e.Type, e.To); err != nil {
		return fmt.Errorf("add edge: %w", err)
	}
	if len(e.Data) > MaxEdgeData {
		return fmt.Errorf("add edge %d-%d->%d: data is %d bytes, over %d", e.From, e.Type, e.To, len(e.Data), MaxEdgeData)
	}
	if e.Seq.Cmp(seq.Max) > 0 {
		return fmt.Errorf("add edge %d-%d->%d: seq %s above 10^38-1", e.From, e.Type, e.To, e.Seq)
	}
	if e.Seq == (seq.Seq{}) {
		e.Seq = seq.FromMillis(g.now().UnixMilli())
	}
	if err := g.addEdge(ctx, e); err != nil {
		return fmt.Errorf("add edge %d-%d->%d: %w", e.From, e.Type, e.To, err)
	}
	return nil
}

func (g *Graph) addEdge(ctx context.Context, e Edge) error {
	pk := pointKey(e.From, e.Type, e.To)
	nonce := rand.Uint64()
	step := ctx // the steps that a durable write of this call follows
	if g.lazyEdgeSteps {
		step = Lazily(ctx)
	}
	for range maxCASAttempts {
		cur := point{state: pointPending, nonce: nonce, seq: e.Seq, data: e.Data}.encode()
		created, err := g.casPoint(step, pk, nil, cur)
		if err != nil {
			return err
		}
		if !created {
			cur, err = g.edges.Get(ctx, pk)
			if errors.Is(err, ErrNotFound) {
				continue // removed in between: add afresh
			}
			if err != nil {
				return err
			}
		}
		p, err := decodePoint(cur)
		if err != nil {
			return err
		}
		if p.state == pointRemoving {
			if err := g.finishRemove(ctx, e.From, e.Type, e.To, cur, p); err != nil {
				return err
			}
			continue
		}
		// Put the edge row (again, when re-adding: that repairs a row lost to a failure). For a
		// counted point it is the call's last write, so it waits for durability.
		ek := edgeRowKey(e.From, e.Type, p.seq, e.To)
		put := step
		if p.state == pointCounted {
			put = ctx
		}
		if err := g.edges.Apply(put, []Mutation{{Key: ek, Value: nonEmpty(p.data)}}); err != nil {
			return err
		}
		if p.state == pointCounted {
			return nil
		}
		counted := point{state: pointCounted, nonce: nonce, seq: p.seq, data: p.data}.encode()
		won, err := g.casPoint(step, pk, cur, counted)
		if err != nil {
			return err
		}
		if won {
			if _, err := g.counters.Increment(ctx, edgeCountKey(e.From, e.Type), 1); err != nil {
				return fmt.Errorf("count: %w", err)
			}
			return nil
		}
		// Counted by another call, or removed: look again.
	}
	return fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
}

// nonEmpty returns b, or an empty slice for nil (a nil value means delete to CheckAndSet).
func nonEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// RemoveEdge removes the edge; removing an absent edge succeeds. Writes: (1) compare-and-set the
// point row to removing (the winner alone owns the decrement), (2) decrement a counted edge,
// (3) delete the edge row, (4) delete the point row. A retry after a failure at (1), (3) or (4)
// finishes the removal; a failure of (2) itself leaves the count one high (RecountEdges).
func (g *Graph) RemoveEdge(ctx context.Context, from ID, t EdgeType, to ID) error {
	if err := checkEdge(from, t, to); err != nil {
		return fmt.Errorf("remove edge: %w", err)
	}
	if err := g.removeEdge(ctx, from, t, to); err != nil {
		return fmt.Errorf("remove edge %d-%d->%d: %w", from, t, to, err)
	}
	return nil
}

func (g *Graph) removeEdge(ctx context.Context, from ID, t EdgeType, to ID) error {
	pk := pointKey(from, t, to)
	nonce := rand.Uint64()
	for range maxCASAttempts {
		cur, err := g.edges.Get(ctx, pk)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		p, err := decodePoint(cur)
		if err != nil {
			return err
		}
		if p.state != pointRemoving {
			removing := point{state: pointRemoving, nonce: nonce, seq: p.seq, data: p.data}.encode()
			won, err := g.casPoint(ctx, pk, cur, removing)
			if err != nil {
				return err
			}
			if !won {
				continue
			}
			if p.state == pointCounted {
				if _, err := g.counters.Increment(ctx, edgeCountKey(from, t), -1); err != nil {
					return fmt.Errorf("count: %w", err)
				}
			}
			cur, p = removing, point{state: pointRemoving, nonce: nonce, seq: p.seq, data: p.data}
		}
		return g.finishRemove(ctx, from, t, to, cur, p)
	}
	return fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
}

// AddInverse writes the inverse of e (e.To → e.From, same seq and data); idempotent like AddEdge.
// graphsvc calls it right after the forward AddEdge, so a retry of the pair finishes both.
func (g *Graph) AddInverse(ctx context.Context, e Edge) error {
	inv, ok := e.Type.Inverse()
	if !ok {
		return fmt.Errorf("add inverse: edge type %d has no inverse", e.Type)
	}
	return g.AddEdge(ctx, Edge{From: e.To, Type: inv, To: e.From, Seq: e.Seq, Data: e.Data})
}

// RemoveInverse removes the inverse of (from, t, to); idempotent like RemoveEdge.
func (g *Graph) RemoveInverse(ctx context.Context, from ID, t EdgeType, to ID) error {
	inv, ok := t.Inverse()
	if !ok {
		return fmt.Errorf("remove inverse: edge type %d has no inverse", t)
	}
	return g.RemoveEdge(ctx, to, inv, from)
}

// UnlistPin removes a deleted pin from the lists that show it: board→pins of every board it is
// on (found through pin→boards) and the author's user→pins, decrementing their counts. The
// pin→boards inverse stays (a purge walks it to reach the boards' followers; DropPinBoards
// removes it after). Removing an absent edge is a no-op, so it can run again.
func (g *Graph) UnlistPin(ctx context.Context, pin, author ID) error {
	boards, err := g.pinBoards(ctx, pin)
	if err != nil {
		return fmt.Errorf("unlist pin %d: %w", pin, err)
	}
	for _, b := range boards {
		if err := g.RemoveEdge(ctx, b, EdgeBoardPins, pin); err != nil {
			return fmt.Errorf("unlist pin %d: %w", pin, err)
		}
	}
	if err := g.RemoveEdge(ctx, author, EdgeUserPins, pin); err != nil {
		return fmt.Errorf("unlist pin %d: %w", pin, err)
	}
	return nil
}

// DropPinBoards removes a deleted pin's pin→boards edges, the last trace of it on its boards.
func (g *Graph) DropPinBoards(ctx context.Context, pin ID) error {
	boards, err := g.pinBoards(ctx, pin)
	if err != nil {
		return fmt.Errorf("drop pin boards %d: %w", pin, err)
	}
	for _, b := range boards {
		if err := g.RemoveEdge(ctx, pin, EdgePinBoards, b); err != nil {
			return fmt.Errorf("drop pin boards %d: %w", pin, err)
		}
	}
	return nil
}

func (g *Graph) pinBoards(ctx context.Context, pin ID) ([]ID, error) {
	var out []ID
	for cur := ""; ; {
		es, next, err := g.ListEdges(ctx, pin, EdgePinBoards, cur, MaxEdgePage, false)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, e.To)
		}
		if next == "" {
			return out, nil
		}
		cur = next
	}
}

// DeleteOwned soft-deletes what a (deleted) user owns: every pin on their user→pins list and
// every board on their user→boards list. Deleting a deleted object is a no-op, so it can run
// again; the edges stay for the purge that follows (UnlistPin, DropPinBoards).
func (g *Graph) DeleteOwned(ctx context.Context, user ID) error {
	for _, t := range []EdgeType{EdgeUserPins, EdgeUserBoards} {
		for cur := ""; ; {
			es, next, err := g.ListEdges(ctx, user, t, cur, MaxEdgePage, false)
			if err != nil {
				return fmt.Errorf("delete owned by %d: %w", user, err)
			}
			for _, e := range es {
				if err := g.Delete(ctx, e.To); err != nil && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("delete owned by %d: %w", user, err)
				}
			}
			if next == "" {
				break
			}
			cur = next
		}
	}
	return nil
}
