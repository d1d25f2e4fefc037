package feedsvc

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// deletePage is how many rows DeleteFeed reads and deletes per round, so memory stays bounded
// whatever the feed's length.
const deletePage = 1000

// DeleteFeed removes a deleted user's materialized feed: every per-user row (items, pending
// chunks, the pin index, chunk markers, the chunk counter) and the user's rows of the pending
// index, on the primary and, through the replicator, on the standby. It is idempotent, so the
// user-delete job can run it again after a crash part way.
func (s *Service) DeleteFeed(ctx context.Context, user zen.ID) error {
	if err := user.Check(zen.TypeUser); err != nil {
		return fmt.Errorf("%w: delete feed: %v", ErrInvalid, err)
	}
	// Per-user rows first: a pending-index row left behind by a crash between the two steps
	// names a pending row that is gone, and RecoverAll drops such rows.
	userStart := binary.BigEndian.AppendUint64(nil, uint64(user))
	userStop := binary.BigEndian.AppendUint64(nil, uint64(user)+1)
	// The range holds the head version row (headcache.go): once it is gone no process serves a
	// cached head of this feed; this process's is dropped here too.
	err := s.deleteRange(ctx, userStart, userStop)
	s.head.forget(user)
	if err != nil {
		return fmt.Errorf("delete feed of %d: %w", user, err)
	}
	idx := binary.BigEndian.AppendUint64(indexPrefix(user.Shard()), uint64(user))
	if err := s.deleteRange(ctx, idx, zen.PrefixEnd(idx)); err != nil {
		return fmt.Errorf("delete pending index of %d: %w", user, err)
	}
	return nil
}

// deleteRange deletes the primary's rows in [start, stop), a page at a time.
func (s *Service) deleteRange(ctx context.Context, start, stop []byte) error {
	for {
		rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop, Limit: deletePage})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		muts := make([]zen.Mutation, len(rows))
		for i, r := range rows {
			muts[i] = zen.Mutation{Key: r.Key, Delete: true}
		}
		if err := s.primary.Apply(ctx, muts); err != nil {
			return err
		}
		if len(rows) < deletePage {
			return nil
		}
	}
}
