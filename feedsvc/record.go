package feedsvc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// Recording a served chunk before the page answers: the pins already in the feed dropped
// (persist, inFeed), its sequence taken and its pending row written with a compare-and-set
// (record).

// unsureRecording is persist's error when the write of the chunk's pending rows failed without
// an answer: the rows may or may not be in the store.
type unsureRecording struct {
	seq uint64
	err error
}

func (e *unsureRecording) Error() string { return fmt.Sprintf("pending chunk: %v", e.err) }
func (e *unsureRecording) Unwrap() error { return e.err }

// nextSeq returns a chunk sequence: the clock in µs, bumped past the last one this process
// handed out. Sequences order a user's chunks by when they were served with no write of their
// own; record's compare-and-set makes them unique across feed processes.
func (s *Service) nextSeq() uint64 {
	for {
		last := s.lastSeq.Load()
		n := max(uint64(s.now().UnixMicro()), last+1)
		if s.lastSeq.CompareAndSwap(last, n) {
			return n
		}
	}
}

// record writes a served chunk's done marker (pending), pending-index row and pending row
// under a fresh sequence, only if no pending row has that sequence, and returns the sequence.
// On a zen.Carrier primary that is one commit. Otherwise the marker and index row go first: if
// only they land, the chunk reads as never recorded (and is given back), never as pins the feed
// shows but nobody materializes. A sequence another process took is replaced by a fresh one. A
// write that fails without an answer is an *unsureRecording.
func (s *Service) record(ctx context.Context, user zen.ID, chunkID string, pending []byte) (uint64, error) {
	const attempts = 4
	for range attempts {
		seq := s.nextSeq()
		first := []zen.Mutation{
			{Key: doneKey(user, chunkID), Value: encodeMarker(chunkMarker{seq: seq})},
			{Key: pendingIndexKey(user, seq), Value: []byte{}},
		}
		var ok bool
		var err error
		c, isCarrier := s.primary.(zen.Carrier)
		if isCarrier {
			// The head version in the same commit (headChanged).
			ok, err = c.CheckAndSetWith(ctx, pendingKey(user, seq), nil, pending, append(first, s.headBump(user)))
		}
		if !isCarrier || errors.Is(err, errors.ErrUnsupported) {
			if err = s.primary.Apply(ctx, first); err == nil {
				ok, err = s.primary.CheckAndSet(ctx, pendingKey(user, seq), nil, pending)
			}
			if ok || err != nil {
				s.headChanged(ctx, user)
			}
		} else if ok || err != nil {
			s.head.forget(user)
		}
		if err != nil {
			return 0, &unsureRecording{seq: seq, err: err}
		}
		if ok {
			return seq, nil
		}
	}
	return 0, fmt.Errorf("pending chunk: %d sequences taken in a row", attempts)
}

// persist records the served chunk as pending before the user sees it: it drops pins already
// in the feed (pin index) or on this page, takes the chunk's sequence, writes one pending row,
// and enqueues the materialization. It returns the chunk's entries as served.
func (s *Service) persist(ctx context.Context, cfg Config, user zen.ID, c Chunk, page pageRead, fromPrimary, prepared bool) ([]entry, error) {
	if c.ID == "" || len(c.ID) > maxChunkID {
		return nil, fmt.Errorf("chunk id of %d bytes", len(c.ID))
	}
	if len(c.Items) > maxChunkItems {
		return nil, fmt.Errorf("chunk of %d items, at most %d", len(c.Items), maxChunkItems)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.PersistTimeout)
	defer cancel()
	present, err := s.inFeed(ctx, user, c, page, fromPrimary)
	if err != nil {
		return nil, err
	}
	pc := pendingChunk{ChunkID: c.ID, ServedMs: s.now().UnixMilli(), Prepared: prepared}
	if prepared {
		pc.Owner = s.incarnation
	}
	seen := make(map[zen.ID]bool, len(c.Items))
	var out []entry
	for i, it := range c.Items {
		if present[i] || seen[it.Pin] || it.Pin == 0 {
			continue
		}
		seen[it.Pin] = true
		if len(it.Reason) > maxReason {
			it.Reason = it.Reason[:maxReason]
		}
		pc.Items = append(pc.Items, it)
		pc.Pos = append(pc.Pos, uint32(i))
		out = append(out, entry{Item: it})
	}
	seq, err := s.record(ctx, user, c.ID, encodePending(pc))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].at = position{Seq: seq, Pos: pc.Pos[i]}
	}
	if !prepared {
		s.enqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: c.ID, Seq: seq})
	}
	return out, nil
}

