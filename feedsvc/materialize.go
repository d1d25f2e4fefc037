package feedsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

const maxChunkID = 256

// ErrBadTask is wrapped for a materialize task that is malformed or names a pending row that
// holds another chunk; retrying cannot help.
var ErrBadTask = errors.New("bad materialize task")

// MaterializeTask asks to save a served chunk into the user's materialized feed. The chunk's
// items are in its pending row; the task only names it. Seq, when known, saves a lookup of the
// chunk's marker; 0 means look it up.
type MaterializeTask struct {
	User    zen.ID
	ChunkID string
	Seq     uint64
}

func (t MaterializeTask) validate() error {
	switch {
	case t.User.Check(zen.TypeUser) != nil:
		return fmt.Errorf("%w: user %d is not a user ID", ErrBadTask, uint64(t.User))
	case t.ChunkID == "" || len(t.ChunkID) > maxChunkID:
		return fmt.Errorf("%w: chunk id of %d bytes", ErrBadTask, len(t.ChunkID))
	}
	return nil
}

// Materialize saves a served chunk into the materialized feed: it claims each pin in the pin
// index (a pin already elsewhere in the feed is skipped), writes the item rows, replaces the
// pending row by a done marker, trims the feed to its maximum length and settles the chunk as
// delivered. Every step is safe to replay, so running it twice, concurrently or after a crash
// at any point, has the effect of running it once.
func (s *Service) Materialize(ctx context.Context, t MaterializeTask) error {
	if err := t.validate(); err != nil {
		return err
	}
	start := time.Now()
	markedDone := true
	if t.Seq == 0 {
		m, err := s.marker(ctx, t.User, t.ChunkID)
		switch {
		case errors.Is(err, zen.ErrNotFound):
			// No marker: materialized so long ago that trimming dropped it.
			return s.finish(ctx, t, "already")
		case err != nil:
			return err
		}
		t.Seq, markedDone = m.seq, m.done
	}
	raw, err := s.primary.Get(ctx, pendingKey(t.User, t.Seq))
	if errors.Is(err, zen.ErrNotFound) && !markedDone {
		// Only the marker of a recording that failed half way: GetFeed gave the chunk back.
		return nil
	}
	if errors.Is(err, zen.ErrNotFound) {
		// Already materialized (the pending row goes before the trim and the settle): finish
		// those, which a crash may have cut short.
		if err := s.primary.Apply(ctx, []zen.Mutation{{Key: pendingIndexKey(t.User, t.Seq), Delete: true}}); err != nil {
			return fmt.Errorf("close chunk %s: %w", t.ChunkID, err)
		}
		return s.finish(ctx, t, "already")
	}
	if err != nil {
		return fmt.Errorf("read pending chunk %s: %w", t.ChunkID, err)
	}
	pc, err := decodePending(raw)
	if err != nil {
		return fmt.Errorf("%w: pending row of %s: %w", ErrBadTask, t.ChunkID, err)
	}
	if pc.ChunkID != t.ChunkID {
		return fmt.Errorf("%w: sequence %d holds chunk %q, not %q", ErrBadTask, t.Seq, pc.ChunkID, t.ChunkID)
	}
	if pc.Prepared && len(pc.Items) > 0 && (s.elig != nil || s.live != nil) {
		// A prepared chunk no page served (the recovery pass): what a removal took since it was
		// composed stays out of the feed, as a page would have left it out (filterRemoved).
		removed, err := s.removedOf(ctx, t.User, pc.Items)
		if err != nil {
			s.m.preparedCheckErrors.Inc()
			return fmt.Errorf("materialize prepared chunk %s: removal check: %w", t.ChunkID, err)
		}
		n := len(pc.Items)
		pc = withoutPins(pc, removed)
		s.m.preparedRemoved.Add(float64(n - len(pc.Items)))
	}
	skipped, err := s.writeItems(ctx, t, pc)
	if err != nil {
		return err
	}
	if err := s.closeChunk(ctx, t); err != nil {
		return err
	}
	if err := s.finish(ctx, t, "done"); err != nil {
		return err
	}
	s.m.materializeSeconds.Observe(time.Since(start).Seconds())
	if skipped > 0 {
		s.m.duplicatePins.Add(float64(skipped))
	}
	return nil
}

