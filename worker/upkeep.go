package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// followEdge returns the edge type of "user follows a target of kind k" and the edge type of the
// target's pins.
func followEdge(kind string) (follows, pins zen.EdgeType, tt zen.Type, ok bool) {
	switch kind {
	case pinlater.KindUser:
		return zen.EdgeFollowsUser, zen.EdgeUserPins, zen.TypeUser, true
	case pinlater.KindBoard:
		return zen.EdgeFollowsBoard, zen.EdgeBoardPins, zen.TypeBoard, true
	case pinlater.KindInterest:
		return zen.EdgeFollowsInterest, zen.EdgeInterestPins, zen.TypeInterest, true
	}
	return 0, 0, 0, false
}

// KindOf returns the follow target kind of an ID (user, board or interest).
func KindOf(target zen.ID) (string, error) {
	switch target.Type() {
	case zen.TypeUser:
		return pinlater.KindUser, nil
	case zen.TypeBoard:
		return pinlater.KindBoard, nil
	case zen.TypeInterest:
		return pinlater.KindInterest, nil
	}
	return "", fmt.Errorf("follow target %d: type %v is not user, board or interest", target, target.Type())
}

// enqueueRebuild enqueues the rebuild of user's pools: a follow-backfill of the user by itself
// (there is no rebuild task type; a self-follow is meaningless, so it names the rebuild).
func (w *Worker) enqueueRebuild(ctx context.Context, user zen.ID, startMs int64) error {
	t, err := pinlater.NewFollowBackfill(pinlater.FollowBackfillPayload{User: uint64(user), Target: uint64(user), TargetKind: pinlater.KindUser})
	if err != nil {
		return err
	}
	_, err = w.enq.Enqueue(ctx, t, pinlater.TaskID("rebuild:"+user.String()+":"+strconv.FormatInt(startMs, 10)))
	return err
}

// HandleFollowBackfill copies the newest Config.BackfillLimit pins of a newly followed user,
// board or interest into the follower's pools, scored as of the follow (the follow edge's
// sequence), so a retry writes the same rows. If the follow is gone by then (an unfollow came
// first), it does nothing. A payload whose target is the user itself is a rebuild (see Touch):
// every followee's recent pins are backfilled and the rebuild marker is marked done.
func (w *Worker) HandleFollowBackfill(ctx context.Context, p pinlater.FollowBackfillPayload) error {
	user, err := checkID("backfill user", p.User, zen.TypeUser)
	if err != nil {
		return err
	}
	follows, _, tt, ok := followEdge(p.TargetKind)
	if !ok {
		return invalid("backfill target kind %q", p.TargetKind)
	}
	target, err := checkID("backfill target", p.Target, tt)
	if err != nil {
		return err
	}
	if target == user {
		return w.rebuild(ctx, user)
	}
	if tt == zen.TypeInterest {
		w.feats.forget(featureKey{kind: featInterest, user: user, of: target})
	}
	e, err := w.g.HasEdge(ctx, user, follows, target)
	if errors.Is(err, zen.ErrNotFound) {
		return nil // unfollowed meanwhile
	}
	if err != nil {
		return fmt.Errorf("backfill %d<-%d: %w", user, target, err)
	}
	if err := w.backfill(ctx, user, target, p.TargetKind, seqMillis(e.Seq)); err != nil {
		return err
	}
	w.m.tasks.WithLabelValues(pinlater.TypeFollowBackfill).Inc()
	return nil
}

