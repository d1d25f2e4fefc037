package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// Fanout planning: a saved pin's receiver lists, split between inline delivery and chunk
// tasks, with a checkpoint per list so a rerun resumes where a dead run stopped; and the pin's
// facts, read once per fanout.

// receiverList is one edge list whose targets receive a pin.
type receiverList struct {
	from     zen.ID
	typ      zen.EdgeType
	src      zen.Source
	interest zen.ID
}

// HandleFanout handles a pin saved (new pin or repin): it splits the fanout to the followers of
// the author, of the board and of each interest into chunk tasks of Config.ChunkSize receivers,
// walking each follower list page by page (one page in memory at a time; chunks of lists longer
// than Config.HotFollowers go to the bulk queue), and puts the pins that share boards with it
// into the saver's related pool. With RelatedFor set, it instead puts the pin into that user's
// related pool (a recommender's suggestion). Running it twice enqueues the same chunk tasks
// (deduplicated by pinlater, and idempotent anyway) and writes the same rows.
func (w *Worker) HandleFanout(ctx context.Context, p pinlater.FanoutPayload) error {
	f, err := checkFanout(p)
	if err != nil {
		return err
	}
	pin, author, board, relatedFor := f.pin, f.author, f.board, f.relatedFor
	lists := f.receiverLists()
	obj, gone, err := w.getPin(ctx, pinlater.TypeFanout, pin)
	if err != nil || gone {
		if err == nil && relatedFor == 0 {
			// A run that died part-way may have left checkpoints; the fanout ends here.
			err = w.clearProgress(ctx, p, lists)
		}
		return err
	}
	if relatedFor != 0 {
		return w.insertRecommended(ctx, relatedFor, pin, author, board, p.CreatedMs)
	}
	// The task's writes up to its last one, Forget's, are lazy where the pools and the state
	// share one log: the inline lists' pool rows, their upkeep, the checkpoints' removal and the
	// saver's related pins are visible at once and made durable by Forget's synced write to the
	// same log, before the task is acknowledged (one fsync a task instead of one a list). A
	// machine crash before it leaves the task unacknowledged; its rerun writes the same rows.
	// The chunk tasks' enqueues and checkpoints stay synced (enqueueChunks).
	lctx := ctx
	if w.lazyTask {
		lctx = zen.Lazily(ctx)
	}
	// The counts the task needs, in one batched read (one round trip on HBase instead of one a
	// count): each list's receivers, and the pin's saves and likes for scoring.
	keys := make([]zen.ListKey, 0, len(lists)+2)
	for _, l := range lists {
		keys = append(keys, zen.ListKey{From: l.from, Type: l.typ})
	}
	keys = append(keys, zen.ListKey{From: pin, Type: zen.EdgePinBoards}, zen.ListKey{From: pin, Type: zen.EdgePinLikers})
	counts, err := w.g.CountEdgesMany(ctx, keys)
	if err != nil {
		return fmt.Errorf("fanout %d: %w", pin, err)
	}
	var progress []receiverList // lists with a checkpoint row
	// The pin's facts, from the object read above and those counts; its interests are read by
	// the first list delivered inline and reused by the others.
	facts := &pinFacts{}
	facts.counted(obj, author, counts[len(lists)], counts[len(lists)+1])
	for i, l := range lists {
		has, err := w.enqueueChunks(ctx, lctx, p, l, counts[i], facts)
		if err != nil {
			return err
		}
		if has {
			progress = append(progress, l)
		}
	}
	// Every list is fanned out (its chunk tasks are durable): the checkpoints go.
	if err := w.clearProgress(lctx, p, progress); err != nil {
		return err
	}
	if err := w.relatedForSaver(lctx, author, pin, board, p.CreatedMs); err != nil {
		return err
	}
	// The saver has the pin now: it leaves the saver's own pools, and stays out. Forget leaves a
	// forgotten tombstone in the saver's (user, pin) index row even when the pin is not in the
	// pools yet, so a fanout chunk of someone else's save of this pin that runs later (delayed,
	// retried, or re-run) cannot put it back, and neither can a chunk given back by the
	// generator. The alternative, each fanout chunk checking every receiver's own saves, costs a
	// graph read per receiver on the hottest path; this is one write per save, bounded by
	// Pools.Expire.
	//
	// It is the task's last write, synced (ctx, not lctx), so that it makes the lazy ones
	// before it durable.
	if _, err := w.pools.Forget(ctx, author, []zen.ID{pin}); err != nil {
		return fmt.Errorf("fanout %d: %w", pin, err)
	}
	w.m.observeDelay(w.now(), p.CreatedMs)
	w.m.tasks.WithLabelValues(pinlater.TypeFanout).Inc()
	return nil
}

// fanoutIDs are a fanout task's checked IDs.
type fanoutIDs struct {
	pinRefs
	relatedFor zen.ID
	interests  []zen.ID
}

// pinRefs are a fanout task's pin, its author and its board, checked.
type pinRefs struct{ pin, author, board zen.ID }

