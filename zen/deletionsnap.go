package zen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The deletion log's snapshot: the IDs of rows 1..p, sorted and without repeats, delta-encoded
// (uvarints) in chunk rows of at most maxSnapshotChunk bytes, and a header naming p:
//
//	BE64(0) | 'y' | 0x00                       → BE64(p) | BE32(chunks) | BE64(ids)
//	BE64(0) | 'y' | 0x01 | BE64(p) | BE32(i)   → chunk i of the snapshot at p
//
// CompactDeletions writes a new snapshot's chunks first, under its own position, then moves the
// header to it with a compare-and-set from the header it started from (so two compactions
// cannot both win, and the position only grows), then trims the log's rows below the position
// and the chunks of older snapshots. A reader that read an older header and finds its chunks
// gone reads the header again. A compaction that dies part-way leaves chunks no header names,
// or rows the header covers; the next compaction deletes both.
var (
	snapshotHeaderKey   = []byte{0, 0, 0, 0, 0, 0, 0, 0, counterDeletionSnapshot, 0}
	headerStop          = []byte{0, 0, 0, 0, 0, 0, 0, 0, counterDeletionSnapshot, 0, 0} // just past the header
	snapshotChunkPrefix = []byte{0, 0, 0, 0, 0, 0, 0, 0, counterDeletionSnapshot, 1}
)

// maxSnapshotChunk bounds the bytes of one chunk row of a deletion snapshot.
const maxSnapshotChunk = 256 << 10

// snapshotHeader is the decoded header of the deletion log's snapshot; the zero value is "no
// snapshot" (position 0).
type snapshotHeader struct {
	pos    uint64
	chunks uint32
	ids    uint64
	raw    []byte // as stored; nil when absent
}

func (h snapshotHeader) encode() []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 20), h.pos)
	b = binary.BigEndian.AppendUint32(b, h.chunks)
	return binary.BigEndian.AppendUint64(b, h.ids)
}

func snapshotChunkKey(pos uint64, i uint32) []byte {
	k := binary.BigEndian.AppendUint64(append(make([]byte, 0, len(snapshotChunkPrefix)+12), snapshotChunkPrefix...), pos)
	return binary.BigEndian.AppendUint32(k, i)
}

// snapshotHeader reads the snapshot's header. It reads with a scan, as every read of the log
// and its snapshot does: a read-through cache of point reads (zencache caches the counters
// table's point reads, not its scans) could answer with a header older than a compaction made
// past the cache, and the appenders and readers rely on seeing the latest (logDeletion).
func (g *Graph) snapshotHeader(ctx context.Context) (snapshotHeader, error) {
	rows, err := g.counters.Scan(ctx, ScanOptions{Start: snapshotHeaderKey, Stop: headerStop, Limit: 1})
	if err != nil {
		return snapshotHeader{}, fmt.Errorf("deletion snapshot: header: %w", err)
	}
	if len(rows) == 0 {
		return snapshotHeader{}, nil
	}
	return decodeHeader(rows[0].Value)
}

func decodeHeader(v []byte) (snapshotHeader, error) {
	if len(v) != 20 {
		return snapshotHeader{}, fmt.Errorf("deletion snapshot: header of %d bytes, want 20", len(v))
	}
	return snapshotHeader{pos: binary.BigEndian.Uint64(v), chunks: binary.BigEndian.Uint32(v[8:]),
		ids: binary.BigEndian.Uint64(v[12:]), raw: v}, nil
}

// DeletionSnapshot returns the deletion log's snapshot: the position p it covers and the IDs of
// the log's rows 1..p, sorted, without repeats (p = 0 and none when the log was never
// compacted). A reader then tails the log with DeletionsAfter(p, …). It reads the header and
// the snapshot's chunks, a few rows however many deletions it names.
func (g *Graph) DeletionSnapshot(ctx context.Context) (uint64, []ID, error) {
	for range maxCASAttempts {
		h, err := g.snapshotHeader(ctx)
		if err != nil || h.raw == nil {
			return 0, nil, err
		}
		ids, ok, err := g.readSnapshot(ctx, h)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			return h.pos, ids, nil
		}
		// A newer compaction deleted the chunks meanwhile: its header is there now.
	}
	return 0, nil, fmt.Errorf("deletion snapshot: chunks replaced %d times while reading", maxCASAttempts)
}

// readSnapshot reads and decodes the chunks of the snapshot h names; ok is false when some are
// missing (deleted by a newer compaction).
func (g *Graph) readSnapshot(ctx context.Context, h snapshotHeader) ([]ID, bool, error) {
	if h.chunks == 0 {
		if h.ids != 0 {
			return nil, false, fmt.Errorf("deletion snapshot at %d: no chunks for %d IDs", h.pos, h.ids)
		}
		return nil, true, nil
	}
	rows, err := g.counters.Scan(ctx, ScanOptions{Start: snapshotChunkKey(h.pos, 0),
		Stop: snapshotChunkKey(h.pos+1, 0), Limit: int(h.chunks)})
	if err != nil {
		return nil, false, fmt.Errorf("deletion snapshot at %d: chunks: %w", h.pos, err)
	}
	if len(rows) != int(h.chunks) {
		return nil, false, nil
	}
	ids := make([]ID, 0, h.ids)
	for i, kv := range rows {
		if !slices.Equal(kv.Key, snapshotChunkKey(h.pos, uint32(i))) {
			return nil, false, nil
		}
		if ids, err = decodeChunk(ids, kv.Value); err != nil {
			return nil, false, fmt.Errorf("deletion snapshot at %d: chunk %d: %w", h.pos, i, err)
		}
	}
	if uint64(len(ids)) != h.ids {
		return nil, false, fmt.Errorf("deletion snapshot at %d: %d IDs in the chunks, the header says %d", h.pos, len(ids), h.ids)
	}
	return ids, true, nil
}