// backfill inserts target's newest pins into user's pools, aged as of refMs.
func (w *Worker) backfill(ctx context.Context, user, target zen.ID, kind string, refMs int64) error {
	_, pinsEdge, _, _ := followEdge(kind)
	edges, _, err := w.g.ListEdges(ctx, target, pinsEdge, "", w.cfg.BackfillLimit, true)
	if err != nil {
		return fmt.Errorf("backfill %d<-%d: list: %w", user, target, err)
	}
	if len(edges) == 0 {
		return nil
	}
	ids := make([]zen.ID, len(edges))
	for i, e := range edges {
		ids[i] = e.To
	}
	objs, err := w.g.GetMany(ctx, ids)
	if err != nil {
		return fmt.Errorf("backfill %d<-%d: pins: %w", user, target, err)
	}
	oldest := w.now().Add(-w.cfg.TTL).UnixMilli()
	src, reason := zen.SourceFollowing, "followed "+kind
	if kind == pinlater.KindInterest {
		src = zen.SourceInterest
	}
	var es []zen.PoolEntry
	for _, e := range edges {
		o, ok := objs[e.To]
		if !ok {
			continue // deleted
		}
		var board zen.ID
		if kind == pinlater.KindBoard {
			board = target
		}
		pi := pinFromObject(o, board)
		switch kind {
		case pinlater.KindUser:
			pi.author = target
		case pinlater.KindInterest:
			pi.interest = target
		}
		if pi.createdMs == 0 {
			pi.createdMs = seqMillis(e.Seq)
		}
		if pi.createdMs < oldest {
			continue
		}
		if err := w.loadPinInfo(ctx, &pi); err != nil {
			return fmt.Errorf("backfill %d<-%d: %w", user, target, err)
		}
		rs, err := w.receivers(ctx, []zen.ID{user}, &pi, pi.interest, w.feats)
		if err != nil {
			return fmt.Errorf("backfill %d<-%d: %w", user, target, err)
		}
		if rs[0].skip == "deleted" {
			return nil
		}
		es = append(es, w.entry(rs[0], &pi, src, refMs-pi.createdMs, 0, reason))
	}
	if err := w.insert(ctx, es); err != nil {
		return fmt.Errorf("backfill %d<-%d: %w", user, target, err)
	}
	return nil
}

// rebuild backfills every followee (the most recent Config.RebuildFollowees of each kind) into
// user's pools, aged as of the rebuild's start (the marker's), then marks the rebuild done. Run
// again once done, it reads the same start from the done marker and writes the same rows.
func (w *Worker) rebuild(ctx context.Context, user zen.ID) error {
	key := stateKey(user, rowRebuild, 0)
	v, err := w.state.Get(ctx, key)
	if err != nil && !errors.Is(err, zen.ErrNotFound) {
		return fmt.Errorf("rebuild %d: %w", user, err)
	}
	refMs, running, ok := rebuildMarker(v)
	if !ok {
		// No marker: Touch writes it before it enqueues the rebuild, so only a rebuild
		// enqueued by other means gets here; it is aged as of now.
		refMs = w.now().UnixMilli()
	}
	for _, kind := range []string{pinlater.KindUser, pinlater.KindBoard, pinlater.KindInterest} {
		follows, _, _, _ := followEdge(kind)
		edges, _, err := w.g.ListEdges(ctx, user, follows, "", w.cfg.RebuildFollowees, true)
		if err != nil {
			return fmt.Errorf("rebuild %d: followees: %w", user, err)
		}
		for _, e := range edges {
			if err := w.backfill(ctx, user, e.To, kind, refMs); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
		}
	}
	if running {
		// From this run's marker only: a rebuild started meanwhile keeps its own.
		if _, err := w.state.CheckAndSet(ctx, key, v, rebuildDone(refMs)); err != nil {
			return fmt.Errorf("rebuild %d: mark done: %w", user, err)
		}
	}
	w.m.tasks.WithLabelValues("rebuild").Inc()
	return nil
}

