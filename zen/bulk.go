package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/smartfeed/smartfeed/zen/seq"
)

// AllocIDs reserves n consecutive local IDs of (shard, t) with one increment of the store's
// counter and returns the first; the others follow it (first+1, first+2, ...). It is what a bulk
// load uses instead of NewLocalID per object: the IDs are unique across processes like
// NewLocalID's, and a block that is never written leaves a gap, which is harmless.
func (g *Graph) AllocIDs(ctx context.Context, shard uint16, t Type, n int) (ID, error) {
	if t == 0 || t > MaxType {
		return 0, fmt.Errorf("allocate ids: type %d out of range [1, %d]", t, MaxType)
	}
	if n < 1 {
		return 0, fmt.Errorf("allocate ids on shard %d type %d: block of %d", shard, t, n)
	}
	actx := ctx
	if g.lazyAlloc {
		actx = Lazily(ctx) // made durable by the objects' synced batch, as in Create
	}
	last, err := g.counters.Increment(actx, allocKey(shard, t), int64(n))
	if err != nil {
		return 0, fmt.Errorf("allocate %d ids on shard %d type %d: %w", n, shard, t, err)
	}
	if last < int64(n) || uint64(last) > MaxLocal {
		return 0, fmt.Errorf("allocate %d ids on shard %d type %d: local ids exhausted (%d)", n, shard, t, last)
	}
	return NewID(shard, t, uint64(last)-uint64(n)+1)
}

// LookupKeys returns, for each key of a kind, the ID it maps to (MapKey), or 0 when it maps to
// none, from one batched read of the mod-shard rows.
func (g *Graph) LookupKeys(ctx context.Context, kind string, keys []string) ([]ID, error) {
	ks := make([][]byte, len(keys))
	for i, key := range keys {
		k, err := modShardKey(kind, key)
		if err != nil {
			return nil, err
		}
		ks[i] = k
	}
	vals, err := GetMany(ctx, g.modshard, ks)
	if err != nil {
		return nil, fmt.Errorf("lookup %d %s keys: %w", len(keys), kind, err)
	}
	out := make([]ID, len(keys))
	for i, v := range vals {
		if v == nil {
			continue
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("lookup %s key: value is %d bytes", kind, len(v))
		}
		out[i] = ID(binary.BigEndian.Uint64(v))
	}
	return out, nil
}

// EdgesPresent reports, for each edge key, the stored edge (its seq and data) when its point row
// holds a counted edge, from one batched read of the point rows; ok[i] is false otherwise.
func (g *Graph) EdgesPresent(ctx context.Context, keys []EdgeKey) (edges []Edge, ok []bool, err error) {
	pks := make([][]byte, len(keys))
	for i, k := range keys {
		if err := checkEdge(k.From, k.Type, k.To); err != nil {
			return nil, nil, fmt.Errorf("edges present: %w", err)
		}
		pks[i] = pointKey(k.From, k.Type, k.To)
	}
	vals, err := GetMany(ctx, g.edges, pks)
	if err != nil {
		return nil, nil, fmt.Errorf("edges present: read %d points: %w", len(keys), err)
	}
	edges, ok = make([]Edge, len(keys)), make([]bool, len(keys))
	for i, v := range vals {
		if v == nil {
			continue
		}
		p, err := decodePoint(v)
		if err != nil {
			return nil, nil, fmt.Errorf("edges present: %w", err)
		}
		if p.state == pointCounted {
			edges[i] = Edge{From: keys[i].From, Type: keys[i].Type, To: keys[i].To, Seq: p.seq, Data: bytes.Clone(p.data)}
			ok[i] = true
		}
	}
	return edges, ok, nil
}

// Bulk writes the rows of new objects, unique keys and edges in large batches, one Apply per
// table per flush: the rows Create, MapKey and AddEdge leave when nothing else writes them, at
// the store's batched-write speed instead of one compare-and-set at a time. It is the writer of
// a bulk load into a graph whose loaded objects are new (their IDs come from AllocIDs), so it
// checks nothing against the stored rows: the caller decides what is new (LookupKeys,
// EdgesPresent) and sets each list's count (SetCount, or RecountEdges for lists that had rows
// before the load).
//
// Rows are buffered per table and written when a table's buffer reaches the batch size, or on
// Flush; one flush is written while the next is being built. Each flush writes the unique keys,
// then the objects, then the edges, then the counters, each batch sorted by key. A crash may
// leave a key claimed for an object not written yet: every reader treats a key held by an
// absent object as free (the API's claims take it over, a rerun of the load claims it again),
// whereas an object written before its claims would be left behind, unnamed. Not safe for
// concurrent use.
type Bulk struct {
	g     *Graph
	batch int
	now   func() int64
	bufs  [4][]Mutation // modshard, objects, edges, counters
	rows  int64
	werr  chan error // the previous flush's result
	sink  BulkSink   // nil: the tables' Apply
}