// inFeed reports, for each item of c, whether its pin is in user's feed already: on the page
// read (page), in a pending chunk, or in the pin index.
func (s *Service) inFeed(ctx context.Context, user zen.ID, c Chunk, page pageRead, fromPrimary bool) ([]bool, error) {
	// The pins of the user's chunks served but not yet materialized are not in the pin index.
	// The generator offers such a pin again only after a machine crash undid its chunk there
	// (generator.Options.CallerRecords: the pending row is the chunk's durable record). Such a
	// chunk is newer than every materialized one (a materialization settles its chunk with a
	// synced write to the generator's log, which makes the earlier chunks durable there too),
	// so a page read from the primary that went past the pending chunks met it. Otherwise (the
	// standby answered, or the page filled up with pending items) the pending chunks are read
	// from the primary, through their index.
	var onPage map[zen.ID]bool
	if fromPrimary && page.pastPending {
		onPage = make(map[zen.ID]bool, len(page.entries)+len(page.pendingPins))
	} else {
		var err error
		if onPage, err = s.pendingPins(ctx, user); err != nil {
			return nil, fmt.Errorf("pending chunks: %w", err)
		}
	}
	for _, e := range page.entries {
		onPage[e.Pin] = true
	}
	for _, p := range page.pendingPins {
		onPage[p] = true
	}
	// One batched read of the chunk's pins in the pin index, not a goroutine per pin.
	present := make([]bool, len(c.Items))
	var keys [][]byte
	var at []int
	for i, it := range c.Items {
		if onPage[it.Pin] {
			present[i] = true
			continue
		}
		keys = append(keys, pinKey(user, it.Pin))
		at = append(at, i)
	}
	vals, idxErr := zen.GetMany(ctx, s.primary, keys)
	if idxErr != nil {
		return nil, fmt.Errorf("pin index: %w", idxErr)
	}
	for j, i := range at {
		present[i] = vals[j] != nil
	}
	return present, nil
}

// pendingPins returns the pins of the user's pending chunks (served, not yet materialized), found
// through the pending-chunk index: usually none or one chunk.
func (s *Service) pendingPins(ctx context.Context, user zen.ID) (map[zen.ID]bool, error) {
	prefix := binary.BigEndian.AppendUint64(indexPrefix(user.Shard()), uint64(user))
	rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix), Limit: maxPendingChecked})
	if err != nil {
		return nil, err
	}
	pins := make(map[zen.ID]bool)
	if len(rows) == 0 {
		return pins, nil
	}
	keys := make([][]byte, 0, len(rows))
	for _, kv := range rows {
		if u, seq, ok := indexRow(user.Shard(), kv.Key); ok && u == user {
			keys = append(keys, pendingKey(user, seq))
		}
	}
	vals, err := zen.GetMany(ctx, s.primary, keys)
	if err != nil {
		return nil, err
	}
	for _, v := range vals {
		if v == nil {
			continue // materialized: its pins are in the pin index
		}
		pc, err := decodePending(v)
		if err != nil {
			return nil, err
		}
		for _, it := range pc.Items {
			pins[it.Pin] = true
		}
	}
	return pins, nil
}

// maxPendingChecked bounds the pending chunks pendingPins reads. A user has one or two unless
// materialization is down; past the bound, the pin index and Materialize still keep each pin
// once in the feed.
const maxPendingChecked = 64