// HandleUnfollowCleanup removes from user's pools the pins that came from the unfollowed target:
// for a user, the following-pool entries by that author (unless the pin's board is still
// followed); for a board, the entries of that board (unless the author is still followed); for an
// interest, the interest-pool entries of that interest. If the follow is back (a re-follow came
// first), it does nothing. Idempotent: a second run finds nothing to remove.
func (w *Worker) HandleUnfollowCleanup(ctx context.Context, p pinlater.UnfollowCleanupPayload) error {
	user, err := checkID("unfollow user", p.User, zen.TypeUser)
	if err != nil {
		return err
	}
	follows, _, tt, ok := followEdge(p.TargetKind)
	if !ok {
		return invalid("unfollow target kind %q", p.TargetKind)
	}
	target, err := checkID("unfollow target", p.Target, tt)
	if err != nil {
		return err
	}
	if tt == zen.TypeInterest {
		w.feats.forget(featureKey{kind: featInterest, user: user, of: target})
	}
	if _, err := w.g.HasEdge(ctx, user, follows, target); err == nil {
		return nil // followed again
	} else if !errors.Is(err, zen.ErrNotFound) {
		return fmt.Errorf("unfollow %d-/->%d: %w", user, target, err)
	}
	var (
		src    = zen.SourceFollowing
		match  func(zen.PoolEntry) bool
		ioErr  error
		stillF = func(t zen.EdgeType, to zen.ID) bool {
			if to == 0 || ioErr != nil {
				return false
			}
			_, err := w.g.HasEdge(ctx, user, t, to)
			if err != nil && !errors.Is(err, zen.ErrNotFound) {
				ioErr = err
			}
			return err == nil
		}
	)
	switch p.TargetKind {
	case pinlater.KindUser:
		match = func(e zen.PoolEntry) bool {
			return e.Author == target && !stillF(zen.EdgeFollowsBoard, e.Board) && ioErr == nil
		}
	case pinlater.KindBoard:
		match = func(e zen.PoolEntry) bool {
			return e.Board == target && !stillF(zen.EdgeFollowsUser, e.Author) && ioErr == nil
		}
	default:
		src = zen.SourceInterest
		match = func(e zen.PoolEntry) bool { return e.Interest == target }
	}
	n, err := w.pools.RemoveWhere(ctx, user, src, match)
	if err != nil {
		return fmt.Errorf("unfollow %d-/->%d: %w", user, target, err)
	}
	if ioErr != nil {
		return fmt.Errorf("unfollow %d-/->%d: %w", user, target, ioErr)
	}
	w.m.removed.WithLabelValues("unfollow").Add(float64(n))
	w.m.tasks.WithLabelValues(pinlater.TypeUnfollowCleanup).Inc()
	return nil
}

