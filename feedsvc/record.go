package feedsvc

import (
	"context"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// Recording a served chunk: its sequence and the compare-and-set of its pending row.

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
