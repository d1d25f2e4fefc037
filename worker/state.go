package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// StateTable is the name of the worker's own table (in the same store as the pools). Rows, all
// led by the user ID so they live on the user's shard:
//
//	user | 'a'         -> last active, ms (8 bytes); -1 = user deleted (never fanned out to again)
//	user | 'r'         -> rebuild started at, ms (8 bytes) while the pools are rebuilt; then the
//	                      same and 'd' (9 bytes), kept so that a rebuild run again scores as the first
//	user | 'f' | author -> affinity: how many of author's pins user saved or liked (8-byte counter)
//	user | 'm' | pin    -> engagement mark (author): makes the affinity increment idempotent
//	list | 'c' | pin | … -> a fanout's progress through one receiver list (see progressKey); the
//	                        list's owner (author, board or interest) leads
const StateTable = "worker"

const (
	rowActive   = 'a'
	rowRebuild  = 'r'
	rowAffinity = 'f'
	rowMark     = 'm'
	rowProgress = 'c'

	deletedUser = -1
)

func stateKey(user zen.ID, kind byte, other zen.ID) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 17), uint64(user))
	k = append(k, kind)
	if other != 0 {
		k = binary.BigEndian.AppendUint64(k, uint64(other))
	}
	return k
}

func i64(v []byte) (int64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// rebuildDone is the rebuild marker of a finished rebuild: its start, ms, then 'd'. The marker
// stays once the rebuild is done so that the rebuild task run again (its completion lost, or the
// outbox relay enqueueing it once more) ages the pins as of the same start and writes the same
// pool rows; Rebuilding reads it as not rebuilding, and the next rebuild's start replaces it.
func rebuildDone(startMs int64) []byte { return append(i64Bytes(startMs), 'd') }

// rebuildMarker reads a rebuild marker: the rebuild's start, and whether the rebuild is still
// running (false: done); ok is false when v is no marker.
func rebuildMarker(v []byte) (startMs int64, running, ok bool) {
	if ms, ok := i64(v); ok {
		return ms, true, true
	}
	if len(v) == 9 && v[8] == 'd' {
		ms, _ := i64(v[:8])
		return ms, false, true
	}
	return 0, false, false
}

func i64Bytes(n int64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(n)) }

// maxParallel bounds the concurrent pool writes of one batch (HBase round trips overlap).
const maxParallel = 16

// RecordEngagement notes that user saved or liked pin, whose author is author: it raises
// user's affinity for author by one, once per (user, pin) however often it is called (a mark
// row is put if absent first, and only the call that placed it increments). A crash between the
// two leaves the count one low; it is a ranking signal, so that is tolerated.
func (w *Worker) RecordEngagement(ctx context.Context, user, pin, author zen.ID) error {
	if err := user.Check(zen.TypeUser); err != nil {
		return fmt.Errorf("record engagement: %w", err)
	}
	if err := pin.Check(zen.TypePin); err != nil {
		return fmt.Errorf("record engagement: %w", err)
	}
	if err := author.Check(zen.TypeUser); err != nil {
		return fmt.Errorf("record engagement: author: %w", err)
	}
	if user == author {
		return nil
	}
	won, err := w.state.CheckAndSet(ctx, stateKey(user, rowMark, pin), nil, i64Bytes(int64(author)))
	if err != nil {
		return fmt.Errorf("record engagement %d/%d: %w", user, pin, err)
	}
	if !won {
		return nil
	}
	if _, err := w.state.Increment(ctx, stateKey(user, rowAffinity, author), 1); err != nil {
		return fmt.Errorf("record engagement %d/%d: %w", user, pin, err)
	}
	w.feats.forget(featureKey{kind: featAffinity, user: user, of: author})
	return nil
}

// Affinity returns user's affinity for author (see RecordEngagement).
func (w *Worker) Affinity(ctx context.Context, user, author zen.ID) (int64, error) {
	v, err := w.state.Get(ctx, stateKey(user, rowAffinity, author))
	if errors.Is(err, zen.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("affinity %d/%d: %w", user, author, err)
	}
	n, _ := i64(v)
	return n, nil
}

// Touch records that user is active now (the feed service calls it on every feed request; it
// writes at most once per Config.TouchEvery). A user returning after more than
// Config.InactiveAfter, whose pools the fanout skipped, gets a rebuild task; Touch then reports
// true, as Rebuilding does until the rebuild is done (the caller can answer like Mastodon's 206).
func (w *Worker) Touch(ctx context.Context, user zen.ID) (rebuilding bool, err error) {
	if err := user.Check(zen.TypeUser); err != nil {
		return false, fmt.Errorf("touch: %w", err)
	}
	key := stateKey(user, rowActive, 0)
	cur, err := w.state.Get(ctx, key)
	if err != nil && !errors.Is(err, zen.ErrNotFound) {
		return false, fmt.Errorf("touch %d: %w", user, err)
	}
	nowMs := w.now().UnixMilli()
	last, known := i64(cur)
	if known && last == deletedUser {
		return false, nil
	}
	if !known || nowMs-last >= w.cfg.TouchEvery.Milliseconds() {
		// Lazily: a feed request waits for Touch, and the last-active time is advisory. A
		// machine crash that loses it makes the user look absent since the time before; at
		// worst the next Touch starts one more rebuild, which writes the rows the first did.
		won, err := w.state.CheckAndSet(zen.Lazily(ctx), key, cur, i64Bytes(nowMs))
		if err != nil {
			return false, fmt.Errorf("touch %d: %w", user, err)
		}
		if won && known && w.cfg.InactiveAfter > 0 && nowMs-last > w.cfg.InactiveAfter.Milliseconds() {
			if err := w.startRebuild(ctx, user, nowMs); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return w.Rebuilding(ctx, user), nil
}

// SetLastActive sets user's last-active time (tests, imports, and a feed service that tracks
// activity itself).
func (w *Worker) SetLastActive(ctx context.Context, user zen.ID, ms int64) error {
	if err := user.Check(zen.TypeUser); err != nil {
		return fmt.Errorf("set last active: %w", err)
	}
	if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(user, rowActive, 0), Value: i64Bytes(ms)}}); err != nil {
		return fmt.Errorf("set last active %d: %w", user, err)
	}
	return nil
}

// Rebuilding reports whether user's pools are being rebuilt after a long absence (so a feed may
// be short for a moment). A rebuild older than Config.RebuildTimeout no longer counts. Errors read
// as false: the signal is advisory.
func (w *Worker) Rebuilding(ctx context.Context, user zen.ID) bool {
	v, err := w.state.Get(ctx, stateKey(user, rowRebuild, 0))
	if err != nil {
		return false
	}
	start, running, _ := rebuildMarker(v)
	return running && w.now().UnixMilli()-start < w.cfg.RebuildTimeout.Milliseconds()
}

// startRebuild places the rebuild marker and enqueues the rebuild (a follow-backfill of the user
// by itself, see HandleFollowBackfill).
func (w *Worker) startRebuild(ctx context.Context, user zen.ID, nowMs int64) error {
	key := stateKey(user, rowRebuild, 0)
	if err := w.state.Apply(ctx, []zen.Mutation{{Key: key, Value: i64Bytes(nowMs)}}); err != nil {
		return fmt.Errorf("start rebuild %d: %w", user, err)
	}
	if err := w.enqueueRebuild(ctx, user, nowMs); err != nil {
		return fmt.Errorf("start rebuild %d: %w", user, err)
	}
	w.m.rebuilds.Inc()
	return nil
}