// HandlePinDelete makes sure the pin object is soft-deleted (so the read-side filter,
// DeletedPins, drops it at once and no later fanout delivers it) and then purges it from the pools
// of the users it was fanned out to: the author (related), the author's followers, the followers
// of each board holding it and of each of its interests, walking each list page by page, at most
// Config.PurgeMaxReceivers per list. Receivers beyond that, and recommender deliveries, are left to
// the read-side filter and the TTL. Idempotent: removing an absent pin is a no-op.
func (w *Worker) HandlePinDelete(ctx context.Context, p pinlater.PinDeletePayload) error {
	pin, err := checkID("pin delete pin", p.Pin, zen.TypePin)
	if err != nil {
		return err
	}
	author, err := checkID("pin delete author", p.Author, zen.TypeUser)
	if err != nil {
		return err
	}
	if err := w.g.Delete(ctx, pin); err != nil && !errors.Is(err, zen.ErrNotFound) {
		return fmt.Errorf("pin delete %d: %w", pin, err)
	}
	lists := []receiverList{{from: author, typ: zen.EdgeFollowedByUser}}
	for _, l := range []struct {
		et, followers zen.EdgeType
	}{{zen.EdgePinBoards, zen.EdgeBoardFollowers}, {zen.EdgePinInterests, zen.EdgeInterestFollowers}} {
		es, _, err := w.g.ListEdges(ctx, pin, l.et, "", zen.MaxEdgePage, false)
		if err != nil {
			return fmt.Errorf("pin delete %d: %w", pin, err)
		}
		for _, e := range es {
			lists = append(lists, receiverList{from: e.To, typ: l.followers})
		}
	}
	n, err := w.pools.Remove(ctx, author, []zen.ID{pin})
	if err != nil {
		return fmt.Errorf("pin delete %d: %w", pin, err)
	}
	total := n
	for _, l := range lists {
		cur, seen := "", 0
		for seen < w.cfg.PurgeMaxReceivers {
			edges, next, err := w.g.ListEdges(ctx, l.from, l.typ, cur, min(w.cfg.ChunkSize, w.cfg.PurgeMaxReceivers-seen), false)
			if err != nil {
				return fmt.Errorf("pin delete %d: list %d/%d: %w", pin, l.from, l.typ, err)
			}
			seen += len(edges)
			var removed atomic.Int64
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(maxParallel)
			for _, e := range edges {
				g.Go(func() error {
					n, err := w.pools.Remove(gctx, e.To, []zen.ID{pin})
					removed.Add(int64(n))
					return err
				})
			}
			if err := g.Wait(); err != nil {
				return fmt.Errorf("pin delete %d: %w", pin, err)
			}
			total += int(removed.Load())
			if next == "" {
				break
			}
			cur = next
		}
	}
	// Off its boards and lists (GraphService.DeletePin did it already; a delete published by a
	// producer did not), then the pin→boards edges the walk above needed.
	if err := w.g.UnlistPin(ctx, pin, author); err != nil {
		return fmt.Errorf("pin delete %d: %w", pin, err)
	}
	if err := w.g.DropPinBoards(ctx, pin); err != nil {
		return fmt.Errorf("pin delete %d: %w", pin, err)
	}
	w.m.removed.WithLabelValues("pin_delete").Add(float64(total))
	w.m.tasks.WithLabelValues(pinlater.TypePinDelete).Inc()
	return nil
}

// HandleUserDelete removes a deleted user's pools, worker state and (through the FeedRemover)
// materialized feed, and leaves a tombstone so that no later fanout delivers to the user again.
// Idempotent.
//
// A fanout that read the user's last-active row before the tombstone (or, in another process,
// kept it for up to worker.active_ttl) may still write pool rows after this pass deleted the
// pools, and a materialization in flight may write feed rows after the feed was deleted. Rows
// nobody reads: GetFeed refuses a deleted user. So the first pass ends by scheduling the same
// work once more (Pass 2) after userDeleteRecheck, when every such writer has ended.
func (w *Worker) HandleUserDelete(ctx context.Context, p pinlater.UserDeletePayload) error {
	user, err := checkID("user delete", p.User, zen.TypeUser)
	if err != nil {
		return err
	}
	// Tombstone first: chunks that read it afterwards skip the user.
	if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(user, rowActive, 0), Value: i64Bytes(deletedUser)}}); err != nil {
		return fmt.Errorf("user delete %d: %w", user, err)
	}
	// This process's fanouts read the tombstone from now on; other processes' within their
	// worker.active_ttl (Config.ActiveTTL).
	w.active.forget(featureKey{kind: featActive, user: user})
	// What the user owned: soft-deleted (DeleteUser did it already; an event from a producer did
	// not), then each pin purged from the pools it was fanned out to and taken off its lists.
	if err := w.g.DeleteOwned(ctx, user); err != nil {
		return fmt.Errorf("user delete %d: %w", user, err)
	}
	if err := w.purgeUserPins(ctx, user); err != nil {
		return fmt.Errorf("user delete %d: %w", user, err)
	}
	if err := w.pools.DeleteUser(ctx, user); err != nil {
		return fmt.Errorf("user delete %d: %w", user, err)
	}
	if err := w.deleteUserState(ctx, user); err != nil {
		return fmt.Errorf("user delete %d: %w", user, err)
	}
	if w.feeds != nil {
		if err := w.feeds.DeleteFeed(ctx, user); err != nil {
			return fmt.Errorf("user delete %d: feed: %w", user, err)
		}
	}
	if p.Pass != pinlater.UserDeleteLastPass {
		t, err := pinlater.NewUserDelete(pinlater.UserDeletePayload{User: p.User, Pass: pinlater.UserDeleteLastPass})
		if err != nil {
			return fmt.Errorf("user delete %d: %w", user, err)
		}
		if _, err := w.enq.Enqueue(ctx, t, pinlater.ProcessIn(w.userDeleteRecheck())); err != nil {
			return fmt.Errorf("user delete %d: schedule the second pass: %w", user, err)
		}
	}
	w.m.tasks.WithLabelValues(pinlater.TypeUserDelete).Inc()
	return nil
}

