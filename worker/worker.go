package worker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// Enqueuer puts tasks in pinlater queues (*pinlater.Client satisfies it).
type Enqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// Registrar is where handlers are registered (*pinlater.Server satisfies it).
type Registrar interface {
	Handle(typ string, h pinlater.Handler)
}

// FeedRemover deletes a user's materialized feed (the feed service's, wired in by cmd); the
// worker calls it when a user is deleted.
type FeedRemover interface {
	DeleteFeed(ctx context.Context, user zen.ID) error
}

// Config tunes the worker. Zero values get the documented defaults (see withDefaults).
type Config struct {
	// ChunkSize is the number of receivers per fanout-chunk task (default 1000, max
	// pinlater.MaxChunkLimit).
	ChunkSize int
	// HotFollowers: a receiver list longer than this is fanned out on the bulk queue, so a hot
	// author never holds up the others (default 50,000).
	HotFollowers int64
	// InlineReceivers: a receiver list of at most this many (by its count) is delivered inside
	// the fanout task, not by a chunk task of its own: one task and one listing of the list
	// fewer for the common author (default ChunkSize; negative: always chunk tasks). Should
	// the list hold more than that after all (it grew since it was counted), the whole list
	// then goes out as chunk tasks.
	InlineReceivers int
	// PoolCap is the number of entries kept per (user, source); the lowest scores are trimmed
	// (default 800, Mastodon's MAX_ITEMS).
	PoolCap int
	// TrimEvery: a receiver's pools are trimmed and expired after 1 in TrimEvery inserts, chosen by
	// a hash of (user, pin) so a retry trims the same receivers (default 1024; 1 = every insert).
	// A pool may exceed PoolCap by about TrimEvery entries between trims; each trim reads all
	// the receiver's rows (up to PoolCap entries per source, their older rows, tombstones), so
	// a trim costs about (PoolCap×sources + TrimEvery)/TrimEvery rows read per insert: about 4
	// at 256, under 2 at 1024.
	TrimEvery int
	// TTL: pool entries whose pin was created longer ago than this expire (default 14 days).
	TTL time.Duration
	// InactiveAfter: receivers not seen for longer than this are skipped by fanout and rebuilt
	// when they return (default 14 days; negative = never skip). Users never seen are fanned out
	// to.
	InactiveAfter time.Duration
	// TouchEvery bounds how often Touch writes the last-active row (default 1 minute).
	TouchEvery time.Duration
	// RebuildTimeout: a rebuild marker older than this no longer reports Rebuilding (default 10
	// minutes).
	RebuildTimeout time.Duration
	// BackfillLimit is the number of a followed target's recent pins copied on follow and on
	// rebuild (default 100, GetStream's activity_copy_limit).
	BackfillLimit int
	// RebuildFollowees is the number of followees of each kind (users, boards, interests) a rebuild
	// backfills, most recent follows first (default 200).
	RebuildFollowees int
	// RelatedBoards, RelatedPerBoard and RelatedMax bound the related-pins walk of a save: the
	// saved pin's boards (default 20), the newest pins of each (default 50), the candidates kept
	// (default 50).
	RelatedBoards, RelatedPerBoard, RelatedMax int
	// MatchInterests is how many of a pin's interests are checked for interest match (default 4).
	MatchInterests int
	// PurgeMaxReceivers bounds the receivers a pin-delete visits per list (default 100,000);
	// beyond it the deleted pin is left to the read-side filter and the TTL.
	PurgeMaxReceivers int
	// FeatureTTL is how long the fanout keeps a receiver's scoring features (affinity for an
	// author, interest follows) once read, so that the next pins of that author or interest do
	// not read them again (default 1 minute; negative: read every time). A change made by
	// another process reaches that receiver's scores at most this late; who receives a pin is
	// decided by the last-active row, kept for ActiveTTL only (see featureCache).
	FeatureTTL time.Duration
	// ActiveTTL is how long the fanout keeps a receiver's last-active row once it read it saying
	// "deliver" (neither deleted nor inactive), so that the next pins to that receiver within
	// this time do not read it again (default 1s; negative: read for every pin). A row saying
	// "skip" is never kept. The price is that a user deleted by another process can still get
	// pins for this long (rows nobody reads: GetFeed refuses a deleted user), and one inactive
	// for InactiveAfter for this much longer (docs/worker.md, "Active cache").
	ActiveTTL time.Duration
	// FeatureCacheSize bounds the features kept, in entries of each of the cache's two
	// generations (default 262,144: about 10 MB each).
	FeatureCacheSize int
	// UserDeleteRecheck is how long after a user's deletion its second pass runs (see
	// HandleUserDelete). Default: the longest run of a fanout or materialization task (their
	// pinlater timeout), plus ActiveTTL, plus a minute: 11m1s with the defaults.
	UserDeleteRecheck time.Duration
}

