package zenroute

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/zen"
)

// Table is one shard-keyed table routed over the stores. It implements zen.Table,
// zen.MultiGetter, zen.MultiScanner, zen.CondBatcher and zen.Carrier (within one store).
type Table struct {
	s     *Store
	name  string
	inner map[string]zen.Table
}

var (
	_ zen.Table       = (*Table)(nil)
	_ zen.MultiGetter = (*Table)(nil)
	_ zen.CondBatcher = (*Table)(nil)
	_ zen.Carrier     = (*Table)(nil)
)

// Inner returns this table on the named store (for the mover and for tests), or false.
func (t *Table) Inner(store string) (zen.Table, bool) {
	it, ok := t.inner[store]
	return it, ok
}

func (t *Table) at(m *zen.ShardMap, key []byte) zen.Table { return t.inner[rangeOf(m, key).Store] }

// Get reads key from its shard's store (a fenced shard is read from the store it is leaving).
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	return t.at(t.s.Shards(), key).Get(ctx, key)
}

// GetMany reads keys from their stores, one batch per store.
func (t *Table) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	m := t.s.Shards()
	groups, order := group(m, keys, func(k []byte) []byte { return k })
	out := make([][]byte, len(keys))
	for _, name := range order {
		idx := groups[name]
		sub := make([][]byte, len(idx))
		for j, i := range idx {
			sub[j] = keys[i]
		}
		vals, err := zen.GetMany(ctx, t.inner[name], sub)
		if err != nil {
			return nil, err
		}
		for j, i := range idx {
			out[i] = vals[j]
		}
	}
	return out, nil
}

// group returns, per store, the indexes of items whose key it holds (in input order), and the
// stores in order of first appearance.
func group[T any](m *zen.ShardMap, items []T, key func(T) []byte) (map[string][]int, []string) {
	g := map[string][]int{}
	var order []string
	for i, it := range items {
		n := rangeOf(m, key(it)).Store
		if _, ok := g[n]; !ok {
			order = append(order, n)
		}
		g[n] = append(g[n], i)
	}
	return g, order
}

// Apply writes muts, one batch per store (each atomic as its store makes it).
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	keys := make([][]byte, len(muts))
	for i, mu := range muts {
		keys[i] = mu.Key
	}
	st, err := t.s.acquire(ctx, keys)
	if err != nil {
		return err
	}
	defer st.release()
	groups, order := group(st.m, muts, func(mu zen.Mutation) []byte { return mu.Key })
	if len(order) == 1 {
		return t.s.settled(t.inner[order[0]].Apply(ctx, muts))
	}
	for _, name := range order {
		sub := make([]zen.Mutation, 0, len(groups[name]))
		for _, i := range groups[name] {
			sub = append(sub, muts[i])
		}
		if err := t.inner[name].Apply(ctx, sub); err != nil {
			return fmt.Errorf("store %s: %w", name, err)
		}
	}
	return t.s.settled(nil)
}

// CheckAndSet runs on the key's store.
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	st, err := t.s.acquire(ctx, [][]byte{key})
	if err != nil {
		return false, err
	}
	defer st.release()
	ok, err := t.at(st.m, key).CheckAndSet(ctx, key, expected, value)
	if err = t.s.settled(err); err != nil {
		return false, err
	}
	return ok, nil
}

// Increment runs on the key's store.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	st, err := t.s.acquire(ctx, [][]byte{key})
	if err != nil {
		return 0, err
	}
	defer st.release()
	n, err := t.at(st.m, key).Increment(ctx, key, delta)
	if err = t.s.settled(err); err != nil {
		return 0, err
	}
	return n, nil
}

// carrierFor returns the store's table as a zen.Carrier when key and every extra row live on the
// same store and it can carry them; else an error wrapping errors.ErrUnsupported.
func (t *Table) carrierFor(m *zen.ShardMap, key []byte, extra []zen.Mutation) (zen.Carrier, error) {
	name := rangeOf(m, key).Store
	for _, e := range extra {
		if o := rangeOf(m, e.Key).Store; o != name {
			return nil, fmt.Errorf("zenroute: %s: extra row on store %s, key on store %s: %w", t.name, o, name, errors.ErrUnsupported)
		}
	}
	c, ok := t.inner[name].(zen.Carrier)
	if !ok {
		return nil, fmt.Errorf("zenroute: %s on store %s carries no extra rows: %w", t.name, name, errors.ErrUnsupported)
	}
	return c, nil
}

func withExtra(key []byte, extra []zen.Mutation) [][]byte {
	keys := make([][]byte, 0, 1+len(extra))
	keys = append(keys, key)
	for _, e := range extra {
		keys = append(keys, e.Key)
	}
	return keys
}

// CheckAndSetWith runs on the key's store when the extra rows live there too.
func (t *Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	st, err := t.s.acquire(ctx, withExtra(key, extra))
	if err != nil {
		return false, err
	}
	defer st.release()
	c, err := t.carrierFor(st.m, key, extra)
	if err != nil {
		return false, err
	}
	ok, err := c.CheckAndSetWith(ctx, key, expected, value, extra)
	if err = t.s.settled(err); err != nil {
		return false, err
	}
	return ok, nil
}