// userDeleteRecheck is how long after a user's deletion its second pass runs
// (Config.UserDeleteRecheck). By default: past the longest run of a fanout task (its pinlater
// timeout), which may have read the user as live just before the tombstone, or of a
// materialization already under way, plus the time another process keeps that reading
// (ActiveTTL), plus a minute for the clocks of the machines involved.
func (w *Worker) userDeleteRecheck() time.Duration {
	if w.cfg.UserDeleteRecheck > 0 {
		return w.cfg.UserDeleteRecheck
	}
	longest := time.Duration(0)
	for _, typ := range []string{pinlater.TypeFanout, pinlater.TypeFanoutChunk, pinlater.TypeMaterialize} {
		if p, ok := pinlater.DefaultPolicy(typ); ok {
			longest = max(longest, p.Timeout)
		}
	}
	return longest + max(w.cfg.ActiveTTL, 0) + time.Minute
}

// upkeep expires user's entries older than the TTL and caps each of user's sources at PoolCap,
// in one read of user's pool index.
func (w *Worker) upkeep(ctx context.Context, user zen.ID) error {
	if _, _, err := w.pools.Upkeep(ctx, user, w.cfg.PoolCap, w.now().Add(-w.cfg.TTL).UnixMilli()); err != nil {
		return err
	}
	return nil
}

// purgeUserPins purges each of user's pins from the pools it was fanned out to and takes it off
// its lists, until the user's pin list is empty.
func (w *Worker) purgeUserPins(ctx context.Context, user zen.ID) error {
	var last zen.ID
	for {
		// Always the first page: each purge removes the pin's user→pins edge.
		es, _, err := w.g.ListEdges(ctx, user, zen.EdgeUserPins, "", zen.MaxEdgePage, false)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
		if es[0].To == last { // the purge did not take the pin off the list: no progress
			return fmt.Errorf("pin %d stays on the user's list after its purge", last)
		}
		last = es[0].To
		for _, e := range es {
			if err := w.HandlePinDelete(ctx, pinlater.PinDeletePayload{V: pinlater.PayloadVersion, Pin: uint64(e.To), Author: uint64(user)}); err != nil {
				return err
			}
		}
	}
}

// deleteUserState deletes the rest of user's state rows (affinity, marks, rebuild marker),
// keeping the tombstone.
func (w *Worker) deleteUserState(ctx context.Context, user zen.ID) error {
	start, stop := stateKey(user, 0, 0), stateKey(user+1, 0, 0)
	for {
		rows, err := w.state.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop, Limit: 1000})
		if err != nil {
			return err
		}
		var dels []zen.Mutation
		for _, r := range rows {
			if len(r.Key) == 9 && r.Key[8] == rowActive {
				continue
			}
			dels = append(dels, zen.Mutation{Key: r.Key, Delete: true})
		}
		if len(dels) > 0 {
			if err := w.state.Apply(ctx, dels); err != nil {
				return err
			}
		}
		if len(rows) < 1000 {
			return nil
		}
		start = append(append([]byte{}, rows[len(rows)-1].Key...), 0)
	}
}
