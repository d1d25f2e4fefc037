package feedsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Liveness tells which pins may still be served: deleted (soft-deleted or absent) pins are not
// live. cmd wires it to one batched zen.Graph.GetMany.
type Liveness interface {
	// Live returns the live pins among pins (true); a pin missing from the map is not live.
	Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error)
}

// Activity records that a user is reading their feed. cmd wires the worker's Touch: it keeps
// the user's last-active time (fanout skips users inactive for long) and reports whether the
// user's pools are being rebuilt after a long absence.
type Activity interface {
	Touch(ctx context.Context, user zen.ID) (rebuilding bool, err error)
}

// Defaults of the Deps bounds.
const (
	DefaultLiveTimeout  = 100 * time.Millisecond
	DefaultActivityWait = 20 * time.Millisecond
	// activityTimeout bounds one Touch running in the background.
	activityTimeout = 2 * time.Second
	// maxLiveRereads bounds the extra reads of one page that replace deleted items.
	maxLiveRereads = 3
)

// noRebuildSignal marks an Activity that never reports a rebuild (PinlaterActivity): pages do
// not wait for its answer.
type noRebuildSignal interface{ noRebuildSignal() }

// touch starts the Activity hook for user in the background and returns a function that waits
// for its answer until the request's wait bound (measured from now) and reports rebuilding.
// The hook is best-effort: its errors are logged and read as "not rebuilding", and a slow hook
// finishes in the background without holding the page.
func (s *Service) touch(user zen.ID) func() bool {
	if s.activity == nil {
		return func() bool { return false }
	}
	age, known := s.activeAge(user)
	if known && age < activityFresh/2 {
		// The hook said "not rebuilding" for this user moments ago, and a rebuild starts only
		// when a user comes back after a long absence: neither call it again nor wait for it.
		// The last-active time it keeps is written once a minute at most (the worker's
		// TouchEvery), so these pages have nothing to add to it. In the second half of
		// activityFresh the hook is called again, without waiting, to renew the answer.
		s.m.activitySkipped.Inc()
		return func() bool { return false }
	}
	_, blind := s.activity.(noRebuildSignal)
	ch := make(chan bool, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), activityTimeout)
		defer cancel()
		r, err := s.activity.Touch(ctx, user)
		if err != nil {
			s.m.activityErrors.Inc()
			s.log.Debug("activity touch", zap.Stringer("user", user), zap.Error(err))
		}
		if err == nil && !r {
			s.noteActive(user)
		} else {
			s.active.forget(user)
		}
		ch <- r && err == nil
	}()
	if blind || known && age < activityFresh {
		// The hook never reports a rebuild (it goes over a queue), or its last "not
		// rebuilding" still stands: the page does not wait.
		return func() bool { return false }
	}
	deadline := time.NewTimer(s.activityWait)
	return func() bool {
		defer deadline.Stop()
		select {
		case r := <-ch:
			return r
		case <-deadline.C:
			s.m.activityLate.Inc()
			return false
		}
	}
}

// activityFresh is how long a "not rebuilding" answer of the activity hook stands for the
// user's next pages: they do not wait for the hook, and in its first half they do not call it
// either. maxActiveUsers bounds the users remembered (past it they are forgotten, which only
// makes their next pages wait for the hook again).
const (
	activityFresh  = 10 * time.Second
	maxActiveUsers = 100_000
)

// activeAge reports how long ago the activity hook last answered "not rebuilding" for user
// (false: not since it was last forgotten).
func (s *Service) activeAge(user zen.ID) (time.Duration, bool) {
	at, ok := s.active.get(user)
	if !ok {
		return 0, false
	}
	return s.now().Sub(time.UnixMilli(at)), true
}

func (s *Service) noteActive(user zen.ID) { s.active.set(user, s.now().UnixMilli()) }

