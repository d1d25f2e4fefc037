package zen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// The deletion log: every Delete of an active object first appends the object's ID to a log in
// the counters table, one row per deletion, numbered from 1 without gaps:
//
//	BE64(0) | 'x' | BE64(n)   → BE64(id)
//
// A deletion claims row n+1 only after it has seen row n (compare-and-set "only if absent"
// after finding the last row), so the rows are contiguous: when row v+1 is absent, every
// deletion acknowledged so far has a row at or below v. A reader that holds the rows up to v
// therefore knows every deletion acknowledged before it asked for row v+1, in one point read
// (DeletionsAfter). The rows lead with the zero "ID" (no object has it), so they live in shard 0
// and move with it; the tag 'x' is no other counter row's.
var deletionLogPrefix = []byte{0, 0, 0, 0, 0, 0, 0, 0, counterDeletions}

// MaxDeletionsPage bounds the rows one DeletionsAfter returns.
const MaxDeletionsPage = 4096

func deletionKey(n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(deletionLogPrefix)+8), deletionLogPrefix...), n)
}

// lastDeletion returns the number of the deletion log's last row (0: none).
func (g *Graph) lastDeletion(ctx context.Context) (uint64, error) {
	rows, err := g.counters.Scan(ctx, ScanOptions{Start: deletionKey(0), Stop: PrefixEnd(deletionLogPrefix), Reverse: true, Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("deletion log: last row: %w", err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	k := rows[0].Key
	if len(k) != len(deletionLogPrefix)+8 {
		return 0, fmt.Errorf("deletion log: malformed row key of %d bytes", len(k))
	}
	return binary.BigEndian.Uint64(k[len(deletionLogPrefix):]), nil
}

// logDeletion appends id to the deletion log: it claims the row after the last one, and looks
// for the last row again when another deletion claimed it first.
func (g *Graph) logDeletion(ctx context.Context, id ID) error {
	v := appendID(make([]byte, 0, 8), id)
	for range maxCASAttempts {
		n, err := g.lastDeletion(ctx)
		if err != nil {
			return err
		}
		ok, err := g.counters.CheckAndSet(ctx, deletionKey(n+1), nil, v)
		if err != nil {
			return fmt.Errorf("deletion log: append %d: %w", id, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("deletion log: append %d: still conflicting after %d attempts", id, maxCASAttempts)
}

// DeletionsAfter returns the IDs of the deletion log's rows after..after+len, in order: up to
// limit (at most MaxDeletionsPage) deletions logged after the first `after` ones. When it
// returns none, no deletion acknowledged before the call is past row `after`. The steady state
// (nothing new) costs one point read of row after+1.
func (g *Graph) DeletionsAfter(ctx context.Context, after uint64, limit int) ([]ID, error) {
	if limit < 1 || limit > MaxDeletionsPage {
		return nil, fmt.Errorf("deletion log: limit %d is not in [1, %d]", limit, MaxDeletionsPage)
	}
	if _, err := g.counters.Get(ctx, deletionKey(after+1)); errors.Is(err, ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("deletion log: row %d: %w", after+1, err)
	}
	rows, err := g.counters.Scan(ctx, ScanOptions{Start: deletionKey(after + 1), Stop: PrefixEnd(deletionLogPrefix), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("deletion log: rows after %d: %w", after, err)
	}
	out := make([]ID, 0, len(rows))
	for i, kv := range rows {
		if len(kv.Key) != len(deletionLogPrefix)+8 || binary.BigEndian.Uint64(kv.Key[len(deletionLogPrefix):]) != after+1+uint64(i) || len(kv.Value) != 8 {
			return nil, fmt.Errorf("deletion log: row %d is not the next one", after+1+uint64(i))
		}
		out = append(out, ID(binary.BigEndian.Uint64(kv.Value)))
	}
	return out, nil
}