// encodeChunks delta-encodes sorted, distinct ids into chunks of at most maxSnapshotChunk bytes;
// each chunk's first ID is encoded whole.
func encodeChunks(ids []ID) [][]byte {
	var chunks [][]byte
	var cur []byte
	var prev uint64
	for _, id := range ids {
		if len(cur)+binary.MaxVarintLen64 > maxSnapshotChunk {
			chunks, cur, prev = append(chunks, cur), nil, 0
		}
		cur = binary.AppendUvarint(cur, uint64(id)-prev)
		prev = uint64(id)
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	return chunks
}

// decodeChunk appends a chunk's IDs to ids.
func decodeChunk(ids []ID, b []byte) ([]ID, error) {
	var prev uint64
	for first := true; len(b) > 0; first = false {
		d, n := binary.Uvarint(b)
		if n <= 0 || !first && d == 0 {
			return nil, errors.New("malformed delta")
		}
		prev += d
		ids = append(ids, ID(prev))
		b = b[n:]
	}
	return ids, nil
}

// CompactDeletions folds the deletion log into its snapshot: the snapshot's IDs and the rows
// past it become a new snapshot at the log's last row (when at least minRows rows are past
// the snapshot; minRows ≥ 1), and the rows below that position and the older snapshots'
// chunks are deleted. It returns the position of the snapshot in place when it ends (its own,
// or a concurrent compaction's when that one won). Deletions logged meanwhile are past the new
// position, or named by the snapshot: none is lost (see logDeletion and DeletionsAfter).
func (g *Graph) CompactDeletions(ctx context.Context, minRows int) (uint64, error) {
	minRows = max(minRows, 1)
	for range maxCASAttempts {
		h, err := g.snapshotHeader(ctx)
		if err != nil {
			return 0, err
		}
		tail, err := g.deletionsAfter(ctx, h.pos)
		if errors.Is(err, ErrDeletionsTrimmed) {
			continue // a concurrent compaction moved the snapshot
		}
		if err != nil {
			return 0, err
		}
		if len(tail) < minRows {
			return h.pos, g.trimDeletions(ctx, h.pos)
		}
		ids, ok, err := g.readSnapshot(ctx, h)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue // a concurrent compaction deleted its chunks
		}
		ids = append(ids, tail...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		next := snapshotHeader{pos: h.pos + uint64(len(tail)), ids: uint64(len(ids))}
		chunks := encodeChunks(ids)
		next.chunks = uint32(len(chunks))
		if err := g.writeChunks(ctx, next.pos, chunks); err != nil {
			return 0, err
		}
		ok, err = g.counters.CheckAndSet(ctx, snapshotHeaderKey, h.raw, next.encode())
		if err != nil {
			return 0, fmt.Errorf("deletion snapshot at %d: header: %w", next.pos, err)
		}
		if !ok {
			continue // another compaction won; its header is read again
		}
		return next.pos, g.trimDeletions(ctx, next.pos)
	}
	return 0, fmt.Errorf("deletion snapshot: still conflicting after %d attempts", maxCASAttempts)
}

// deletionsAfter reads every row of the log past after.
func (g *Graph) deletionsAfter(ctx context.Context, after uint64) ([]ID, error) {
	var all []ID
	for {
		page, err := g.DeletionsAfter(ctx, after+uint64(len(all)), MaxDeletionsPage)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < MaxDeletionsPage {
			return all, nil
		}
	}
}

// writeChunks writes a snapshot's chunks at pos, a few to a batch.
func (g *Graph) writeChunks(ctx context.Context, pos uint64, chunks [][]byte) error {
	const perBatch = 8
	for i := 0; i < len(chunks); i += perBatch {
		var muts []Mutation
		for j := i; j < min(i+perBatch, len(chunks)); j++ {
			muts = append(muts, Mutation{Key: snapshotChunkKey(pos, uint32(j)), Value: chunks[j]})
		}
		if err := g.counters.Apply(ctx, muts); err != nil {
			return fmt.Errorf("deletion snapshot at %d: chunks: %w", pos, err)
		}
	}
	return nil
}

// trimDeletions deletes the log's rows below pos (the snapshot at pos names their IDs; row pos
// stays: it may be the last) and the chunks of snapshots older than pos.
func (g *Graph) trimDeletions(ctx context.Context, pos uint64) error {
	if pos <= 1 {
		return nil
	}
	for _, r := range []ScanOptions{
		{Start: deletionKey(1), Stop: deletionKey(pos), Limit: MaxDeletionsPage},
		{Start: snapshotChunkKey(0, 0), Stop: snapshotChunkKey(pos, 0), Limit: 16},
	} {
		for {
			rows, err := g.counters.Scan(ctx, r)
			if err != nil {
				return fmt.Errorf("deletion log: trim below %d: %w", pos, err)
			}
			if len(rows) == 0 {
				break
			}
			muts := make([]Mutation, len(rows))
			for i, kv := range rows {
				muts[i] = Mutation{Key: kv.Key, Delete: true}
			}
			if err := g.counters.Apply(ctx, muts); err != nil {
				return fmt.Errorf("deletion log: trim below %d: %w", pos, err)
			}
		}
	}
	return nil
}
