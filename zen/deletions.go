package zen

import (
	"bytes"
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
// after finding the last row), so the rows are contiguous: when no row past v is there, every
// deletion acknowledged so far has a row at or below v. A reader that holds the rows up to v
// therefore knows every deletion acknowledged before it asked for the rows past v, in one read
// (DeletionsAfter). The rows lead with the zero "ID" (no object has it), so they live in shard 0
// and move with it; the tag 'x' is no other counter row's.
//
// The log is bounded by a snapshot (deletionsnap.go): CompactDeletions writes the IDs of rows
// 1..p in a few chunk rows naming p, and then deletes rows 1..p-1. A reader starts from the
// snapshot (DeletionSnapshot) and tails the rows past p. The last row is never deleted (a
// snapshot's rows are trimmed only below its own position), so the appenders always find it.
var deletionLogPrefix = []byte{0, 0, 0, 0, 0, 0, 0, 0, counterDeletions}

// MaxDeletionsPage bounds the rows one DeletionsAfter returns.
const MaxDeletionsPage = 4096

// ErrDeletionsTrimmed is wrapped by DeletionsAfter's error when rows past the position asked for
// were trimmed by a compaction (or may have been): the reader loads DeletionSnapshot, whose
// position is past it, and tails the log from there.
var ErrDeletionsTrimmed = errors.New("zen: deletion log trimmed past the position asked for")

func deletionKey(n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(deletionLogPrefix)+8), deletionLogPrefix...), n)
}

// deletionNumber returns the row number of a deletion log key.
func deletionNumber(k []byte) (uint64, error) {
	if len(k) != len(deletionLogPrefix)+8 {
		return 0, fmt.Errorf("deletion log: malformed row key of %d bytes", len(k))
	}
	return binary.BigEndian.Uint64(k[len(deletionLogPrefix):]), nil
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
	return deletionNumber(rows[0].Key)
}

// logDeletion appends id to the deletion log: it claims the row after the last one, and looks
// for the last row again when another deletion claimed it first.
//
// A row a compaction trimmed is absent again, so an appender that found the last row n before
// rows n+1… were appended, covered by a snapshot and trimmed, could claim row n+1 a second
// time, under a snapshot that does not name id. The snapshot is written before its rows are
// trimmed, so the appender reads the snapshot's position after its claim: at or past its row,
// it appends id again (a deletion logged twice is harmless). Below it, the row is the first of
// its number, and every snapshot that covers it names id.
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
		if !ok {
			continue
		}
		h, err := g.snapshotHeader(ctx)
		if err != nil {
			return fmt.Errorf("deletion log: append %d: %w", id, err)
		}
		if h.pos < n+1 {
			return nil
		}
	}
	return fmt.Errorf("deletion log: append %d: still conflicting after %d attempts", id, maxCASAttempts)
}

// DeletionsAfter returns the IDs of the deletion log's rows after..after+len, in order: up to
// limit (at most MaxDeletionsPage) deletions logged after the first `after` ones. When it
// returns none, no deletion acknowledged before the call is past row `after`. The steady state
// (nothing new) costs one small read: a scan from row after+1 to the snapshot's header, with a
// limit of one row, which finds the header (or nothing).
//
// When rows past `after` were trimmed by a compaction, it returns an error wrapping
// ErrDeletionsTrimmed: load DeletionSnapshot and tail the log from its position. It also does
// when it found rows and a snapshot covers row after+1 or more: such rows may have been trimmed
// and claimed again (see logDeletion), and the snapshot names what they held.
func (g *Graph) DeletionsAfter(ctx context.Context, after uint64, limit int) ([]ID, error) {
	if limit < 1 || limit > MaxDeletionsPage {
		return nil, fmt.Errorf("deletion log: limit %d is not in [1, %d]", limit, MaxDeletionsPage)
	}
	// One read tells "nothing new" from "rows past after" from "trimmed past after": the first
	// row from row after+1 on is that row, a later one (trimmed), or the header (no row past
	// after; trimmed if the header's position is past it).
	probe, err := g.counters.Scan(ctx, ScanOptions{Start: deletionKey(after + 1), Stop: headerStop, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("deletion log: row %d: %w", after+1, err)
	}
	if len(probe) == 0 {
		return nil, nil
	}
	if bytes.Equal(probe[0].Key, snapshotHeaderKey) {
		h, err := decodeHeader(probe[0].Value)
		if err != nil {
			return nil, err
		}
		if h.pos > after {
			return nil, fmt.Errorf("deletion log: a snapshot covers rows up to %d, past %d: %w", h.pos, after, ErrDeletionsTrimmed)
		}
		return nil, nil
	}
	rows, err := g.counters.Scan(ctx, ScanOptions{Start: deletionKey(after + 1), Stop: PrefixEnd(deletionLogPrefix), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("deletion log: rows after %d: %w", after, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("deletion log: rows after %d vanished: %w", after, ErrDeletionsTrimmed)
	}
	out := make([]ID, 0, len(rows))
	for i, kv := range rows {
		n, err := deletionNumber(kv.Key)
		if err != nil {
			return nil, err
		}
		if n != after+1+uint64(i) {
			return nil, fmt.Errorf("deletion log: row %d is absent, row %d is there: %w", after+1+uint64(i), n, ErrDeletionsTrimmed)
		}
		if len(kv.Value) != 8 {
			return nil, fmt.Errorf("deletion log: row %d holds %d bytes, want 8", n, len(kv.Value))
		}
		out = append(out, ID(binary.BigEndian.Uint64(kv.Value)))
	}
	h, err := g.snapshotHeader(ctx)
	if err != nil {
		return nil, fmt.Errorf("deletion log: rows after %d: %w", after, err)
	}
	if h.pos > after {
		return nil, fmt.Errorf("deletion log: a snapshot covers rows up to %d, past %d: %w", h.pos, after, ErrDeletionsTrimmed)
	}
	return out, nil
}