// BulkSink takes a bulk load's rows in place of the tables' writes, for a backend with a
// faster way to load many rows than its write path (HBase: HFiles moved into the regions, as
// its own bulk load does). Rows handed to Stage need not be readable before Commit returns; a
// crash before then loses them, and a rerun of the load writes them again.
type BulkSink interface {
	// Stage takes rows of the graph's table (TableObjects, TableEdges, TableCounters or
	// TableModShard), sorted by key; a key may come again, in this call or a later one: the
	// last row of a key wins. Bulk never stages deletes, and never calls Stage concurrently.
	// The sink may keep muts and reorder it until Commit: the caller hands the slice over and
	// does not write to it again.
	Stage(ctx context.Context, table string, muts []Mutation) error
	// Commit writes every row staged so far into its table durably, and returns when they
	// are readable.
	Commit(ctx context.Context) error
}

// BulkOption configures a Bulk.
type BulkOption func(*Bulk)

// WithBulkSink makes the Bulk hand its rows to s instead of writing them to the tables, and
// Flush commit them (s.Commit).
func WithBulkSink(s BulkSink) BulkOption { return func(b *Bulk) { b.sink = s } }

// Bulk tables in write order.
const (
	bulkModShard = iota
	bulkObjects
	bulkEdges
	bulkCounters
)

// NewBulk returns a Bulk writing batches of about batch rows per table (at least 1).
func (g *Graph) NewBulk(batch int, opts ...BulkOption) *Bulk {
	b := &Bulk{g: g, batch: max(1, batch), now: func() int64 { return g.now().UnixMilli() }, werr: make(chan error, 1)}
	for _, o := range opts {
		o(b)
	}
	b.werr <- nil
	return b
}

// Rows is the number of rows handed to the store so far.
func (b *Bulk) Rows() int64 { return b.rows }

// PutObject adds the row Create writes for a new object id at version 1 (missing known fields
// get defaults: "active": true).
func (b *Bulk) PutObject(ctx context.Context, id ID, data map[string]any) error {
	if !id.Valid() {
		return fmt.Errorf("bulk put object: invalid id %d", uint64(id))
	}
	d, err := cloneData(data)
	if err != nil {
		return fmt.Errorf("bulk put object %d: %w", id, err)
	}
	applyDefaults(d)
	v, err := encodeObject(1, d)
	if err != nil {
		return fmt.Errorf("bulk put object %d: %w", id, err)
	}
	return b.add(ctx, bulkObjects, Mutation{Key: objectKey(id), Value: v})
}

// MapKey adds the row MapKey writes when it maps key of kind to id.
func (b *Bulk) MapKey(ctx context.Context, kind, key string, id ID) error {
	k, err := modShardKey(kind, key)
	if err != nil {
		return err
	}
	if !id.Valid() {
		return fmt.Errorf("bulk map key %s: invalid id %d", kind, uint64(id))
	}
	return b.add(ctx, bulkModShard, Mutation{Key: k, Value: appendID(nil, id)})
}

// AddEdge adds the rows AddEdge leaves for a new edge e: its counted point row and its edge row.
// It does not count the edge: the caller sets the list's count. A zero Seq means now.
func (b *Bulk) AddEdge(ctx context.Context, e Edge) error {
	if err := checkEdge(e.From, e.Type, e.To); err != nil {
		return fmt.Errorf("bulk add edge: %w", err)
	}
	if len(e.Data) > MaxEdgeData {
		return fmt.Errorf("bulk add edge %d-%d->%d: data is %d bytes, over %d", e.From, e.Type, e.To, len(e.Data), MaxEdgeData)
	}
	if e.Seq.Cmp(seq.Max) > 0 {
		return fmt.Errorf("bulk add edge %d-%d->%d: seq %s above 10^38-1", e.From, e.Type, e.To, e.Seq)
	}
	if e.Seq == (seq.Seq{}) {
		e.Seq = seq.FromMillis(b.now())
	}
	p := point{state: pointCounted, nonce: rand.Uint64(), seq: e.Seq, data: e.Data}.encode()
	if err := b.add(ctx, bulkEdges, Mutation{Key: edgeRowKey(e.From, e.Type, e.Seq, e.To), Value: nonEmpty(e.Data)}); err != nil {
		return err
	}
	return b.add(ctx, bulkEdges, Mutation{Key: pointKey(e.From, e.Type, e.To), Value: p})
}