// IncrementWith runs on the key's store when the extra rows live there too.
func (t *Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	st, err := t.s.acquire(ctx, withExtra(key, extra))
	if err != nil {
		return 0, err
	}
	defer st.release()
	c, err := t.carrierFor(st.m, key, extra)
	if err != nil {
		return 0, err
	}
	n, err := c.IncrementWith(ctx, key, delta, extra)
	if err = t.s.settled(err); err != nil {
		return 0, err
	}
	return n, nil
}

// CheckAndSetMany runs the elements on their stores, one batch per store; elements on one key
// are on one store, so their order is kept.
func (t *Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	keys := make([][]byte, len(conds))
	for i, c := range conds {
		keys[i] = c.Key
	}
	st, err := t.s.acquire(ctx, keys)
	if err != nil {
		return nil, err
	}
	defer st.release()
	groups, order := group(st.m, conds, func(c zen.Cond) []byte { return c.Key })
	out := make([]bool, len(conds))
	for _, name := range order {
		sub := make([]zen.Cond, 0, len(groups[name]))
		for _, i := range groups[name] {
			sub = append(sub, conds[i])
		}
		res, err := zen.CheckAndSetMany(ctx, t.inner[name], sub)
		if err != nil {
			return nil, err
		}
		for j, i := range groups[name] {
			out[i] = res[j]
		}
	}
	if err := t.s.settled(nil); err != nil {
		return nil, err
	}
	return out, nil
}

// Scan reads the range from each store holding part of it, in key order (or reverse), and stops
// at the limit.
func (t *Table) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	parts := scanParts(t.s.cur.Load().segs, o)
	if len(parts) == 1 {
		return t.inner[parts[0].store].Scan(ctx, zen.ScanOptions{Start: parts[0].start, Stop: parts[0].stop, Reverse: o.Reverse, Limit: o.Limit})
	}
	if o.Reverse {
		slices.Reverse(parts)
	}
	var out []zen.KV
	for _, p := range parts {
		left := 0
		if o.Limit > 0 {
			left = o.Limit - len(out)
			if left <= 0 {
				break
			}
		}
		kvs, err := t.inner[p.store].Scan(ctx, zen.ScanOptions{Start: p.start, Stop: p.stop, Reverse: o.Reverse, Limit: left})
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", p.store, err)
		}
		out = append(out, kvs...)
	}
	return out, nil
}

// scanParts is o's range cut along segs: one part per segment it overlaps, in key order.
func scanParts(segs []segment, o zen.ScanOptions) []segment {
	var parts []segment
	for _, sg := range segs {
		start, stop := maxStart(o.Start, sg.start), minStop(o.Stop, sg.stop)
		if stop != nil && start != nil && bytes.Compare(start, stop) >= 0 {
			continue
		}
		parts = append(parts, segment{start: start, stop: stop, store: sg.store})
	}
	return parts
}

var _ zen.MultiScanner = (*Table)(nil)

// ScanMany returns what Scan returns for each of opts. The scans whose range lies on one store
// go to that store together (zen.ScanMany: at once when the store can, as HBase does), so a
// user's pools, all on the user's shard, read in about one round trip behind the router too;
// a scan across stores runs as Scan.
func (t *Table) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	segs := t.s.cur.Load().segs
	out := make([][]zen.KV, len(opts))
	byStore := map[string][]int{}
	clipped := make([]zen.ScanOptions, len(opts))
	var order []string
	for i, o := range opts {
		parts := scanParts(segs, o)
		if len(parts) != 1 {
			kvs, err := t.Scan(ctx, o)
			if err != nil {
				return nil, err
			}
			out[i] = kvs
			continue
		}
		p := parts[0]
		clipped[i] = zen.ScanOptions{Start: p.start, Stop: p.stop, Reverse: o.Reverse, Limit: o.Limit}
		if _, ok := byStore[p.store]; !ok {
			order = append(order, p.store)
		}
		byStore[p.store] = append(byStore[p.store], i)
	}
	for _, store := range order {
		idx := byStore[store]
		sub := make([]zen.ScanOptions, len(idx))
		for j, i := range idx {
			sub[j] = clipped[i]
		}
		pages, err := zen.ScanMany(ctx, t.inner[store], sub)
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", store, err)
		}
		for j, i := range idx {
			out[i] = pages[j]
		}
	}
	return out, nil
}

// maxStart is the higher of two start bounds (nil = the lowest key).
func maxStart(a, b []byte) []byte {
	if a == nil || (b != nil && bytes.Compare(b, a) > 0) {
		return b
	}
	return a
}

// minStop is the lower of two stop bounds (nil = past the highest key).
func minStop(a, b []byte) []byte {
	if a == nil || (b != nil && bytes.Compare(b, a) < 0) {
		return b
	}
	return a
}