// filterLive drops the items of res whose pins are no longer live, reading further (after the
// last item read) to fill the page again, at most maxLiveRereads times. The cursor stays
// correct: the page's next cursor is the position of its last item, or the last position read
// when every item read was deleted, so no live item is skipped and none repeats.
//
// A Liveness error (or its timeout, Deps.LiveTimeout) serves the page unfiltered (fail open):
// the materialized feed held only live pins when its chunks were generated, and a feed page
// that fails for want of the graph would break "degrade, don't fail". It is counted
// (smartfeed_feed_liveness_errors_total) and logged.
func (s *Service) filterLive(ctx context.Context, user zen.ID, res pageRead, size int) (pageRead, error) {
	if s.live == nil {
		return res, nil
	}
	out := pageRead{stale: res.stale, pendingPins: res.pendingPins, pastPending: res.pastPending, prepared: res.prepared}
	out.entries = make([]entry, 0, len(res.entries))
	for round := 0; ; round++ {
		if len(res.entries) > 0 {
			live, err := s.liveOf(withReader(ctx, user), res.entries)
			if err != nil {
				s.m.liveErrors.Inc()
				s.log.Warn("liveness check; serving unfiltered", zap.Stringer("user", user), zap.Error(err))
				out.entries = append(out.entries, res.entries...)
				out.more = res.more
				return out, nil
			}
			for _, e := range res.entries {
				if live[e.Pin] {
					out.entries = append(out.entries, e)
				} else {
					s.m.deletedSkipped.Inc()
				}
			}
			last := res.entries[len(res.entries)-1].at
			out.consumed = &last
		}
		out.more = res.more
		if !res.more || len(out.entries) >= size || round >= maxLiveRereads {
			return out, nil
		}
		next, _, err := s.readRaw(ctx, user, out.consumed, size-len(out.entries))
		if err != nil {
			// What was read is served; the cursor lets the client go on from there.
			out.more = true
			return out, nil
		}
		out.stale = append(out.stale, next.stale...)
		out.pendingPins = append(out.pendingPins, next.pendingPins...)
		out.pastPending = out.pastPending || next.pastPending
		res = next
	}
}

// liveOf asks Liveness about the entries' pins, bounded by the live timeout.
func (s *Service) liveOf(ctx context.Context, es []entry) (map[zen.ID]bool, error) {
	start := time.Now()
	defer func() { s.m.observeStage(stagePinsLive, time.Since(start)) }()
	ctx, cancel := context.WithTimeout(ctx, s.liveTimeout)
	defer cancel()
	pins := make([]zen.ID, len(es))
	for i, e := range es {
		pins[i] = e.Pin
	}
	return s.live.Live(ctx, pins)
}

// Pending-chunk index of the "feed" table, one row per pending row, written just before it and
// deleted with it (Materialize):
//
//	base(8) | 'q' | user(8) | seq(8)    (empty value), base = BE64(uint64(user.Shard())<<46)
//
// It lets RecoverAll find the users with pending chunks without scanning every feed. The rows
// of a shard sit in that shard's region (base is the type-0 "ID" that sorts before every real
// ID of the shard), so index writes spread across regions like the feed rows themselves.
const (
	prefixPendingIndex = 'q'
	indexKeyLen        = 8 + 1 + 8 + 8
	// DefaultIndexShards is the number of shards RecoverAll walks when Deps.IndexShards is 0:
	// the shards of the default shard map (zen.DefaultShardMap, 0–4095).
	DefaultIndexShards = 4096
	// maxIndexShards is every shard a zen.ID can name.
	maxIndexShards = zen.MaxShard + 1
)

// shardBase returns the first 8 bytes of the pending index rows of shard: BE64(shard<<46).
func shardBase(shard uint16) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, indexKeyLen), uint64(shard)<<46)
}

// indexPrefix returns base(8) | 'q' of shard: the start of the shard's pending index range.
func indexPrefix(shard uint16) []byte { return append(shardBase(shard), prefixPendingIndex) }

func pendingIndexKey(user zen.ID, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(indexPrefix(user.Shard()), uint64(user))
	return binary.BigEndian.AppendUint64(k, seq)
}