// Defaults of Config's fields that the binary's configuration (internal/config) takes as its own.
const (
	// DefaultFeatureTTL is Config.FeatureTTL's default.
	DefaultFeatureTTL = time.Minute
	// DefaultActiveTTL is Config.ActiveTTL's default.
	DefaultActiveTTL = time.Second
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ChunkSize, 1000)
	c.ChunkSize = min(c.ChunkSize, pinlater.MaxChunkLimit, zen.MaxEdgePage)
	if c.HotFollowers <= 0 {
		c.HotFollowers = 50_000
	}
	if c.InlineReceivers == 0 {
		c.InlineReceivers = c.ChunkSize
	}
	def(&c.PoolCap, 800)
	def(&c.TrimEvery, 1024)
	defDur(&c.TTL, 14*24*time.Hour)
	defDur(&c.InactiveAfter, 14*24*time.Hour)
	defDur(&c.TouchEvery, time.Minute)
	defDur(&c.RebuildTimeout, 10*time.Minute)
	def(&c.BackfillLimit, 100)
	def(&c.RebuildFollowees, 200)
	def(&c.RelatedBoards, 20)
	def(&c.RelatedPerBoard, 50)
	def(&c.RelatedMax, 50)
	def(&c.MatchInterests, 4)
	def(&c.PurgeMaxReceivers, 100_000)
	defDur(&c.FeatureTTL, DefaultFeatureTTL)
	defDur(&c.ActiveTTL, DefaultActiveTTL)
	def(&c.FeatureCacheSize, 1<<18)
	c.BackfillLimit = min(c.BackfillLimit, zen.MaxEdgePage)
	c.RebuildFollowees = min(c.RebuildFollowees, zen.MaxEdgePage)
	c.RelatedBoards = min(c.RelatedBoards, zen.MaxEdgePage)
	c.RelatedPerBoard = min(c.RelatedPerBoard, zen.MaxEdgePage)
	return c
}

// Options are the optional collaborators of a Worker.
type Options struct {
	Scorer Scorer                // nil = the logistic model with DefaultWeights
	Feeds  FeedRemover           // nil = user delete leaves the materialized feed to its owner
	Now    func() time.Time      // nil = time.Now
	Logger *zap.Logger           // nil = no logging
	Reg    prometheus.Registerer // nil = no metrics registered
}

// Worker runs the fanout and upkeep handlers. It is safe for concurrent use.
type Worker struct {
	g      *zen.Graph
	pools  *zen.Pools
	state  zen.Table
	enq    Enqueuer
	scorer Scorer
	feeds  FeedRemover
	cfg    Config
	now    func() time.Time
	log    *zap.Logger
	m      *metrics
	feats  *featureCache // nil: features read every time
	active *featureCache // receivers' last-active rows that said "deliver"; nil: read every time
	// lazyTask: the pools and the worker's state share one sequential log (zen.SameLog), so a
	// fanout task's writes before its last one need not wait for their own fsync (HandleFanout).
	lazyTask bool
	// onInsert, when set, is called with each batch of entries written (OnInsert).
	onInsert atomic.Pointer[func([]zen.PoolEntry)]
}

// OnInsert sets fn to be called with each batch of pool entries once Pools.Insert has written
// them (nil: none): for monitoring, such as the benchmark's exact fanout-lag probe. fn runs on
// the fanout path, so it must be fast, and it must not keep es.
func (w *Worker) OnInsert(fn func(es []zen.PoolEntry)) {
	if fn == nil {
		w.onInsert.Store(nil)
		return
	}
	w.onInsert.Store(&fn)
}

