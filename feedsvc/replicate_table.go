package feedsvc

import (
	"context"

	"github.com/smartfeed/smartfeed/zen"
)

// The Replicator's reads, and the optional extensions of zen.Table it forwards to the primary
// (zentest.RunForwarding, in TestForwardsExtensions, holds it to every one of them).

// Get reads from the primary.
func (r *Replicator) Get(ctx context.Context, key []byte) ([]byte, error) {
	return r.primary.Get(ctx, key)
}

// GetMany reads from the primary, in one call where it can.
func (r *Replicator) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	return zen.GetMany(ctx, r.primary, keys)
}

// Scan reads from the primary; change-log rows are not part of the table.
func (r *Replicator) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	rows, err := r.primary.Scan(ctx, o)
	if err != nil {
		return nil, err
	}
	return withoutLog(rows), nil
}

// ScanMany is zen.MultiScanner's: Scan for each of opts, in one call where the primary can.
func (r *Replicator) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	lists, err := zen.ScanMany(ctx, r.primary, opts)
	if err != nil {
		return nil, err
	}
	for i, rows := range lists {
		lists[i] = withoutLog(rows)
	}
	return lists, nil
}

// withoutLog drops the change-log rows from rows, in place.
func withoutLog(rows []zen.KV) []zen.KV {
	out := rows[:0]
	for _, kv := range rows {
		if !isLogKey(kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}

// CheckAndSetMany is zen.CondBatcher's: the compare-and-sets run on the primary together (in
// one call where it can) between one pending change-log entry naming every key and its commit,
// as CheckAndSet does for one row on a primary that cannot carry the entry. A key in the
// change-log range fails the call before any write.
func (r *Replicator) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	if len(conds) == 0 {
		return nil, nil
	}
	keys := make([][]byte, 0, len(conds))
	seen := make(map[string]bool, len(conds))
	for _, c := range conds {
		if !seen[string(c.Key)] {
			seen[string(c.Key)] = true
			keys = append(keys, c.Key)
		}
	}
	var out []bool
	err := r.logged(ctx, keys, func() (err error) {
		out, err = zen.CheckAndSetMany(ctx, r.primary, conds)
		return err
	})
	return out, err
}