// RepairEdgeRow adds the edge row of an edge whose point row is stored (EdgesPresent): what
// AddEdge's re-add writes, so a load that stopped between a point row and its edge row is
// finished by the next run.
func (b *Bulk) RepairEdgeRow(ctx context.Context, e Edge) error {
	if err := checkEdge(e.From, e.Type, e.To); err != nil {
		return fmt.Errorf("bulk repair edge: %w", err)
	}
	return b.add(ctx, bulkEdges, Mutation{Key: edgeRowKey(e.From, e.Type, e.Seq, e.To), Value: nonEmpty(e.Data)})
}

// SetCount adds the count row of the list (from, t) holding n edges: the value AddEdge's
// increments reach for a list whose every edge the load wrote.
func (b *Bulk) SetCount(ctx context.Context, from ID, t EdgeType, n int64) error {
	k, err := countKey(from, t)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("bulk set count %d-%d: negative count %d", from, t, n)
	}
	return b.add(ctx, bulkCounters, Mutation{Key: k, Value: binary.BigEndian.AppendUint64(nil, uint64(n))})
}

func (b *Bulk) add(ctx context.Context, table int, m Mutation) error {
	b.bufs[table] = append(b.bufs[table], m)
	if len(b.bufs[table]) >= b.batch {
		return b.flush(ctx, false)
	}
	return nil
}

// Flush writes every buffered row and waits until the store has them durably (a synced write
// on the embedded backend, which makes the lazily written batches before it durable too; with
// a BulkSink, its Commit).
func (b *Bulk) Flush(ctx context.Context) error {
	if err := b.flush(ctx, true); err != nil {
		return err
	}
	err := <-b.werr
	if err == nil && b.sink != nil {
		if err = b.sink.Commit(ctx); err != nil {
			err = fmt.Errorf("bulk commit: %w", err)
		}
	}
	b.werr <- nil
	return err
}

// flush hands the buffered rows to a writer goroutine, after the previous flush's write
// finished (one write in flight while the next batch is built).
func (b *Bulk) flush(ctx context.Context, all bool) error {
	if err := <-b.werr; err != nil {
		b.werr <- err
		return err
	}
	var bufs [4][]Mutation
	n := 0
	for i := range b.bufs {
		if all || len(b.bufs[i]) >= b.batch || i < bulkEdges {
			// Objects and their claims always go with any flush, so an edge never lands
			// before the objects it joins.
			bufs[i], b.bufs[i] = b.bufs[i], nil
			n += len(bufs[i])
		}
	}
	b.rows += int64(n)
	tables := [4]Table{b.g.modshard, b.g.objects, b.g.edges, b.g.counters}
	names := [4]string{TableModShard, TableObjects, TableEdges, TableCounters}
	wctx := ctx
	if !all && b.g.SharesLog(b.g.objects) {
		// One sequential log under every table: the final flush's synced write makes the
		// earlier ones durable, and a machine crash before it leaves a prefix of the load,
		// which a rerun finishes. No fsync wait per batch.
		wctx = Lazily(ctx)
	}
	go func() {
		var err error
		for i, muts := range bufs {
			if len(muts) == 0 {
				continue
			}
			SortMutations(muts)
			if b.sink != nil {
				err = b.sink.Stage(wctx, names[i], muts)
			} else {
				err = tables[i].Apply(wctx, muts)
			}
			if err != nil {
				err = fmt.Errorf("bulk write of %d rows: %w", len(muts), err)
				break
			}
		}
		b.werr <- err
	}()
	return nil
}

// SortMutations sorts muts by key, mutations of one key kept in their order (the last one
// wins when applied). It is a stable sort done as an unstable one on (key, position), which
// is several times faster than slices.SortStableFunc on a batch of tens of thousands.
func SortMutations(muts []Mutation) {
	type at struct {
		m Mutation
		i int
	}
	s := make([]at, len(muts))
	for i, m := range muts {
		s[i] = at{m, i}
	}
	slices.SortFunc(s, func(x, y at) int {
		if c := bytes.Compare(x.m.Key, y.m.Key); c != 0 {
			return c
		}
		return x.i - y.i
	})
	for i := range s {
		muts[i] = s[i].m
	}
}