// writeItems claims each of pc's pins in the pin index at its position in task t's chunk and
// writes the item rows of those it claimed; skipped counts the pins claimed elsewhere in the
// feed already.
func (s *Service) writeItems(ctx context.Context, t MaterializeTask, pc pendingChunk) (skipped int, err error) {
	// The claims and the item rows do not wait for their own fsync (zen.Lazily), nor does the
	// chunk's close after them (closeChunk): all go to the same table, on the same log (every
	// row here is led by the user's ID, so a router keeps them on one store), so the log makes
	// them durable in order, with the next synced write of the store (a page's recording) or
	// its flush. A machine crash leaves a prefix of them, never the close without the items:
	// the chunk is then pending again (its pending row was synced before its page answered,
	// and is shown meanwhile), and the retry, or the recovery pass, completes it: a claim for
	// this position counts as ours, and item rows are rewritten the same. The claims go in one
	// batch of compare-and-sets and the item rows in one write: a chunk of n pins costs a few
	// commits and no fsync of its own, where the pages' recordings wait for theirs.
	lctx := zen.Lazily(ctx)
	ats := make([]position, len(pc.Items))
	pins := make([]zen.ID, len(pc.Items))
	for i, it := range pc.Items {
		ats[i], pins[i] = position{Seq: t.Seq, Pos: pc.Pos[i]}, it.Pin
	}
	mine, err := s.claimAll(lctx, t.User, pins, ats)
	if err != nil {
		return 0, err
	}
	var rows []zen.Mutation
	for i, it := range pc.Items {
		if !mine[i] {
			skipped++
			continue
		}
		rows = append(rows, zen.Mutation{Key: itemKey(t.User, ats[i]), Value: encodeItem(it)})
	}
	if len(rows) > 0 {
		if err := s.primary.Apply(lctx, rows); err != nil {
			return 0, fmt.Errorf("write chunk %s: %w", t.ChunkID, err)
		}
	}
	return skipped, nil
}

// closeChunk replaces a materialized chunk's pending row by its done marker. Until then its item
// rows are hidden behind the pending row (readPage), so this is the write that changes the
// feed's head (headChanged), whether it reports success or not. It is lazy, after the items on
// the same log (see writeItems): a crash that loses it leaves the chunk pending, as it was.
func (s *Service) closeChunk(ctx context.Context, t MaterializeTask) error {
	defer s.headChanged(ctx, t.User)
	if err := s.primary.Apply(zen.Lazily(ctx), []zen.Mutation{
		{Key: doneKey(t.User, t.ChunkID), Value: encodeMarker(chunkMarker{seq: t.Seq, done: true})},
		{Key: pendingKey(t.User, t.Seq), Delete: true},
		{Key: pendingIndexKey(t.User, t.Seq), Delete: true},
	}); err != nil {
		return fmt.Errorf("close chunk %s: %w", t.ChunkID, err)
	}
	return nil
}

// finish trims the feed (when the chunk is one of those that trim: trimDue) and settles the
// chunk as delivered: the last steps of Materialize, also run when a retry finds the chunk
// already saved.
func (s *Service) finish(ctx context.Context, t MaterializeTask, result string) error {
	if s.trimDue(t.ChunkID) {
		if _, err := s.Trim(ctx, t.User); err != nil {
			return err
		}
	}
	if err := s.gen.Settle(ctx, t.User, t.ChunkID, true); err != nil {
		return fmt.Errorf("settle chunk %s: %w", t.ChunkID, err)
	}
	s.m.materialized.WithLabelValues(result).Inc()
	return nil
}

// trimDue reports whether materializing chunkID trims the feed: 1 chunk in trimEvery, by a
// hash of its ID (every run of the same task decides the same).
func (s *Service) trimDue(chunkID string) bool {
	if s.trimEvery <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(chunkID))
	return h.Sum32()%s.trimEvery == 0
}