// New returns a worker over graph g, the pools table, the worker's state table (StateTable) and
// an enqueuer for the tasks it spawns (fanout chunks, rebuilds).
func New(g *zen.Graph, pools, state zen.Table, enq Enqueuer, cfg Config, o Options) (*Worker, error) {
	if g == nil || pools == nil || state == nil || enq == nil {
		return nil, errors.New("new worker: graph, pools, state and enqueuer are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Scorer == nil {
		o.Scorer = &LogisticScorer{W: DefaultWeights()}
	}
	m, err := newMetrics(o.Reg)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Worker{g: g, pools: zen.NewPools(pools, o.Now), state: state, enq: enq, scorer: o.Scorer,
		feeds: o.Feeds, cfg: cfg, now: o.Now, log: o.Logger, m: m, lazyTask: zen.SameLog(pools, state),
		feats:  newFeatureCache(cfg.FeatureTTL, cfg.FeatureCacheSize, o.Now, m.featureHits, m.featureMisses),
		active: newFeatureCache(cfg.ActiveTTL, cfg.FeatureCacheSize, o.Now, m.activeHits, m.activeMisses)}, nil
}

// Pools returns the pools the worker writes.
func (w *Worker) Pools() *zen.Pools { return w.pools }

// Config returns the effective configuration (defaults filled in).
func (w *Worker) Config() Config { return w.cfg }

// Register registers the worker's handlers on a pinlater server: fanout, fanout-chunk,
// follow-backfill (also rebuilds), unfollow-cleanup, pin-delete and user-delete.
func (w *Worker) Register(r Registrar) {
	r.Handle(pinlater.TypeFanout, pinlater.Typed(w.HandleFanout))
	r.Handle(pinlater.TypeFanoutChunk, pinlater.Typed(w.HandleFanoutChunk))
	r.Handle(pinlater.TypeFollowBackfill, pinlater.Typed(w.HandleFollowBackfill))
	r.Handle(pinlater.TypeUnfollowCleanup, pinlater.Typed(w.HandleUnfollowCleanup))
	r.Handle(pinlater.TypePinDelete, pinlater.Typed(w.HandlePinDelete))
	r.Handle(pinlater.TypeUserDelete, pinlater.Typed(w.HandleUserDelete))
	r.Handle(pinlater.TypeTouch, pinlater.Typed(w.HandleTouch))
}

// HandleTouch runs Touch for a feed read a feed service in another process reported (its
// pinlater Activity). A payload that is not a user ID is archived, not retried.
func (w *Worker) HandleTouch(ctx context.Context, p pinlater.TouchPayload) error {
	user, err := checkID("touch user", p.User, zen.TypeUser)
	if err != nil {
		return err
	}
	_, err = w.Touch(ctx, user)
	return err
}

// PinlaterFeedRemover is the FeedRemover of a worker whose feed service runs in another process:
// it enqueues a pinlater "feed-delete" task, which the feed service's process runs (the critical
// queue). The user-delete job fails, and is retried, until the task is enqueued.
type PinlaterFeedRemover struct {
	Client Enqueuer
}

var _ FeedRemover = PinlaterFeedRemover{}

// DeleteFeed implements FeedRemover.
func (r PinlaterFeedRemover) DeleteFeed(ctx context.Context, user zen.ID) error {
	task, err := pinlater.NewFeedDelete(pinlater.FeedDeletePayload{User: uint64(user)})
	if err != nil {
		return fmt.Errorf("feed delete %d: %w", user, err)
	}
	if _, err := r.Client.Enqueue(ctx, task); err != nil {
		return fmt.Errorf("enqueue feed delete %d: %w", user, err)
	}
	return nil
}

// invalid marks bad input: the task is archived, not retried.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", pinlater.ErrInvalidPayload, fmt.Sprintf(format, args...))
}

func checkID(what string, v uint64, t zen.Type) (zen.ID, error) {
	id := zen.ID(v)
	if err := id.Check(t); err != nil {
		return 0, invalid("%s: %v", what, err)
	}
	return id, nil
}

func seqMillis(s seq.Seq) int64 {
	return new(big.Int).Quo(s.Big(), seq.Unit.Big()).Int64()
}

// ErrUnknownObject is wrapped by the error of a task that names an object this store never had:
// a task from another deployment sharing the Redis, or a producer publishing objects it did not
// create. The run fails (so the task is retried, then dead-lettered) and is logged and counted;
// it is never completed as if the object had been deleted.
var ErrUnknownObject = errors.New("object unknown to this store")

