package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/quiet"
	"github.com/smartfeed/smartfeed/zen"
)

// Service serves home feeds. It is safe for concurrent use.
type Service struct {
	primary, standby zen.Table
	gen              Generator
	enq              Enqueuer
	hedger           *hedge.Hedger
	log              *zap.Logger
	now              func() time.Time
	cfg              atomic.Pointer[Config]
	m                *metrics
	live             Liveness
	liveTimeout      time.Duration
	elig             Eligibility
	activity         Activity
	activityWait     time.Duration
	indexShards      int
	gate             *StalenessGate
	// incarnation names this Service in the prepared rows it writes (pendingChunk.Owner): only
	// the incarnation that prepared a chunk shows it as fresh, and only once (own), so showing
	// it needs no write on the request (see servePrepared). Random, never 0.
	incarnation uint64
	own         ownedChunks

	// reenqueued remembers stale pending chunks already re-enqueued by this process.
	mu         sync.Mutex
	reenqueued map[string]time.Time
	// bg tracks background work (settling late chunks, enqueues) so tests can wait for it;
	// enqueues only the materialize enqueues.
	bg       sync.WaitGroup
	enqueues sync.WaitGroup
	// unsureGrace: see Deps.UnsureGrace. closing ends the waits of settleWhenSure.
	unsureGrace time.Duration
	closing     <-chan struct{}
	// trimEvery: see Deps.TrimEvery.
	trimEvery uint32
	// lastSeq is the last chunk sequence handed out by this process (see nextSeq).
	lastSeq   atomic.Uint64
	closeOnce sync.Once
	// preparing holds the users with a preparation scheduled, queued or running in this
	// process (zen.ID -> *prepEntry); prepared those for which this process recorded a prepared
	// chunk not yet served, a hint that the next first page should read before it calls the
	// generator. prepQueue holds the due preparations, taken by at most maxPreparing workers
	// (prepWorkers counts them). emptyPools holds the users whose pools every try of a
	// preparation found empty, and no generator call found filled since (no preparation is
	// scheduled for them; see prepare.go).
	preparing   sync.Map
	prepared    userMarks
	prepQueue   chan prepTask
	prepWorkers atomic.Int64
	emptyPools  userMarks
	// asked holds when this process last asked the generator for each user's chunk (by
	// Deps.Now; see Config.MinChunkInterval).
	asked userMarks
	// visits holds when each user's last first page came to this process (kept only with
	// Config.PrepareReturning; see returning).
	visits userMarks
	// active holds the users whose activity hook answered "not rebuilding" lately, and when
	// (see activeAge).
	active userMarks
	// inlineRunning counts the inline materialization workers of this process (see
	// Config.InlineMaterialize); matQueue holds the served chunks waiting for one.
	inlineRunning atomic.Int64
	matQueue      chan MaterializeTask
	// closeEnqueueFailed: an enqueue of a queued chunk at shutdown failed; the others are left
	// to the recovery pass (materializeQueued).
	closeEnqueueFailed atomic.Bool
	// generating counts the first pages waiting on the generator (Config.MaxGenerating).
	generating atomic.Int64
	// lanes bounds the background work running at once in this process (preparations and
	// inline materializations, and whatever else shares Deps.Lanes; see inLane).
	lanes *quiet.Lanes
	// quiet and quietBound: see Deps.Quiet. closingCtx is done once Close is called (closing is
	// its Done channel).
	quiet      Quiet
	quietBound time.Duration
	closingCtx context.Context
	stopAll    context.CancelFunc
	// adm bounds the GetFeed calls running and waiting (Config.MaxInflight).
	adm admission
	// head caches the users' feed heads (Deps.HeadCacheBytes); headCounter numbers the head
	// versions this process writes.
	head        *headCache
	headCounter atomic.Uint64
}