// marker reads the chunk marker of chunkID.
func (s *Service) marker(ctx context.Context, user zen.ID, chunkID string) (chunkMarker, error) {
	b, err := s.primary.Get(ctx, doneKey(user, chunkID))
	if err != nil {
		if errors.Is(err, zen.ErrNotFound) {
			return chunkMarker{}, err
		}
		return chunkMarker{}, fmt.Errorf("read marker of chunk %s: %w", chunkID, err)
	}
	m, err := decodeMarker(b)
	if err != nil {
		return chunkMarker{}, fmt.Errorf("%w: marker of chunk %s: %w", ErrBadTask, chunkID, err)
	}
	return m, nil
}

// claimAll takes the pin index entries of pins for the positions ats (pins[i] at ats[i]), in
// one batch of compare-and-sets; mine[i] is false when pins[i] sits elsewhere in the feed, or
// earlier in pins. A claim left by an earlier run for the same position counts as ours.
func (s *Service) claimAll(ctx context.Context, user zen.ID, pins []zen.ID, ats []position) (mine []bool, err error) {
	mine = make([]bool, len(pins))
	var conds []zen.Cond
	var idx []int
	seen := make(map[zen.ID]bool, len(pins))
	for i, pin := range pins {
		if seen[pin] {
			continue // the pin's first position in the chunk holds it
		}
		seen[pin] = true
		conds = append(conds, zen.Cond{Key: pinKey(user, pin), Value: encodePosition(ats[i])})
		idx = append(idx, i)
	}
	ok, err := zen.CheckAndSetMany(ctx, s.primary, conds)
	if err != nil {
		return nil, fmt.Errorf("claim pins: %w", err)
	}
	var lost []int // positions in conds whose entry was there already
	for j, won := range ok {
		mine[idx[j]] = won
		if !won {
			lost = append(lost, j)
		}
	}
	if len(lost) == 0 {
		return mine, nil
	}
	keys := make([][]byte, len(lost))
	for k, j := range lost {
		keys[k] = conds[j].Key
	}
	got, err := zen.GetMany(ctx, s.primary, keys)
	if err != nil {
		return nil, fmt.Errorf("read pin index: %w", err)
	}
	var again []zen.Cond
	var againIdx []int
	for k, j := range lost {
		switch {
		case got[k] == nil:
			// Trimmed away between the two calls: try once more.
			again, againIdx = append(again, conds[j]), append(againIdx, idx[j])
		default:
			mine[idx[j]] = bytes.Equal(got[k], conds[j].Value)
		}
	}
	if len(again) == 0 {
		return mine, nil
	}
	ok, err = zen.CheckAndSetMany(ctx, s.primary, again)
	if err != nil {
		return nil, fmt.Errorf("claim pins: %w", err)
	}
	for k, won := range ok {
		mine[againIdx[k]] = won
	}
	return mine, nil
}