// getPin reads the pin object; gone is true when it is soft-deleted (such a pin is never fanned
// out), an ErrUnknownObject error when it is absent.
func (w *Worker) getPin(ctx context.Context, typ string, pin zen.ID) (o zen.Object, gone bool, err error) {
	o, err = w.g.Get(ctx, pin)
	if errors.Is(err, zen.ErrDeleted) {
		return o, true, nil
	}
	if errors.Is(err, zen.ErrNotFound) {
		w.m.unknown.WithLabelValues(typ).Inc()
		w.log.Warn("task names a pin this store does not have (another deployment's task, or a producer's mistake); failing it",
			zap.String("type", typ), zap.Stringer("pin", pin))
		return o, false, fmt.Errorf("%s: pin %d: %w", typ, pin, ErrUnknownObject)
	}
	if err != nil {
		return o, false, fmt.Errorf("get pin %d: %w", pin, err)
	}
	return o, false, nil
}

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
	pin, err := checkID("fanout pin", p.Pin, zen.TypePin)
	if err != nil {
		return err
	}
	author, err := checkID("fanout author", p.Author, zen.TypeUser)
	if err != nil {
		return err
	}
	board, err := checkID("fanout board", p.Board, zen.TypeBoard)
	if err != nil {
		return err
	}
	interests := make([]zen.ID, 0, len(p.Interests))
	for _, v := range p.Interests {
		id, err := checkID("fanout interest", v, zen.TypeInterest)
		if err != nil {
			return err
		}
		interests = append(interests, id)
	}
	var relatedFor zen.ID
	if p.RelatedFor != 0 {
		if relatedFor, err = checkID("fanout related_for", p.RelatedFor, zen.TypeUser); err != nil {
			return err
		}
	}
	lists := []receiverList{
		{from: author, typ: zen.EdgeFollowedByUser, src: zen.SourceFollowing},
		{from: board, typ: zen.EdgeBoardFollowers, src: zen.SourceFollowing},
	}
	for _, in := range interests {
		lists = append(lists, receiverList{from: in, typ: zen.EdgeInterestFollowers, src: zen.SourceInterest, interest: in})
	}
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

// pinInfo is what scoring needs to know about a pin, read once per task.
type pinInfo struct {
	pin, author, board, interest zen.ID
	createdMs                    int64
	saves, likes                 int64
	interests                    []zen.ID // up to Config.MatchInterests
	repin                        bool
}

func (w *Worker) loadPinInfo(ctx context.Context, pi *pinInfo) error {
	n, err := w.g.CountEdgesMany(ctx, []zen.ListKey{{From: pi.pin, Type: zen.EdgePinBoards}, {From: pi.pin, Type: zen.EdgePinLikers}})
	if err != nil {
		return fmt.Errorf("pin %d saves and likes: %w", pi.pin, err)
	}
	pi.saves, pi.likes = n[0], n[1]
	return w.loadInterests(ctx, pi)
}

// loadInterests reads the pin's interests (up to Config.MatchInterests) into pi.
func (w *Worker) loadInterests(ctx context.Context, pi *pinInfo) error {
	es, _, err := w.g.ListEdges(ctx, pi.pin, zen.EdgePinInterests, "", w.cfg.MatchInterests, false)
	if err != nil {
		return fmt.Errorf("pin %d interests: %w", pi.pin, err)
	}
	pi.interests = pi.interests[:0]
	for _, e := range es {
		pi.interests = append(pi.interests, e.To)
	}
	return nil
}

// noActiveRow stands for a receiver with no last-active row (never seen, or its row lost):
// delivered to, as a recent one.
const noActiveRow = math.MinInt64

// skipFor says whether a receiver whose last-active row holds last (noActiveRow: none) is
// skipped, and why: "deleted" (the tombstone), "inactive" (not seen for InactiveAfter), or ""
// (deliver).
func (w *Worker) skipFor(last, nowMs int64) string {
	switch {
	case last == noActiveRow:
		return ""
	case last == deletedUser:
		return "deleted"
	case w.cfg.InactiveAfter > 0 && nowMs-last > w.cfg.InactiveAfter.Milliseconds():
		return "inactive"
	}
	return ""
}

