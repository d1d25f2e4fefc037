package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	pagecursor "github.com/smartfeed/smartfeed/internal/cursor"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// cursor is a position in one list: the last (seq, to) returned, for one direction.
type cursor struct {
	From        ID
	Type        EdgeType
	NewestFirst bool
	Seq         seq.Seq
	To          ID
}

const (
	cursorVersion = 1
	cursorPayload = 8 + 2 + 1 + seq.Size + 8 // from, type, dir, seq, to
)

// encodeCursor returns the project's cursor (internal/cursor) over from | type | dir | seq | to.
func encodeCursor(c cursor) string {
	b := make([]byte, 0, cursorPayload)
	b = appendID(b, c.From)
	b = binary.BigEndian.AppendUint16(b, uint16(c.Type))
	dir := byte(0)
	if c.NewestFirst {
		dir = 1
	}
	b = append(b, dir)
	b = c.Seq.AppendKey(b)
	b = appendID(b, c.To)
	return pagecursor.Seal(cursorVersion, b)
}

// decodeCursor parses a cursor strictly (each position has one cursor); every failure wraps
// ErrBadCursor.
func decodeCursor(s string) (cursor, error) {
	b, err := pagecursor.Open(s, cursorVersion, cursorPayload)
	if err != nil {
		return cursor{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	if b[10] > 1 {
		return cursor{}, fmt.Errorf("%w: direction %d", ErrBadCursor, b[10])
	}
	c := cursor{
		From:        ID(binary.BigEndian.Uint64(b[0:8])),
		Type:        EdgeType(binary.BigEndian.Uint16(b[8:10])),
		NewestFirst: b[10] == 1,
		Seq:         seq.FromKey(b[11:27]),
		To:          ID(binary.BigEndian.Uint64(b[27:35])),
	}
	return c, nil
}

// ListEdges returns up to limit edges of (from, t) ordered by (Seq, To), ascending or (newestFirst)
// descending, starting after cursor ("" = the start), and the cursor of the next page ("" = end).
// A cursor of another list or direction, or a tampered one, gives an error wrapping ErrBadCursor.
// Edges inserted behind the cursor are not seen; nothing is repeated or skipped.
func (g *Graph) ListEdges(ctx context.Context, from ID, t EdgeType, cur string, limit int, newestFirst bool) ([]Edge, string, error) {
	ft, _, _, ok := t.info()
	if !ok {
		return nil, "", fmt.Errorf("list edges: edge type %d: unknown", t)
	}
	if err := from.Check(ft); err != nil {
		return nil, "", fmt.Errorf("list edges type %d: %w", t, err)
	}
	if limit < 1 || limit > MaxEdgePage {
		return nil, "", fmt.Errorf("list edges %d-%d: limit %d out of range [1, %d]", from, t, limit, MaxEdgePage)
	}
	start, stop, err := listRange(from, t, cur, newestFirst)
	if err != nil {
		return nil, "", fmt.Errorf("list edges %d-%d: %w", from, t, err)
	}
	var out []Edge
	for round := 0; len(out) <= limit; round++ {
		want := limit + 1 - len(out)
		rows, err := g.edges.Scan(ctx, ScanOptions{Start: start, Stop: stop, Reverse: newestFirst, Limit: want})
		if err != nil {
			return nil, "", fmt.Errorf("list edges %d-%d: %w", from, t, err)
		}
		keys := make([][]byte, 0, len(rows))
		for _, r := range rows {
			if len(r.Key) != edgeRowLen {
				return nil, "", fmt.Errorf("list edges %d-%d: malformed row key %x", from, t, r.Key)
			}
			keys = append(keys, pointKey(from, t, ID(binary.BigEndian.Uint64(r.Key[edgeRowLen-8:]))))
		}
		// The whole list came in this one read, so (from, t) has about as many point rows as
		// these: one scan reads them cheaper than a seek each (a fanout's receiver lists mostly
		// fit a page).
		whole := cur == "" && round == 0 && len(rows) < want && len(rows) >= pointScanMin
		points, err := g.points(ctx, from, t, keys, whole)
		if err != nil {
			return nil, "", fmt.Errorf("list edges %d-%d: %w", from, t, err)
		}
		var stale []KV
		for i, r := range rows {
			s := seq.FromKey(r.Key[edgeListPrefixLen:])
			to := ID(binary.BigEndian.Uint64(r.Key[edgeRowLen-8:]))
			if points[i] == nil {
				// An add that lost a race with a remove and is about to add afresh, or its
				// leftover: skip it, but do not delete what may be about to become valid.
				continue
			}
			p, err := decodePoint(points[i])
			if err != nil {
				return nil, "", fmt.Errorf("list edges %d-%d: %w", from, t, err)
			}
			if p.state == pointRemoving {
				continue // its remover deletes the row
			}
			if p.seq != s {
				stale = append(stale, r)
				continue
			}
			out = append(out, Edge{From: from, Type: t, To: to, Seq: s, Data: p.data})
		}
		g.dropStaleRows(ctx, from, t, stale)
		if len(rows) < want {
			break // the list is exhausted
		}
		last := rows[len(rows)-1].Key
		if newestFirst {
			stop = last
		} else {
			start = keyAfter(last)
		}
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		l := out[limit-1]
		next = encodeCursor(cursor{From: from, Type: t, NewestFirst: newestFirst, Seq: l.Seq, To: l.To})
	}
	return out, next, nil
}

// listRange is the key range of the (from, t) list left to read after cursor cur (all of it
// when cur is empty), in the direction newestFirst.
func listRange(from ID, t EdgeType, cur string, newestFirst bool) (start, stop []byte, err error) {
	prefix := edgeListPrefix(from, t, tagEdge)
	start, stop = prefix, PrefixEnd(prefix)
	if cur == "" {
		return start, stop, nil
	}
	c, err := decodeCursor(cur)
	if err != nil {
		return nil, nil, err
	}
	if c.From != from || c.Type != t || c.NewestFirst != newestFirst {
		return nil, nil, fmt.Errorf("%w: cursor is for another list or direction", ErrBadCursor)
	}
	pos := edgeRowKey(from, t, c.Seq, c.To)
	if newestFirst {
		return start, pos, nil
	}
	return keyAfter(pos), stop, nil
}

// dropStaleRows deletes list rows whose point row holds another seq. Best effort: a stale row
// is skipped whether or not this delete lands. The delete takes only the value read: if a move
// brought the pin back to this seq meanwhile and rewrote the row (Order's moves write a fresh
// value), the row is valid again and stays. An add writes the same value again (its data), so
// a delete that landed is followed by restoreEdgeRow, for an add at this seq since the point
// was read.
func (g *Graph) dropStaleRows(ctx context.Context, from ID, t EdgeType, stale []KV) {
	for _, r := range stale {
		if ok, err := g.edges.CheckAndSet(ctx, r.Key, nonEmpty(r.Value), nil); err == nil && ok {
			_ = g.restoreEdgeRow(ctx, from, t, ID(binary.BigEndian.Uint64(r.Key[edgeRowLen-8:])), seq.FromKey(r.Key[edgeListPrefixLen:]))
		}
	}
}

// Members returns the first limit members (the To of each edge) of the list (from, t) in ID
// order, not list order, and whether the list may hold more. It reads only the point rows, the
// list's source of truth: one scan, half the rows of ListEdges, for callers that need the set and
// not its order (a fanout's receivers). An edge being added is a member from its first write (its
// point row, pending) and one being removed is not from its first (removing), so the answer can
// differ from ListEdges only for calls in flight or abandoned mid-way. more is true when the scan
// filled its page, even if the rows past limit turn out to be removals.
func (g *Graph) Members(ctx context.Context, from ID, t EdgeType, limit int) (ids []ID, more bool, err error) {
	ft, _, _, ok := t.info()
	if !ok {
		return nil, false, fmt.Errorf("list members: edge type %d: unknown", t)
	}
	if err := from.Check(ft); err != nil {
		return nil, false, fmt.Errorf("list members type %d: %w", t, err)
	}
	if limit < 1 || limit > MaxEdgePage {
		return nil, false, fmt.Errorf("list members %d-%d: limit %d out of range [1, %d]", from, t, limit, MaxEdgePage)
	}
	prefix := edgeListPrefix(from, t, tagPoint)
	rows, err := g.edges.Scan(ctx, ScanOptions{Start: prefix, Stop: PrefixEnd(prefix), Limit: limit + 1})
	if err != nil {
		return nil, false, fmt.Errorf("list members %d-%d: %w", from, t, err)
	}
	ids = make([]ID, 0, min(len(rows), limit))
	for _, r := range rows {
		if len(r.Key) != edgeListPrefixLen+8 {
			return nil, false, fmt.Errorf("list members %d-%d: malformed point key %x", from, t, r.Key)
		}
		p, err := decodePoint(r.Value)
		if err != nil {
			return nil, false, fmt.Errorf("list members %d-%d: %w", from, t, err)
		}
		if p.state == pointRemoving || len(ids) == limit {
			continue
		}
		ids = append(ids, ID(binary.BigEndian.Uint64(r.Key[edgeListPrefixLen:])))
	}
	return ids, len(rows) > limit, nil
}

// pointScanMin is the size from which a whole list's point rows are scanned, not got one by one
// (a variable for the tests).
var pointScanMin = 16

// points returns the values at keys (point rows of (from, t)), like GetMany. With whole (the
// caller expects (from, t) to have about len(keys) point rows), it first scans all of (from, t)'s
// point rows, up to a quarter more than keys for points in flight, and looks the keys up in
// them; only if the scan stops short of the range's end does it get the keys one by one. A scan
// that reached the end holds every key's row, so the answer is GetMany's whatever whole claimed:
// each value as read at some moment of the call.
func (g *Graph) points(ctx context.Context, from ID, t EdgeType, keys [][]byte, whole bool) ([][]byte, error) {
	if !whole {
		return GetMany(ctx, g.edges, keys)
	}
	prefix := edgeListPrefix(from, t, tagPoint)
	limit := len(keys) + len(keys)/4 + 8
	rows, err := g.edges.Scan(ctx, ScanOptions{Start: prefix, Stop: PrefixEnd(prefix), Limit: limit})
	if err != nil {
		return nil, err
	}
	if len(rows) >= limit {
		return GetMany(ctx, g.edges, keys)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if j, ok := slices.BinarySearchFunc(rows, k, func(r KV, k []byte) int { return bytes.Compare(r.Key, k) }); ok {
			out[i] = rows[j].Value
		}
	}
	return out, nil
}