// Trim drops the oldest materialized items beyond the maximum length, with their pin index
// entries and the done markers of chunks wholly gone. Pending chunks count toward the length
// but are never dropped here. It returns the number of items dropped.
func (s *Service) Trim(ctx context.Context, user zen.ID) (int, error) {
	maxItems := s.Config().MaxItems
	start := userPrefix(prefixFeed, user)
	stop := zen.PrefixEnd(start)
	const batch = 512
	count := 0
	var drop []zen.Mutation
	var oldestKept uint64
	pendingSeqs := map[uint64]bool{}
	for {
		rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop, Limit: batch})
		if err != nil {
			return 0, fmt.Errorf("scan feed of %d for trim: %w", user, err)
		}
		for _, kv := range rows {
			pos, pending, err := feedKey(kv.Key)
			if err != nil {
				continue
			}
			if pending {
				if pc, err := decodePending(kv.Value); err == nil {
					count += len(pc.Items)
					pendingSeqs[pos.Seq] = true
				}
				continue
			}
			if pendingSeqs[pos.Seq] {
				continue // being materialized: its items are counted in the pending row
			}
			count++
			if count <= maxItems {
				oldestKept = pos.Seq
				continue
			}
			drop = append(drop, zen.Mutation{Key: bytes.Clone(kv.Key), Delete: true})
			if it, err := decodeItem(kv.Value); err == nil {
				drop = append(drop, zen.Mutation{Key: pinKey(user, it.Pin), Delete: true})
			}
		}
		if len(rows) < batch {
			break
		}
		start = append(bytes.Clone(rows[len(rows)-1].Key), 0)
	}
	if len(drop) == 0 {
		return 0, nil
	}
	// Item rows go before their index entries within each batch: a partial write leaves an
	// index entry without a row, which only keeps that pin out of the feed.
	defer s.headChanged(ctx, user)
	n := 0
	for i := 0; i < len(drop); i += batch {
		part := drop[i:min(i+batch, len(drop))]
		if err := s.primary.Apply(ctx, part); err != nil {
			return n, fmt.Errorf("trim feed of %d: %w", user, err)
		}
		for _, m := range part {
			if keyKind(m.Key) == prefixFeed {
				n++
			}
		}
	}
	if err := s.dropMarkers(ctx, user, oldestKept); err != nil {
		return n, err
	}
	s.m.trimmed.Add(float64(n))
	return n, nil
}

// dropMarkers deletes the done markers of chunks older than the oldest kept one.
func (s *Service) dropMarkers(ctx context.Context, user zen.ID, oldestKept uint64) error {
	prefix := userPrefix(prefixDone, user)
	rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("scan done markers of %d: %w", user, err)
	}
	var del []zen.Mutation
	for _, kv := range rows {
		if m, err := decodeMarker(kv.Value); err == nil && m.done && m.seq < oldestKept {
			del = append(del, zen.Mutation{Key: kv.Key, Delete: true})
		}
	}
	if len(del) == 0 {
		return nil
	}
	if err := s.primary.Apply(ctx, del); err != nil {
		return fmt.Errorf("drop done markers of %d: %w", user, err)
	}
	return nil
}

// Recover completes the chunks of user that were served but whose materialization was lost
// (pending rows served more than olderThan ago) and returns how many it completed. cmd runs it
// over active users after a crash; GetFeed also re-enqueues the stale chunks it reads.
func (s *Service) Recover(ctx context.Context, user zen.ID, olderThan time.Duration) (int, error) {
	cut := s.now().Add(-olderThan).UnixMilli()
	prefix := userPrefix(prefixFeed, user)
	rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("scan feed of %d for recovery: %w", user, err)
	}
	n := 0
	for _, kv := range rows {
		pos, pending, err := feedKey(kv.Key)
		if err != nil || !pending {
			continue
		}
		pc, err := decodePending(kv.Value)
		if err != nil {
			s.log.Warn("undecodable pending chunk", zap.Stringer("user", user), zap.Uint64("seq", pos.Seq), zap.Error(err))
			continue
		}
		if pc.ServedMs >= cut {
			continue
		}
		if err := s.Materialize(ctx, MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: pos.Seq}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// reenqueueStale re-enqueues the materialization of stale pending chunks a read came across,
// once per chunk per StalePending interval in this process.
func (s *Service) reenqueueStale(user zen.ID, stale []MaterializeTask) {
	if len(stale) == 0 {
		return
	}
	now := s.now()
	every := s.Config().StalePending
	s.mu.Lock()
	var todo []MaterializeTask
	for _, t := range stale {
		if last, ok := s.reenqueued[t.ChunkID]; ok && now.Sub(last) < every {
			continue
		}
		s.reenqueued[t.ChunkID] = now
		todo = append(todo, t)
	}
	for k, v := range s.reenqueued {
		if now.Sub(v) > 2*every {
			delete(s.reenqueued, k)
		}
	}
	s.mu.Unlock()
	for _, t := range todo {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.m.reenqueued.Inc()
			if err := s.enq.EnqueueMaterialize(ctx, t); err != nil {
				s.log.Warn("re-enqueue materialize", zap.Stringer("user", user), zap.String("chunk", t.ChunkID), zap.Error(err))
			}
		}()
	}
}