// indexRow splits a pending index key of shard: the user and the sequence. ok is false for a
// key that is not one (wrong length, or a user of another shard).
func indexRow(shard uint16, k []byte) (user zen.ID, seq uint64, ok bool) {
	if len(k) != indexKeyLen || k[8] != prefixPendingIndex {
		return 0, 0, false
	}
	user = zen.ID(binary.BigEndian.Uint64(k[9:17]))
	if user.Shard() != shard || !bytes.Equal(k[:8], shardBase(shard)) {
		return 0, 0, false
	}
	return user, binary.BigEndian.Uint64(k[17:]), true
}

// RecoverAll completes the pending chunks served more than olderThan ago (whose materialize job
// was lost) named by up to limit pending-index rows after user `after` (0: from the start), and
// those rows' users' further rows, and drops index rows whose pending row is gone. Each chunk
// costs a point read of its pending row; a chunk younger than olderThan costs nothing more. The index is kept per shard, so it
// walks the shards in order from the shard of `after` to the last one of Deps.IndexShards
// (default DefaultIndexShards), one scan per shard, until it has read limit rows. It returns
// the last user it looked at (0 when it reached the end of the index: start again from 0 next
// time) and the number of chunks it completed. A startup pass loops until next is 0; a periodic
// sweep does the same. A pass over an empty index costs one (empty) scan per shard.
func (s *Service) RecoverAll(ctx context.Context, after zen.ID, olderThan time.Duration, limit int) (next zen.ID, n int, err error) {
	return s.recoverAll(ctx, after, olderThan, limit, 0)
}

// recoverAll is RecoverAll with at least pace between two shards' scans (0: none), so that a
// periodic pass over thousands of mostly empty shards is a trickle of reads on the store, not a
// burst of thousands at once (on HBase each scan is a region server call).
func (s *Service) recoverAll(ctx context.Context, after zen.ID, olderThan time.Duration, limit int, pace time.Duration) (next zen.ID, n int, err error) {
	if limit < 1 || limit > 100000 {
		return 0, 0, fmt.Errorf("%w: limit %d is not in [1, 100000]", ErrInvalid, limit)
	}
	if after > zen.MaxID {
		return 0, 0, fmt.Errorf("%w: user %d is not an ID", ErrInvalid, uint64(after))
	}
	read := 0
	cut := s.now().Add(-olderThan).UnixMilli()
	var users []zen.ID
	var tick *time.Ticker
	if pace > 0 {
		tick = time.NewTicker(pace)
		defer tick.Stop()
	}
	for shard := int(after.Shard()); shard < s.indexShards && read < limit; shard++ {
		if tick != nil && shard > int(after.Shard()) {
			select {
			case <-ctx.Done():
				return after, n, ctx.Err()
			case <-tick.C:
			}
		}
		prefix := indexPrefix(uint16(shard))
		start := prefix
		if after != 0 && shard == int(after.Shard()) {
			start = binary.BigEndian.AppendUint64(bytes.Clone(prefix), uint64(after)+1)
		}
		rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(prefix), Limit: limit - read})
		if err != nil {
			return after, n, fmt.Errorf("scan pending index of shard %d: %w", shard, err)
		}
		read += len(rows)
		for _, kv := range rows {
			if u, _, ok := indexRow(uint16(shard), kv.Key); ok && (len(users) == 0 || users[len(users)-1] != u) {
				users = append(users, u)
			}
		}
		k, err := s.recoverIndexRows(ctx, uint16(shard), rows, cut)
		n += k
		if err != nil {
			return after, n, err
		}
		if read >= limit && len(users) > 0 {
			// The rows may end inside the last user's, and the next call starts after that user:
			// finish them.
			last := users[len(users)-1]
			_, seq, _ := indexRow(uint16(shard), rows[len(rows)-1].Key)
			k, err := s.recoverIndexOf(ctx, last, seq+1, cut)
			n += k
			if err != nil {
				return after, n, err
			}
		}
	}
	if read < limit || len(users) == 0 {
		return 0, n, nil
	}
	return users[len(users)-1], n, nil
}

