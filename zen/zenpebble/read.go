package zenpebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"

	"github.com/smartfeed/smartfeed/zen"
)

// getRow is Get, untraced.
func (t *Table) getRow(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.s.enter(ctx); err != nil {
		return nil, err
	}
	defer t.s.life.RUnlock()
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get %s: %w", t.name, err)
	}
	v, err := t.get(key)
	if err != nil && !errors.Is(err, zen.ErrNotFound) {
		return nil, fmt.Errorf("get %s %x: %w", t.name, key, err)
	}
	return v, err
}

func (t *Table) get(key []byte) ([]byte, error) {
	v, closer, err := t.s.db.Get(t.key(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, zen.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	if err := closer.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// scan is Scan, untraced.
func (t *Table) scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if err := t.s.enter(ctx); err != nil {
		return nil, err
	}
	defer t.s.life.RUnlock()
	if o.Limit < 0 {
		return nil, fmt.Errorf("scan %s: negative limit %d", t.name, o.Limit)
	}
	lo, hi := t.prefix, t.end
	if o.Start != nil {
		lo = t.key(o.Start)
	}
	if o.Stop != nil {
		hi = t.key(o.Stop)
	}
	if bytes.Compare(lo, hi) >= 0 {
		return nil, nil
	}
	it, err := t.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", t.name, err)
	}
	var out []zen.KV
	if o.Limit > 0 {
		out = make([]zen.KV, 0, min(o.Limit, 256))
	}
	var slab scanSlab
	var valid bool
	if o.Reverse {
		valid = it.SeekLT(hi)
	} else {
		valid = it.First()
	}
	for ; valid; valid = step(it, o.Reverse) {
		if len(out)%scanCheckEvery == scanCheckEvery-1 {
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return nil, err
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("scan %s: %w", t.name, err)
		}
		out = append(out, zen.KV{Key: slab.clone(it.Key()[len(t.prefix):]), Value: slab.clone(v)})
		if o.Limit > 0 && len(out) >= o.Limit {
			break
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("scan %s: %w", t.name, err)
	}
	return out, nil
}

// scanSlab copies a scan's keys and values into shared blocks, one allocation for many rows
// instead of two a row (a pool upkeep reads thousands). A copy's capacity ends where it does, so
// appending to it never overwrites the next.
// Blocks start small (a page of 50 rows fits in one) and double up to 64 KiB.
type scanSlab struct {
	buf  []byte
	next int
}

// clone returns a copy of b in the slab, never nil.
func (s *scanSlab) clone(b []byte) []byte {
	if len(b) > cap(s.buf)-len(s.buf) || s.buf == nil {
		s.next = min(max(2*s.next, 4<<10), 64<<10)
		s.buf = make([]byte, 0, max(s.next, len(b)))
	}
	n := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[n:len(s.buf):len(s.buf)]
}

func step(it *pebble.Iterator, reverse bool) bool {
	if reverse {
		return it.Prev()
	}
	return it.Next()
}

// getMany is GetMany, untraced.
func (t *Table) getMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	if err := t.s.enter(ctx); err != nil {
		return nil, err
	}
	defer t.s.life.RUnlock()
	out := make([][]byte, len(keys))
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("get many %s: %w", t.name, err)
		}
	}
	if len(keys) < seekManyFrom {
		for i, k := range keys {
			v, err := t.get(k)
			switch {
			case errors.Is(err, zen.ErrNotFound):
			case err != nil:
				return nil, fmt.Errorf("get many %s %x: %w", t.name, k, err)
			default:
				out[i] = v
			}
		}
		return out, nil
	}
	if err := t.seekMany(keys, out); err != nil {
		return nil, fmt.Errorf("get many %s: %w", t.name, err)
	}
	return out, nil
}

// seekMany reads keys through one iterator, seeking them in ascending order: a Get builds an
// iterator over every level for each key, while one iterator's prefix seeks in ascending order
// reuse its position (Pebble seeks onward with Next where it can) and its bloom filter checks,
// so a page of fanout index rows or edge point rows costs a fraction of as many Gets. The reads
// see one snapshot of the table. out[i] receives keys[i]'s value; absent keys stay nil.
func (t *Table) seekMany(keys [][]byte, out [][]byte) error {
	full := make([][]byte, len(keys))
	order := make([]int, len(keys))
	for i, k := range keys {
		full[i] = t.key(k)
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(full[order[a]], full[order[b]]) < 0 })
	lo, hi := full[order[0]], append(bytes.Clone(full[order[len(order)-1]]), 0)
	it, err := t.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	var prev []byte
	var prevVal []byte
	found := false
	for _, i := range order {
		k := full[i]
		if prev != nil && bytes.Equal(prev, k) { // a key asked twice
			if found {
				out[i] = bytes.Clone(prevVal)
			}
			continue
		}
		prev, found, prevVal = k, false, nil
		if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return err
		}
		out[i] = bytes.Clone(v)
		if out[i] == nil {
			out[i] = []byte{}
		}
		found, prevVal = true, out[i]
	}
	return it.Close()
}
