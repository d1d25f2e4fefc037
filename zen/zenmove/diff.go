package zenmove

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/smartfeed/smartfeed/zen"
)

// The pieces of diffTable, the row-by-row comparison of one table on the source and the target:
// a cursor over each side, the digests of verification, and what a batch of writes adds to both.

// readBack adds to dig what the target t now holds for the rows muts just wrote.
func readBack(ctx context.Context, t zen.Table, name string, muts []zen.Mutation, dig *digests) error {
	keys := make([][]byte, len(muts))
	for i, m := range muts {
		keys[i] = m.Key
	}
	vals, err := zen.GetMany(ctx, t, keys)
	if err != nil {
		return fmt.Errorf("read back %d rows of %s: %w", len(keys), name, err)
	}
	for i, v := range vals {
		if v != nil {
			dig.add(name, 1, zen.KV{Key: keys[i], Value: v})
		}
	}
	return nil
}

// count adds the rows muts wrote to the move's counts and metrics.
func (mv *Mover) count(muts []zen.Mutation, puts, dels *atomic.Int64) {
	for _, m := range muts {
		if m.Delete {
			dels.Add(1)
			mv.met.deleted.Inc()
		} else {
			puts.Add(1)
			mv.met.copied.Inc()
		}
	}
}

// digests sums rows per (table, shard) on the source (side 0) and the target (side 1): a count,
// the bytes, and an order-free checksum (the sum of SHA-256 of each length-prefixed key and
// value, as two 128-bit halves added mod 2^128 each), so rows may be added in any order.
type digests struct {
	mu sync.Mutex
	m  map[digestKey]*digest
}

type digestKey struct {
	table string
	shard uint16
	side  int
}

// digest is one (table, shard, side)'s rows.
type digest struct {
	rows, bytes int64
	sum         [4]uint64
}

func newDigests() *digests { return &digests{m: map[digestKey]*digest{}} }

func (d *digests) add(table string, side int, kv zen.KV) {
	var l [8]byte
	binary.BigEndian.PutUint32(l[:4], uint32(len(kv.Key)))
	binary.BigEndian.PutUint32(l[4:], uint32(len(kv.Value)))
	h := sha256.New()
	h.Write(l[:])
	h.Write(kv.Key)
	h.Write(kv.Value)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	k := digestKey{table: table, shard: uint16(zen.KeyShard(kv.Key)), side: side}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.m[k]
	if g == nil {
		g = &digest{}
		d.m[k] = g
	}
	g.rows++
	g.bytes += int64(len(kv.Key) + len(kv.Value))
	for i := 0; i < 4; i += 2 { // two 128-bit lanes, each with its carry
		lo, c := bits.Add64(g.sum[i+1], binary.BigEndian.Uint64(sum[8*i+8:]), 0)
		hi, _ := bits.Add64(g.sum[i], binary.BigEndian.Uint64(sum[8*i:]), c)
		g.sum[i], g.sum[i+1] = hi, lo
	}
}

// compare checks, per table and shard of the plan, that source and target have the same row
// count and checksum, and returns the source's rows and bytes per shard.
func (d *digests) compare(tables []string, p Plan) ([]ShardStat, error) {
	stats := map[uint16]*ShardStat{}
	var bad []string
	for _, name := range tables {
		for sh := int(p.From); sh <= int(p.To); sh++ {
			s, t := d.m[digestKey{name, uint16(sh), 0}], d.m[digestKey{name, uint16(sh), 1}]
			switch {
			case s == nil && t == nil:
				continue
			case s == nil || t == nil || s.rows != t.rows || s.sum != t.sum:
				bad = append(bad, fmt.Sprintf("%s shard %d (source %d rows, target %d)", name, sh, rowsOf(s), rowsOf(t)))
				continue
			}
			st := stats[uint16(sh)]
			if st == nil {
				st = &ShardStat{Shard: uint16(sh)}
				stats[uint16(sh)] = st
			}
			st.Rows += s.rows
			st.Bytes += s.bytes
		}
	}
	if len(bad) > 0 {
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("and %d more", len(bad)-10))
		}
		return nil, fmt.Errorf("%w: %v", ErrMismatch, bad)
	}
	return sortedStats(stats), nil
}

func rowsOf(d *digest) int64 {
	if d == nil {
		return 0
	}
	return d.rows
}

// cursor reads a table's rows of the plan's range in key order, one batch at a time.
type cursor struct {
	t     zen.Table
	from  []byte // start of the next batch; nil after the last
	stop  []byte
	batch int
	buf   []zen.KV
	pos   int
	done  bool
}

func newCursor(t zen.Table, p Plan, batch int) *cursor {
	start, stop := zen.ShardKeyRange(p.From, p.To)
	if start == nil {
		start = []byte{}
	}
	return &cursor{t: t, from: start, stop: stop, batch: batch}
}

func (c *cursor) peek(ctx context.Context) (zen.KV, bool, error) {
	if c.pos < len(c.buf) {
		return c.buf[c.pos], true, nil
	}
	if c.done {
		return zen.KV{}, false, nil
	}
	kvs, err := c.t.Scan(ctx, zen.ScanOptions{Start: c.from, Stop: c.stop, Limit: c.batch})
	if err != nil {
		return zen.KV{}, false, err
	}
	c.buf, c.pos = kvs, 0
	if len(kvs) < c.batch {
		c.done = true
	}
	if len(kvs) > 0 {
		last := kvs[len(kvs)-1].Key
		c.from = append(append(make([]byte, 0, len(last)+1), last...), 0)
	}
	if len(kvs) == 0 {
		return zen.KV{}, false, nil
	}
	return kvs[0], true, nil
}

func (c *cursor) next() { c.pos++ }