// receiver is one user about to get a pin, with the per-user features.
type receiver struct {
	user     zen.ID
	affinity int64
	match    float64
	skip     string // "" = deliver; otherwise why not
}

// loadReceivers reads, for each user, the last-active row, the affinity for author and the
// interest match of the pin, in two batched reads, and marks those to skip (deleted or inactive
// users). The affinity and interest follows come from feats where it has them, and with feats
// the last-active rows that said "deliver" from w.active (nil feats: everything is read).
func (w *Worker) loadReceivers(ctx context.Context, users []zen.ID, pi *pinInfo, followedInterest zen.ID, feats *featureCache) ([]receiver, error) {
	rs := make([]receiver, len(users))
	keys := make([][]byte, 0, 2*len(users))
	var active *featureCache
	if feats != nil {
		active = w.active
	}
	var actVals []int64
	var actCached []bool
	if active != nil {
		aks := make([]featureKey, len(users))
		for i, u := range users {
			aks[i] = featureKey{kind: featActive, user: u}
		}
		actVals, actCached = make([]int64, len(users)), make([]bool, len(users))
		active.get(aks, actVals, actCached)
	}
	actAt := make([]int, 0, len(users)) // the receivers whose last-active row is read
	for i, u := range users {
		rs[i].user = u
		if actCached == nil || !actCached[i] {
			actAt = append(actAt, i)
			keys = append(keys, stateKey(u, rowActive, 0))
		}
	}
	var affAt []int // the receivers whose affinity is read with the active rows
	if pi.author != 0 {
		var cached []bool
		if feats != nil {
			fks := make([]featureKey, len(users))
			for i, u := range users {
				fks[i] = featureKey{kind: featAffinity, user: u, of: pi.author}
			}
			vals := make([]int64, len(users))
			cached = make([]bool, len(users))
			feats.get(fks, vals, cached)
			for i := range rs {
				rs[i].affinity = vals[i]
			}
		}
		affAt = make([]int, 0, len(users))
		for i, u := range users {
			if cached == nil || !cached[i] {
				affAt = append(affAt, i)
				keys = append(keys, stateKey(u, rowAffinity, pi.author))
			}
		}
	}
	vals, err := zen.GetMany(ctx, w.state, keys)
	if err != nil {
		return nil, fmt.Errorf("read receivers: %w", err)
	}
	nowMs := w.now().UnixMilli()
	for i := range actCached {
		if actCached[i] {
			rs[i].skip = w.skipFor(actVals[i], nowMs)
		}
	}
	var keep []featureKey
	var keepVals []int64
	for j, i := range actAt {
		last, ok := i64(vals[j])
		if !ok {
			last = noActiveRow
		}
		if rs[i].skip = w.skipFor(last, nowMs); rs[i].skip == "" && active != nil {
			keep = append(keep, featureKey{kind: featActive, user: users[i]})
			keepVals = append(keepVals, last)
		}
	}
	active.put(keep, keepVals)
	for j, i := range affAt {
		rs[i].affinity, _ = i64(vals[len(actAt)+j])
	}
	if feats != nil && len(affAt) > 0 {
		put, got := make([]featureKey, len(affAt)), make([]int64, len(affAt))
		for j, i := range affAt {
			put[j], got[j] = featureKey{kind: featAffinity, user: users[i], of: pi.author}, rs[i].affinity
		}
		feats.put(put, got)
	}
	if len(pi.interests) == 0 {
		return rs, nil
	}
	// Whether each receiver follows each of the pin's interests: from the cache, and the rest in
	// one batched read of the follow edges, not a goroutine per receiver.
	var fks []featureKey
	var of []int
	hits := make([]int, len(rs))
	for i := range rs {
		if rs[i].skip != "" {
			continue
		}
		for _, in := range pi.interests {
			if in == followedInterest {
				hits[i]++
				continue
			}
			fks = append(fks, featureKey{kind: featInterest, user: rs[i].user, of: in})
			of = append(of, i)
		}
	}
	if len(fks) > 0 {
		// Without a cache every pair is read (get leaves cached all false).
		follows, cached := make([]int64, len(fks)), make([]bool, len(fks))
		feats.get(fks, follows, cached)
		var eks []zen.EdgeKey
		var missed []int
		for j, k := range fks {
			if !cached[j] {
				eks = append(eks, zen.EdgeKey{From: k.user, Type: zen.EdgeFollowsInterest, To: k.of})
				missed = append(missed, j)
			}
		}
		if len(eks) > 0 {
			has, err := w.g.HasEdges(ctx, eks)
			if err != nil {
				return nil, fmt.Errorf("interest match: %w", err)
			}
			put, putVals := make([]featureKey, len(missed)), make([]int64, len(missed))
			for m, j := range missed {
				if has[m] {
					follows[j] = 1
				}
				put[m], putVals[m] = fks[j], follows[j]
			}
			feats.put(put, putVals)
		}
		for j, f := range follows {
			if f == 1 {
				hits[of[j]]++
			}
		}
	}
	for i := range rs {
		if rs[i].skip == "" {
			rs[i].match = float64(hits[i]) / float64(len(pi.interests))
		}
	}
	return rs, nil
}

