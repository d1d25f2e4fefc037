package zen

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// maxParallel bounds the concurrent row operations of one call (GetMany, ListEdges, Top,
// Insert): enough to hide round trips to a remote store, few enough to be polite to it.
const maxParallel = 8

// ScanMany runs every scan of opts on t and returns their rows, one list per scan, in order: in
// one call when t is a MultiScanner, else one scan after another (an embedded store answers a
// scan in microseconds; goroutines would cost more than they save).
func ScanMany(ctx context.Context, t Table, opts []ScanOptions) ([][]KV, error) {
	if ms, ok := t.(MultiScanner); ok {
		return ms.ScanMany(ctx, opts)
	}
	out := make([][]KV, len(opts))
	for i, o := range opts {
		rows, err := t.Scan(ctx, o)
		if err != nil {
			return nil, err
		}
		out[i] = rows
	}
	return out, nil
}

// GetMany reads keys from t: in one call when t is a MultiGetter, else by point reads with
// bounded parallelism. The result has one entry per key: nil when the row is absent, the value
// (possibly empty, never nil) when present. The first error other than ErrNotFound is returned.
func GetMany(ctx context.Context, t Table, keys [][]byte) ([][]byte, error) {
	if mg, ok := t.(MultiGetter); ok {
		return mg.GetMany(ctx, keys)
	}
	out := make([][]byte, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallel)
	for i, k := range keys {
		g.Go(func() error {
			v, err := t.Get(gctx, k)
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if v == nil {
				v = []byte{}
			}
			out[i] = v
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckAndSetMany runs the compare-and-sets conds on t and returns, per condition, whether it
// wrote: in one call when t is a CondBatcher (one synced commit on the embedded backend, one
// round of RPCs on HBase), else with one CheckAndSet per condition, in order, so that
// conditions on one key see the value the earlier ones left, as CondBatcher's contract says.
// On an error the results are nil and any subset of the conditions may have been written.
func CheckAndSetMany(ctx context.Context, t Table, conds []Cond) ([]bool, error) {
	if len(conds) == 0 {
		return nil, nil
	}
	if cb, ok := t.(CondBatcher); ok {
		out, err := cb.CheckAndSetMany(ctx, conds)
		if err == nil && len(out) != len(conds) {
			return nil, fmt.Errorf("check-and-set many: %d results for %d conditions", len(out), len(conds))
		}
		return out, err
	}
	out := make([]bool, len(conds))
	for i, c := range conds {
		ok, err := t.CheckAndSet(ctx, c.Key, c.Expected, c.Value)
		if err != nil {
			return nil, fmt.Errorf("check-and-set %x: %w", c.Key, err)
		}
		out[i] = ok
	}
	return out, nil
}

// PrefixEnd returns the smallest key above every key that starts with prefix: the Stop of a
// scan over the prefix. It is nil (no bound) when the prefix is empty or all 0xff.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// keyAfter returns the smallest key strictly above k.
func keyAfter(k []byte) []byte { return append(append(make([]byte, 0, len(k)+1), k...), 0) }
