package worker

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
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
	// Engagement, when set, is read for every receiver's online features at scoring time and
	// written by the engagement handler (Register adds it). nil: no engagement features (every
	// receiver scores as one without engagement) and no engagement handler.
	Engagement *engagement.Store
	// NoOnlineFeatures keeps the engagement handler but skips the profile reads at scoring
	// time: every receiver scores as one without engagement (the fanout reads one row fewer
	// per receiver).
	NoOnlineFeatures bool
	// Experiment assigns receivers to experiment arms for the engagement handler's tags; with
	// an ExperimentScorer, pass its Experiment.
	Experiment engagement.Experiment
	// Lanes, when set, bound the fanout deliveries that read and score their receivers at
	// once: each holds a lane for that CPU-bound part and gives it back before its synced
	// write. A process that also serves pages passes the lanes its feed service's background
	// work takes (internal/quiet.Lanes), so that fanout cannot hold every processor while
	// pages wait for one. nil: no bound beyond the pinlater server's concurrency.
	Lanes Lanes
}

// Lanes bound work that runs at once, and may run it at a lower CPU priority
// (internal/quiet.Lanes).
type Lanes interface {
	// Do waits for a lane until ctx is done, then runs fn in it and returns once fn returned;
	// it returns ctx's error, fn not run, when no lane came free in time.
	Do(ctx context.Context, fn func()) error
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
	eng      *engagement.Store
	noOnline bool // Options.NoOnlineFeatures
	exp      engagement.Experiment
	lanes    Lanes // Options.Lanes; nil: none
	em       *engagementMetrics
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
	em, err := newEngagementMetrics(o.Reg)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	return &Worker{eng: o.Engagement, noOnline: o.NoOnlineFeatures, exp: o.Experiment, lanes: o.Lanes, em: em, g: g, pools: zen.NewPools(pools, o.Now), state: state, enq: enq, scorer: o.Scorer,
		feeds: o.Feeds, cfg: cfg, now: o.Now, log: o.Logger, m: m, lazyTask: zen.SameLog(pools, state),
		feats:  newFeatureCache(cfg.FeatureTTL, cfg.FeatureCacheSize, o.Now, m.featureHits, m.featureMisses),
		active: newFeatureCache(cfg.ActiveTTL, cfg.FeatureCacheSize, o.Now, m.activeHits, m.activeMisses)}, nil
}

// Pools returns the pools the worker writes.
func (w *Worker) Pools() *zen.Pools { return w.pools }

// Config returns the effective configuration (defaults filled in).
func (w *Worker) Config() Config { return w.cfg }

// Register registers the worker's handlers on a pinlater server: fanout, fanout-chunk,
// follow-backfill (also rebuilds), unfollow-cleanup, pin-delete, user-delete and touch, and with
// an engagement store engagement and impressions.
func (w *Worker) Register(r Registrar) {
	r.Handle(pinlater.TypeFanout, pinlater.Typed(w.HandleFanout))
	r.Handle(pinlater.TypeFanoutChunk, pinlater.Typed(w.HandleFanoutChunk))
	r.Handle(pinlater.TypeFollowBackfill, pinlater.Typed(w.HandleFollowBackfill))
	r.Handle(pinlater.TypeUnfollowCleanup, pinlater.Typed(w.HandleUnfollowCleanup))
	r.Handle(pinlater.TypePinDelete, pinlater.Typed(w.HandlePinDelete))
	r.Handle(pinlater.TypeUserDelete, pinlater.Typed(w.HandleUserDelete))
	r.Handle(pinlater.TypeTouch, pinlater.Typed(w.HandleTouch))
	if w.eng != nil {
		r.Handle(pinlater.TypeEngagement, pinlater.Typed(w.HandleEngagement))
		r.Handle(pinlater.TypeImpressions, pinlater.Typed(w.HandleImpressions))
	}
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