// New returns a Service.
func New(d Deps, c Config) (*Service, error) {
	if d.Primary == nil || d.Standby == nil || d.Generator == nil || d.Enqueuer == nil {
		return nil, errors.New("feedsvc: primary, standby, generator and enqueuer are required")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Hedger == nil {
		h, err := hedge.New(hedge.DefaultPolicy(), hedge.Options{Registerer: d.Registerer})
		if err != nil {
			return nil, err
		}
		d.Hedger = h
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	d.Enqueuer = timedEnqueuer{Enqueuer: d.Enqueuer, m: m}
	if err := d.setDefaults(); err != nil {
		return nil, err
	}
	head, err := newHeadCache(d.HeadCacheBytes, d.Registerer)
	if err != nil {
		return nil, err
	}
	if d.IndexShards < 0 || d.IndexShards > maxIndexShards {
		return nil, fmt.Errorf("feedsvc: index shards %d is not in [1, %d]", d.IndexShards, maxIndexShards)
	}
	s := &Service{primary: d.Primary, standby: d.Standby, gen: d.Generator, enq: d.Enqueuer,
		hedger: d.Hedger, log: d.Logger, now: d.Now, m: m, reenqueued: map[string]time.Time{},
		live: d.Liveness, liveTimeout: d.LiveTimeout, elig: d.Eligibility, activity: d.Activity, activityWait: d.ActivityWait,
		indexShards: d.IndexShards, gate: d.StandbyGate, incarnation: rand.Uint64() | 1, unsureGrace: d.UnsureGrace,
		trimEvery: uint32(d.TrimEvery), prepQueue: make(chan prepTask, maxPrepQueue), matQueue: make(chan MaterializeTask, maxMaterializeQueue),
		lanes: d.Lanes, quiet: d.Quiet, quietBound: d.QuietBound, head: head}
	s.closingCtx, s.stopAll = context.WithCancel(context.Background())
	s.closing = s.closingCtx.Done()
	s.prepared.max, s.asked.max, s.active.max = maxPreparedHints, maxPreparedHints, maxActiveUsers
	s.emptyPools.max, s.visits.max = maxPreparedHints, maxPreparedHints
	s.own.max = maxPreparedHints
	s.cfg.Store(&c)
	return s, nil
}

// Config returns the current knobs.
func (s *Service) Config() Config { return *s.cfg.Load() }

// SetConfig replaces the knobs; requests already running keep the ones they started with.
func (s *Service) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	s.cfg.Store(&c)
	return nil
}

// Hedger returns the hedger of the materialized reads (for the admin API).
func (s *Service) Hedger() *hedge.Hedger { return s.hedger }

// Wait blocks until the background work started so far (settling late chunks, enqueues,
// warm-up reads) is done.
func (s *Service) Wait() {
	s.bg.Wait()
	s.hedger.Wait()
}

// Close stops the background work that waits (the look at a chunk recording whose outcome was
// unknown: the recovery pass settles that chunk instead) and waits for the rest. The service
// still serves; Close is for shutdown. It is idempotent.
func (s *Service) Close() {
	s.closeOnce.Do(s.stopAll)
	s.Wait()
}

// FreshStatus says whether a page includes a fresh chunk, and if not, why.
type FreshStatus string

// The fresh statuses.
const (
	FreshIncluded       FreshStatus = "included"
	FreshEmpty          FreshStatus = "empty"             // the generator had nothing new
	FreshGeneratorError FreshStatus = "generator_error"   // the generator failed
	FreshTimeout        FreshStatus = "generator_timeout" // the generator missed its deadline
	FreshPersistFailed  FreshStatus = "persist_failed"    // the chunk could not be recorded
	// FreshPrimaryDown: the primary's circuit breaker is open, so no chunk was generated (it
	// could not be recorded); the pins stay in the pools. On the wire it is PERSIST_FAILED.
	FreshPrimaryDown  FreshStatus = "primary_down"
	FreshNotFirstPage FreshStatus = "not_first_page" // later pages are materialized only
	// FreshRecent: the generator was asked for this user's chunk less than
	// Config.MinChunkInterval ago; the page is the feed as it stands.
	FreshRecent FreshStatus = "recent"
	// FreshDeferred: Config.MaxGenerating first pages were waiting on the generator already,
	// or the chunks served were waiting for their materialization (materializeBehind); the page
	// is the feed as it stands, and the new pins stay in the pools.
	FreshDeferred FreshStatus = "deferred"
)

// Request asks for one page of a user's feed. An empty Cursor asks for the first page.
type Request struct {
	User     zen.ID
	Cursor   string
	PageSize int
}

// PageItem is one item of a page.
type PageItem struct {
	Item
	// Fresh is set for the items of the chunk generated for this request, and of the prepared
	// chunks it served (Config.PrepareAfter).
	Fresh bool
}

// Page is one page of a feed.
type Page struct {
	Items []PageItem
	// NextCursor continues after the last item; empty at the end of the feed.
	NextCursor  string
	FreshStatus FreshStatus
	// FreshDetail explains a status other than included (the error, say).
	FreshDetail string
	// From is the store that answered the materialized read; Hedged is set when the standby
	// was asked.
	From   hedge.Store
	Hedged bool
	// Rebuilding is set while the user's pools are rebuilt after a long absence (the feed may
	// be short for a moment; see Deps.Activity).
	Rebuilding bool
}

// GetFeed returns one page of the user's home feed. The first page puts a fresh chunk from the
// generator (bounded by the generator deadline) before the materialized feed; later pages read
// the materialized feed after the cursor. Errors wrap ErrInvalid or ErrUnavailable.
func (s *Service) GetFeed(ctx context.Context, req Request) (Page, error) {
	cfg := s.Config()
	start := time.Now()
	ctx = withPageStart(ctx, start)
	if req.User == 0 || !req.User.Valid() {
		return Page{}, fmt.Errorf("%w: user %d is not a valid ID", ErrInvalid, uint64(req.User))
	}
	if err := req.User.Check(zen.TypeUser); err != nil {
		return Page{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	size := req.PageSize
	if size == 0 {
		size = cfg.DefaultPageSize
	}
	if size < 1 || size > cfg.MaxPageSize {
		return Page{}, fmt.Errorf("%w: page size %d is not in [1, %d]", ErrInvalid, req.PageSize, cfg.MaxPageSize)
	}
	var after *position
	if req.Cursor != "" {
		p, err := decodeCursor(req.User, req.Cursor)
		if err != nil {
			return Page{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		after = &p
	}
	limit, err := s.admit(ctx, cfg)
	if err != nil {
		s.m.observe(ctx, Page{}, err, time.Since(start))
		return Page{}, err
	}
	defer s.adm.release(limit)
	// A deleted or never-existing user has no feed (checked where the graph is at hand).
	if s.live != nil {
		lstart := time.Now()
		live, err := s.live.Live(ctx, []zen.ID{req.User})
		s.m.observeStage(stageUserLive, time.Since(lstart))
		if err == nil && !live[req.User] {
			return Page{}, fmt.Errorf("%w: user %d", ErrNoUser, uint64(req.User))
		}
	}
	rebuilding := s.touch(req.User)
	var page Page
	if after == nil {
		page, err = s.firstPage(ctx, cfg, req.User, size)
	} else {
		page, err = s.laterPage(ctx, req.User, *after, size)
	}
	if err == nil {
		tstart := time.Now()
		page.Rebuilding = rebuilding()
		s.m.observeStage(stageActivity, time.Since(tstart))
	}
	s.m.observe(ctx, page, err, time.Since(start))
	return page, err
}