func (w *Worker) entry(r receiver, pi *pinInfo, src zen.Source, ageMs int64, co float64, reason string) zen.PoolEntry {
	f := Features{
		Source: src, AgeHours: float64(max(0, ageMs)) / float64(time.Hour.Milliseconds()),
		Affinity: float64(r.affinity), Saves: pi.saves, Likes: pi.likes, InterestMatch: r.match,
		CoOccurrence: co, Repin: pi.repin,
	}
	return zen.PoolEntry{User: r.user, Source: src, Score: w.scorer.Score(f), Pin: pi.pin,
		Author: pi.author, Board: pi.board, Interest: pi.interest, CreatedMs: pi.createdMs, Reason: reason}
}

// HandleFanoutChunk delivers one page of a fanout: it lists the receivers from (ListFrom,
// EdgeType) at Cursor, at most Limit of them, skips deleted and inactive users, scores the pin for
// each and inserts the page in one batch, then trims and expires the pools of about 1 in
// Config.TrimEvery receivers. Running it twice writes the same rows (Pools.Insert keeps one row
// per (user, pin), the better score).
func (w *Worker) HandleFanoutChunk(ctx context.Context, p pinlater.FanoutChunkPayload) error {
	if _, err := w.deliverChunk(ctx, p, nil); err != nil {
		return err
	}
	w.m.observeDelay(w.now(), p.CreatedMs)
	w.m.tasks.WithLabelValues(pinlater.TypeFanoutChunk).Inc()
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

// deliverChunk is HandleFanoutChunk's work, and a fanout task's for a list it delivers inline.
//
// With facts nil it delivers the chunk task's page: the list's edges in list order from
// p.Cursor, as enqueueChunks paged them. With facts (an inline list, whose facts an earlier
// list of the same fanout task may have read) it delivers the list's first p.Limit members in ID
// order (zen.Graph.Members: the point rows only, half the rows of a page of edges), and reports
// whether the list holds more.
func (w *Worker) deliverChunk(ctx context.Context, p pinlater.FanoutChunkPayload, facts *pinFacts) (more bool, err error) {
	pin, err := checkID("chunk pin", p.Pin, zen.TypePin)
	if err != nil {
		return false, err
	}
	author, err := checkID("chunk author", p.Author, zen.TypeUser)
	if err != nil {
		return false, err
	}
	board, err := checkID("chunk board", p.Board, zen.TypeBoard)
	if err != nil {
		return false, err
	}
	var interest zen.ID
	if p.Interest != 0 {
		if interest, err = checkID("chunk interest", p.Interest, zen.TypeInterest); err != nil {
			return false, err
		}
	}
	src := zen.Source(p.Source)
	if src != zen.SourceFollowing && src != zen.SourceInterest && src != zen.SourceRelated {
		return false, invalid("chunk source %d", p.Source)
	}
	et := zen.EdgeType(p.EdgeType)
	_, to, ok := et.Endpoints()
	if !ok || to != zen.TypeUser {
		return false, invalid("chunk edge type %d does not list users", p.EdgeType)
	}
	// Only lists delivered inline (at most InlineReceivers receivers: the common author, board
	// or interest) use the feature cache. A list long enough for chunk tasks would mostly fill
	// it with pairs that do not recur within the TTL: with it, a 1,000,000-follower fanout's
	// peak heap rose from 9–12 to 86 MiB (VmHWM 135 MiB, over TestFanoutMillionFollowers' bound).
	feats, inline := w.feats, facts != nil
	if !inline {
		facts, feats = &pinFacts{}, nil
	}
	if err := facts.load(ctx, w, pin, author); err != nil || facts.gone {
		return false, err
	}
	var users []zen.ID
	if inline {
		if users, more, err = w.g.Members(ctx, zen.ID(p.ListFrom), et, p.Limit); err != nil {
			return false, fmt.Errorf("chunk %d: members %d/%d: %w", pin, p.ListFrom, et, err)
		}
	} else {
		edges, _, err := w.g.ListEdges(ctx, zen.ID(p.ListFrom), et, p.Cursor, p.Limit, false)
		if errors.Is(err, zen.ErrBadCursor) {
			return false, invalid("chunk cursor: %v", err)
		}
		if err != nil {
			return false, fmt.Errorf("chunk %d: list %d/%d: %w", pin, p.ListFrom, et, err)
		}
		users = make([]zen.ID, 0, len(edges))
		for _, e := range edges {
			users = append(users, e.To)
		}
	}
	users = slices.DeleteFunc(users, func(u zen.ID) bool { return u == author })
	pi := &pinInfo{pin: pin, author: author, board: board, interest: interest, createdMs: p.CreatedMs,
		repin: facts.repin, saves: facts.saves, likes: facts.likes, interests: facts.interests}
	rs, err := w.loadReceivers(ctx, users, pi, interest, feats)
	if err != nil {
		return false, fmt.Errorf("chunk %d: %w", pin, err)
	}
	reason := "followed user"
	switch {
	case src == zen.SourceInterest:
		reason = "followed interest"
	case et == zen.EdgeBoardFollowers:
		reason = "followed board"
	}
	es := make([]zen.PoolEntry, 0, len(rs))
	for _, r := range rs {
		if r.skip != "" {
			w.m.skipped.WithLabelValues(r.skip).Inc()
			continue
		}
		es = append(es, w.entry(r, pi, src, 0, 0, reason))
	}
	if err := w.insert(ctx, es); err != nil {
		return false, fmt.Errorf("chunk %d: %w", pin, err)
	}
	return more, nil
}

// insert writes entries in one batch and then trims the pools of the receivers picked by
// trimPick.
func (w *Worker) insert(ctx context.Context, es []zen.PoolEntry) error {
	if len(es) == 0 {
		return nil
	}
	n, err := w.pools.Insert(ctx, es)
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	w.m.inserts.Add(float64(n))
	if fn := w.onInsert.Load(); fn != nil {
		(*fn)(es)
	}
	for _, e := range es {
		if !w.trimPick(e.User, e.Pin) {
			continue
		}
		if err := w.upkeep(ctx, e.User); err != nil {
			return err
		}
	}
	return nil
}

// trimPick picks about 1 in TrimEvery (user, pin) pairs, the same ones on every run.
func (w *Worker) trimPick(user, pin zen.ID) bool {
	if w.cfg.TrimEvery <= 1 {
		return true
	}
	h := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(uint64(user) >> (8 * i))
		b[8+i] = byte(uint64(pin) >> (8 * i))
	}
	h.Write(b[:])
	return h.Sum64()%uint64(w.cfg.TrimEvery) == 0
}

