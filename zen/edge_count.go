package zen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// RecountEdges recomputes the count of (from, t) from its point rows and corrects the stored
// count by the difference; it returns the new count. It is the repair for a count left off by a
// failed increment; run it when the list is quiet (a concurrent add or remove can make the
// correction itself off by one).
func (g *Graph) RecountEdges(ctx context.Context, from ID, t EdgeType) (int64, error) {
	ft, _, _, ok := t.info()
	if !ok {
		return 0, fmt.Errorf("recount edges: edge type %d: unknown", t)
	}
	if err := from.Check(ft); err != nil {
		return 0, fmt.Errorf("recount edges type %d: %w", t, err)
	}
	prefix := edgeListPrefix(from, t, tagPoint)
	start, stop := prefix, PrefixEnd(prefix)
	var n int64
	for {
		rows, err := g.edges.Scan(ctx, ScanOptions{Start: start, Stop: stop, Limit: 1000})
		if err != nil {
			return 0, fmt.Errorf("recount edges %d-%d: %w", from, t, err)
		}
		for _, r := range rows {
			if p, err := decodePoint(r.Value); err == nil && p.state == pointCounted {
				n++
			}
		}
		if len(rows) < 1000 {
			break
		}
		start = keyAfter(rows[len(rows)-1].Key)
	}
	stored, err := g.CountEdges(ctx, from, t)
	if err != nil {
		return 0, fmt.Errorf("recount: %w", err)
	}
	raw, err := g.counters.Get(ctx, edgeCountKey(from, t))
	if err == nil && len(raw) == 8 {
		stored = int64(binary.BigEndian.Uint64(raw)) // the unclamped value
	}
	if n != stored {
		if _, err := g.counters.Increment(ctx, edgeCountKey(from, t), n-stored); err != nil {
			return 0, fmt.Errorf("recount edges %d-%d: %w", from, t, err)
		}
	}
	return n, nil
}

// HasEdge returns the edge with its seq and data, or ErrNotFound.
func (g *Graph) HasEdge(ctx context.Context, from ID, t EdgeType, to ID) (Edge, error) {
	if err := checkEdge(from, t, to); err != nil {
		return Edge{}, fmt.Errorf("has edge: %w", err)
	}
	v, err := g.edges.Get(ctx, pointKey(from, t, to))
	if err != nil {
		return Edge{}, fmt.Errorf("has edge %d-%d->%d: %w", from, t, to, err)
	}
	p, err := decodePoint(v)
	if err != nil {
		return Edge{}, fmt.Errorf("has edge %d-%d->%d: %w", from, t, to, err)
	}
	if p.state == pointRemoving {
		return Edge{}, fmt.Errorf("has edge %d-%d->%d: being removed: %w", from, t, to, ErrNotFound)
	}
	return Edge{From: from, Type: t, To: to, Seq: p.seq, Data: p.data}, nil
}

// EdgeKey names one edge (From, Type, To) for HasEdges.
type EdgeKey struct {
	From ID
	Type EdgeType
	To   ID
}

// HasEdges reports, for each key, whether the edge exists, as HasEdge would, from one batched
// read of the edges' point rows. A key that names no valid edge fails the call.
func (g *Graph) HasEdges(ctx context.Context, keys []EdgeKey) ([]bool, error) {
	pks := make([][]byte, len(keys))
	for i, k := range keys {
		if err := checkEdge(k.From, k.Type, k.To); err != nil {
			return nil, fmt.Errorf("has edges: %w", err)
		}
		pks[i] = pointKey(k.From, k.Type, k.To)
	}
	vals, err := GetMany(ctx, g.edges, pks)
	if err != nil {
		return nil, fmt.Errorf("has edges: %w", err)
	}
	out := make([]bool, len(keys))
	for i, v := range vals {
		if v == nil {
			continue
		}
		p, err := decodePoint(v)
		if err != nil {
			return nil, fmt.Errorf("has edge %d-%d->%d: %w", keys[i].From, keys[i].Type, keys[i].To, err)
		}
		out[i] = p.state != pointRemoving
	}
	return out, nil
}

// CountEdges returns the materialised size of the list (from, t).
func (g *Graph) CountEdges(ctx context.Context, from ID, t EdgeType) (int64, error) {
	k, err := countKey(from, t)
	if err != nil {
		return 0, err
	}
	v, err := g.counters.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count edges %d-%d: %w", from, t, err)
	}
	return decodeCount(from, t, v)
}

// countKey is the counter row of the list (from, t), or the error for a list that cannot be.
func countKey(from ID, t EdgeType) ([]byte, error) {
	ft, _, _, ok := t.info()
	if !ok {
		return nil, fmt.Errorf("count edges: edge type %d: unknown", t)
	}
	if err := from.Check(ft); err != nil {
		return nil, fmt.Errorf("count edges type %d: %w", t, err)
	}
	return edgeCountKey(from, t), nil
}

// decodeCount reads the counter row v of the list (from, t); a negative count reads as 0.
func decodeCount(from ID, t EdgeType, v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("count edges %d-%d: counter is %d bytes", from, t, len(v))
	}
	return max(0, int64(binary.BigEndian.Uint64(v))), nil
}

// ListKey names one edge list (From, Type) for CountEdgesMany.
type ListKey struct {
	From ID
	Type EdgeType
}

// CountEdgesMany returns, for each key, what CountEdges would, from one batched read of the
// counter rows (a task that needs several counts pays one round trip, not one a count). A key
// that names no valid list fails the call.
func (g *Graph) CountEdgesMany(ctx context.Context, keys []ListKey) ([]int64, error) {
	cks := make([][]byte, len(keys))
	for i, k := range keys {
		ck, err := countKey(k.From, k.Type)
		if err != nil {
			return nil, err
		}
		cks[i] = ck
	}
	vals, err := GetMany(ctx, g.counters, cks)
	if err != nil {
		return nil, fmt.Errorf("count edges of %d lists: %w", len(keys), err)
	}
	out := make([]int64, len(keys))
	for i, v := range vals {
		if v == nil {
			continue
		}
		if out[i], err = decodeCount(keys[i].From, keys[i].Type, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}