// checkPinRefs checks a task's pin, author and board IDs (task names it in the error).
func checkPinRefs(task string, pin, author, board uint64) (r pinRefs, err error) {
	if r.pin, err = checkID(task+" pin", pin, zen.TypePin); err != nil {
		return r, err
	}
	if r.author, err = checkID(task+" author", author, zen.TypeUser); err != nil {
		return r, err
	}
	if r.board, err = checkID(task+" board", board, zen.TypeBoard); err != nil {
		return r, err
	}
	return r, nil
}

// receiverLists are the lists a pin fans out to: its author's followers, its board's and each
// of its interests'.
func (f fanoutIDs) receiverLists() []receiverList {
	lists := []receiverList{
		{from: f.author, typ: zen.EdgeFollowedByUser, src: zen.SourceFollowing},
		{from: f.board, typ: zen.EdgeBoardFollowers, src: zen.SourceFollowing},
	}
	for _, in := range f.interests {
		lists = append(lists, receiverList{from: in, typ: zen.EdgeInterestFollowers, src: zen.SourceInterest, interest: in})
	}
	return lists
}

// checkFanout checks a fanout task's IDs; an error is invalid input.
func checkFanout(p pinlater.FanoutPayload) (f fanoutIDs, err error) {
	if f.pinRefs, err = checkPinRefs("fanout", p.Pin, p.Author, p.Board); err != nil {
		return f, err
	}
	f.interests = make([]zen.ID, 0, len(p.Interests))
	for _, v := range p.Interests {
		id, err := checkID("fanout interest", v, zen.TypeInterest)
		if err != nil {
			return f, err
		}
		f.interests = append(f.interests, id)
	}
	if p.RelatedFor != 0 {
		if f.relatedFor, err = checkID("fanout related_for", p.RelatedFor, zen.TypeUser); err != nil {
			return f, err
		}
	}
	return f, nil
}

// enqueueChunks walks list l (of n receivers, as counted when the task started) page by page
// (cursors only survive the page) and enqueues one chunk task per page. Once a chunk task is
// enqueued (durable: in the outbox) the cursor after it is checkpointed in the worker's state,
// so a fanout task that dies mid-list (a killed worker, a store error) resumes at the first
// page without a task, instead of listing and enqueueing a million-follower list again from
// the start.
//
// It reports whether the list has a checkpoint row (to be cleared when the fanout is done). A
// list delivered inline is written with lctx (HandleFanout: lazily where a later synced write
// of the task makes it durable); everything else with ctx.
func (w *Worker) enqueueChunks(ctx, lctx context.Context, p pinlater.FanoutPayload, l receiverList, n int64, facts *pinFacts) (bool, error) {
	if n == 0 {
		return false, nil
	}
	key := progressKey(p, l)
	cur, done, resumed, err := w.loadProgress(ctx, key)
	if err != nil {
		return false, fmt.Errorf("fanout %d: %w", p.Pin, err)
	}
	if done {
		return true, nil
	}
	if resumed {
		w.m.resumed.Inc()
	}
	var opts []pinlater.Option
	if n > w.cfg.HotFollowers {
		opts = append(opts, pinlater.Bulk())
	}
	if !resumed && n <= int64(w.cfg.InlineReceivers) {
		more, err := w.deliverChunk(lctx, pinlater.FanoutChunkPayload{
			Pin: p.Pin, Author: p.Author, Board: p.Board, Interest: uint64(l.interest),
			CreatedMs: p.CreatedMs, Source: uint8(l.src), ListFrom: uint64(l.from),
			EdgeType: uint16(l.typ), Limit: min(max(w.cfg.ChunkSize, w.cfg.InlineReceivers), zen.MaxEdgePage),
		}, facts)
		if err != nil {
			return false, fmt.Errorf("fanout %d: inline: %w", p.Pin, err)
		}
		w.m.inline.Inc()
		if !more {
			return false, nil
		}
		// The list grew past the page since it was counted: all of it goes out as chunk tasks,
		// the members already delivered again (their rows are rewritten, harmlessly).
	}
	checkpointed := false
	for {
		edges, next, err := w.g.ListEdges(ctx, l.from, l.typ, cur, w.cfg.ChunkSize, false)
		if err != nil {
			return resumed || checkpointed, fmt.Errorf("fanout %d: list %d/%d: %w", p.Pin, l.from, l.typ, err)
		}
		if len(edges) == 0 {
			return resumed || checkpointed, nil
		}
		t, err := pinlater.NewFanoutChunk(pinlater.FanoutChunkPayload{
			Pin: p.Pin, Author: p.Author, Board: p.Board, Interest: uint64(l.interest),
			CreatedMs: p.CreatedMs, Source: uint8(l.src), ListFrom: uint64(l.from),
			EdgeType: uint16(l.typ), Cursor: cur, Limit: w.cfg.ChunkSize,
		})
		if err != nil {
			return resumed || checkpointed, fmt.Errorf("fanout %d: chunk task: %w", p.Pin, err)
		}
		if _, err := w.enq.Enqueue(ctx, t, opts...); err != nil {
			return resumed || checkpointed, fmt.Errorf("fanout %d: enqueue chunk: %w", p.Pin, err)
		}
		w.m.chunks.Inc()
		// Only lists of more than one chunk pay for a checkpoint (a rerun of a one-chunk list
		// costs one listing); the last page marks the list done so that a rerun after a later
		// list failed does not list this one again.
		if next != "" || cur != "" {
			if err := w.saveProgress(ctx, key, next); err != nil {
				return resumed || checkpointed, fmt.Errorf("fanout %d: %w", p.Pin, err)
			}
			checkpointed = true
		}
		if next == "" {
			return resumed || checkpointed, nil
		}
		cur = next
	}
}