// upkeep expires user's entries older than the TTL and caps each of user's sources at PoolCap,
// in one read of user's pool index.
func (w *Worker) upkeep(ctx context.Context, user zen.ID) error {
	if _, _, err := w.pools.Upkeep(ctx, user, w.cfg.PoolCap, w.now().Add(-w.cfg.TTL).UnixMilli()); err != nil {
		return err
	}
	return nil
}

// insertRecommended puts a recommender's related pin into user's related pool.
func (w *Worker) insertRecommended(ctx context.Context, user, pin, author, board zen.ID, createdMs int64) error {
	pi := &pinInfo{pin: pin, author: author, board: board, createdMs: createdMs}
	if err := w.loadPinInfo(ctx, pi); err != nil {
		return fmt.Errorf("recommended %d for %d: %w", pin, user, err)
	}
	rs, err := w.loadReceivers(ctx, []zen.ID{user}, pi, 0, w.feats)
	if err != nil {
		return fmt.Errorf("recommended %d for %d: %w", pin, user, err)
	}
	if rs[0].skip == "deleted" {
		return nil
	}
	return w.insert(ctx, []zen.PoolEntry{w.entry(rs[0], pi, zen.SourceRelated, 0, 0, "recommended")})
}

// relatedForSaver puts into saver's related pool the pins that share boards with pin (board
// co-occurrence): the newest RelatedPerBoard pins of each of pin's other boards (up to
// RelatedBoards), ranked by the number of boards shared, at most RelatedMax of them, leaving out
// pins already on the saver's board and deleted pins.
func (w *Worker) relatedForSaver(ctx context.Context, saver, pin, board zen.ID, createdMs int64) error {
	boards, _, err := w.g.ListEdges(ctx, pin, zen.EdgePinBoards, "", w.cfg.RelatedBoards, true)
	if err != nil {
		return fmt.Errorf("related %d: boards: %w", pin, err)
	}
	co := map[zen.ID]int{}
	seenOn := map[zen.ID]zen.ID{}
	var order []zen.ID
	for _, b := range boards {
		if b.To == board {
			continue
		}
		ps, _, err := w.g.ListEdges(ctx, b.To, zen.EdgeBoardPins, "", w.cfg.RelatedPerBoard, true)
		if err != nil {
			return fmt.Errorf("related %d: board %d: %w", pin, b.To, err)
		}
		for _, e := range ps {
			if e.To == pin {
				continue
			}
			if co[e.To] == 0 {
				order = append(order, e.To)
				seenOn[e.To] = b.To
			}
			co[e.To]++
		}
	}
	if len(order) == 0 {
		return nil
	}
	// Most shared boards first; ties keep discovery order (newest board first, newest pin first).
	slices.SortStableFunc(order, func(a, b zen.ID) int { return co[b] - co[a] })
	objs, err := w.g.GetMany(ctx, order)
	if err != nil {
		return fmt.Errorf("related %d: pins: %w", pin, err)
	}
	rs, err := w.loadReceivers(ctx, []zen.ID{saver}, &pinInfo{}, 0, w.feats)
	if err != nil {
		return fmt.Errorf("related %d: %w", pin, err)
	}
	if rs[0].skip == "deleted" {
		return nil
	}
	var es []zen.PoolEntry
	for _, c := range order {
		if len(es) >= w.cfg.RelatedMax {
			break
		}
		o, ok := objs[c]
		if !ok {
			continue // deleted
		}
		if _, err := w.g.HasEdge(ctx, c, zen.EdgePinBoards, board); err == nil {
			continue // already on the saver's board
		} else if !errors.Is(err, zen.ErrNotFound) {
			return fmt.Errorf("related %d: %w", pin, err)
		}
		pi := pinFromObject(o, seenOn[c])
		if err := w.loadPinInfo(ctx, &pi); err != nil {
			return fmt.Errorf("related %d: %w", pin, err)
		}
		r := rs[0]
		if pi.author != 0 {
			if r.affinity, err = w.Affinity(ctx, saver, pi.author); err != nil {
				return err
			}
		}
		es = append(es, w.entry(r, &pi, zen.SourceRelated, createdMs-pi.createdMs, float64(co[c]), "related to a saved pin"))
	}
	return w.insert(ctx, es)
}

// pinFromObject reads the pin fields the worker uses from a pin object: "author" (user ID),
// "board" (board ID) and "created_ms" (int). Absent fields fall back to board (the board it
// was found on) and 0.
func pinFromObject(o zen.Object, board zen.ID) pinInfo {
	pi := pinInfo{pin: o.ID, board: board}
	if a, ok := zen.DataID(o.Data, "author"); ok && a.Check(zen.TypeUser) == nil {
		pi.author = a
	}
	if b, ok := zen.DataID(o.Data, "board"); ok && b.Check(zen.TypeBoard) == nil && board == 0 {
		pi.board = b
	}
	switch v := o.Data["created_ms"].(type) {
	case float64:
		pi.createdMs = int64(v)
	case int64:
		pi.createdMs = v
	case int:
		pi.createdMs = int64(v)
	case interface{ Int64() (int64, error) }:
		pi.createdMs, _ = v.Int64()
	case string:
		pi.createdMs, _ = strconv.ParseInt(v, 10, 64)
	}
	return pi
}