// recoverIndexRows recovers the chunks named by rows, pending-index rows of shard
// (recoverIndexed), and drops those whose pending row is gone.
func (s *Service) recoverIndexRows(ctx context.Context, shard uint16, rows []zen.KV, cutMs int64) (int, error) {
	n := 0
	var orphans []zen.Mutation
	for _, kv := range rows {
		u, seq, ok := indexRow(shard, kv.Key)
		if !ok {
			continue
		}
		done, err := s.recoverIndexed(ctx, u, seq, cutMs)
		n += done
		switch {
		case errors.Is(err, zen.ErrNotFound):
			orphans = append(orphans, zen.Mutation{Key: bytes.Clone(kv.Key), Delete: true})
		case err != nil:
			return n, err
		}
	}
	if len(orphans) > 0 {
		if err := s.primary.Apply(ctx, orphans); err != nil {
			return n, fmt.Errorf("drop stale pending index rows of shard %d: %w", shard, err)
		}
	}
	return n, nil
}

// recoverIndexOf recovers the chunks of user's pending-index rows from sequence seq on.
func (s *Service) recoverIndexOf(ctx context.Context, user zen.ID, seq uint64, cutMs int64) (int, error) {
	prefix := binary.BigEndian.AppendUint64(indexPrefix(user.Shard()), uint64(user))
	start := pendingIndexKey(user, seq)
	n := 0
	for {
		rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(prefix), Limit: maxPendingChecked})
		if err != nil {
			return n, fmt.Errorf("scan pending index of %d: %w", user, err)
		}
		k, err := s.recoverIndexRows(ctx, user.Shard(), rows, cutMs)
		n += k
		if err != nil || len(rows) < maxPendingChecked {
			return n, err
		}
		start = append(bytes.Clone(rows[len(rows)-1].Key), 0)
	}
}

// recoverIndexed completes the pending chunk of user at seq, named by a pending-index row, when
// it was served before cutMs, and reports whether it did (1) or not (0). The pending row is read
// by its key: the pass costs a point read per pending chunk, not a scan of each user's feed
// (Recover). An error wrapping zen.ErrNotFound says the pending row is gone (materialized): the
// index row is stale.
func (s *Service) recoverIndexed(ctx context.Context, user zen.ID, seq uint64, cutMs int64) (int, error) {
	raw, err := s.primary.Get(ctx, pendingKey(user, seq))
	if errors.Is(err, zen.ErrNotFound) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("read pending chunk of %d: %w", user, err)
	}
	if user.Check(zen.TypeUser) != nil {
		return 0, nil
	}
	pc, err := decodePending(raw)
	if err != nil {
		s.log.Warn("undecodable pending chunk", zap.Stringer("user", user), zap.Uint64("seq", seq), zap.Error(err))
		return 0, nil
	}
	if pc.ServedMs >= cutMs {
		return 0, nil
	}
	if err := s.materializeInLane(ctx, MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: seq}); err != nil {
		return 0, err
	}
	return 1, nil
}

// ChunkState is what the feed knows of a chunk the generator handed out.
type ChunkState int

// The chunk states.
const (
	// ChunkUnknown: no marker. Never recorded (the request died before persisting it), or
	// materialized so long ago that trimming dropped the marker.
	ChunkUnknown ChunkState = iota
	// ChunkPending: recorded and served, its materialization not done yet.
	ChunkPending
	// ChunkDone: materialized.
	ChunkDone
	// ChunkGivenBack: a recording that failed half way (marker, no pending row); the request
	// gave the chunk back to the generator.
	ChunkGivenBack
)

// ChunkStatus reports what the feed knows of the user's chunk (for the recovery pass that
// settles generator chunks a crash left behind).
func (s *Service) ChunkStatus(ctx context.Context, user zen.ID, chunkID string) (ChunkState, error) {
	m, err := s.marker(ctx, user, chunkID)
	switch {
	case errors.Is(err, zen.ErrNotFound):
		return ChunkUnknown, nil
	case err != nil:
		return ChunkUnknown, err
	case m.done:
		return ChunkDone, nil
	}
	_, err = s.primary.Get(ctx, pendingKey(user, m.seq))
	switch {
	case errors.Is(err, zen.ErrNotFound):
		return ChunkGivenBack, nil
	case err != nil:
		return ChunkUnknown, fmt.Errorf("read pending chunk %s: %w", chunkID, err)
	}
	return ChunkPending, nil
}