// progressKey is the checkpoint row of one receiver list of one fanout task: led by the list's
// owner (so it lives on that shard), then the pin and what else makes the fanout distinct (a
// repin of the pin by another saver, on another board, is another fanout):
//
//	from | 'c' | pin | edge type (2) | author (8) | board (8) | created ms (8) -> 'c' cursor, or 'd' when done
func progressKey(p pinlater.FanoutPayload, l receiverList) []byte {
	k := stateKey(l.from, rowProgress, zen.ID(p.Pin))
	k = binary.BigEndian.AppendUint16(k, uint16(l.typ))
	k = binary.BigEndian.AppendUint64(k, p.Author)
	k = binary.BigEndian.AppendUint64(k, p.Board)
	return binary.BigEndian.AppendUint64(k, uint64(p.CreatedMs))
}

// loadProgress reads a list's checkpoint: the cursor to resume at, or done.
func (w *Worker) loadProgress(ctx context.Context, key []byte) (cur string, done, found bool, err error) {
	v, err := w.state.Get(ctx, key)
	if errors.Is(err, zen.ErrNotFound) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("read fanout progress: %w", err)
	}
	switch {
	case len(v) == 1 && v[0] == 'd':
		return "", true, true, nil
	case len(v) > 1 && v[0] == 'c':
		return string(v[1:]), false, true, nil
	}
	// Not ours to read (a bug or a foreign row): start the list again, which is idempotent.
	w.log.Warn("fanout progress row unreadable; the list starts again", zap.Binary("key", key))
	return "", false, false, nil
}

// saveProgress checkpoints the cursor after the last page that has its chunk task ("" = done).
func (w *Worker) saveProgress(ctx context.Context, key []byte, next string) error {
	v := []byte("d")
	if next != "" {
		v = append([]byte("c"), next...)
	}
	if err := w.state.Apply(ctx, []zen.Mutation{{Key: key, Value: v}}); err != nil {
		return fmt.Errorf("checkpoint fanout progress: %w", err)
	}
	return nil
}

// clearProgress deletes the checkpoints of a fanout's lists once all of them are done (or the
// pin is gone).
func (w *Worker) clearProgress(ctx context.Context, p pinlater.FanoutPayload, lists []receiverList) error {
	if len(lists) == 0 {
		return nil
	}
	muts := make([]zen.Mutation, len(lists))
	for i, l := range lists {
		muts[i] = zen.Mutation{Key: progressKey(p, l), Delete: true}
	}
	if err := w.state.Apply(ctx, muts); err != nil {
		return fmt.Errorf("fanout %d: clear progress: %w", p.Pin, err)
	}
	return nil
}

// pinFacts is what a delivery reads about the pin itself (not about the list or the receivers):
// the same for every receiver list of one fanout task, so the lists it delivers inline read it
// once.
type pinFacts struct {
	loaded    bool
	known     bool // repin, saves and likes are set (counted); the interests are not yet read
	gone      bool // deleted: nothing is delivered
	repin     bool
	saves     int64
	likes     int64
	interests []zen.ID
}

// counted sets the facts a fanout task read itself: the live pin object obj and its saves and
// likes (author: the saver whose fanout this is). load then reads only the interests.
func (f *pinFacts) counted(obj zen.Object, author zen.ID, saves, likes int64) {
	// A repin: the saver (the task's author) is not the pin's original author.
	orig, ok := zen.DataID(obj.Data, "author")
	f.repin = ok && orig != author
	f.saves, f.likes, f.known = saves, likes, true
}

// load reads pin's facts (author: the saver whose fanout this is) unless they are loaded already.
func (f *pinFacts) load(ctx context.Context, w *Worker, pin, author zen.ID) error {
	if f.loaded {
		return nil
	}
	pi := &pinInfo{pin: pin}
	if f.known {
		if err := w.loadInterests(ctx, pi); err != nil {
			return fmt.Errorf("chunk %d: %w", pin, err)
		}
		f.interests, f.loaded = pi.interests, true
		return nil
	}
	obj, gone, err := w.getPin(ctx, pinlater.TypeFanoutChunk, pin)
	if err != nil {
		return err
	}
	if !gone {
		if err := w.loadPinInfo(ctx, pi); err != nil {
			return fmt.Errorf("chunk %d: %w", pin, err)
		}
		f.counted(obj, author, pi.saves, pi.likes)
		f.interests = pi.interests
	}
	f.loaded, f.gone = true, gone
	return nil
}
