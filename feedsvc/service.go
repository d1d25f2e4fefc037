package feedsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// Generator makes chunks of new pins and settles them. The generator package implements it
// through an adapter in cmd/smartfeed; feedsvc does not import it.
type Generator interface {
	// GenerateChunk takes the next chunk of new pins for user from the pools.
	GenerateChunk(ctx context.Context, user zen.ID) (Chunk, error)
	// Settle closes an in-flight chunk: delivered=true once it is materialized, false to
	// return its pins to the pools.
	Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error
}

// Enqueuer schedules the materialize job (pinlater in production).
type Enqueuer interface {
	EnqueueMaterialize(ctx context.Context, t MaterializeTask) error
}

// ErrInvalid is wrapped by errors about the caller's input (user, cursor, page size).
var ErrInvalid = errors.New("invalid argument")

// ErrNoUser is wrapped when the user does not exist or was deleted.
var ErrNoUser = errors.New("no such user")

// ErrUnavailable is wrapped when neither the primary nor the standby could answer.
var ErrUnavailable = errors.New("feed unavailable")

// Config holds the service's live-tunable knobs other than the hedging policy.
type Config struct {
	// GeneratorDeadline bounds the generator call of a first page. Default 150ms.
	GeneratorDeadline time.Duration `json:"generator_deadline"`
	// PersistTimeout bounds recording a served chunk as pending. Default 200ms.
	PersistTimeout time.Duration `json:"persist_timeout"`
	// MaxItems is the materialized feed's maximum length. Default 1000.
	MaxItems int `json:"max_items"`
	// DefaultPageSize is used when a request asks for 0. Default 25.
	DefaultPageSize int `json:"default_page_size"`
	// MaxPageSize is the largest page. Default 200.
	MaxPageSize int `json:"max_page_size"`
	// StalePending is how old a pending chunk must be before a read re-enqueues its
	// materialization (the job was lost). Default 30s.
	StalePending time.Duration `json:"stale_pending"`
	// PrepareAfter, when positive, prepares the user's next chunk this long after a first page:
	// the generator runs in the background and the chunk is recorded, synced, as a prepared
	// row at the top of the user's feed. The next first page serves it as fresh with no
	// generator call and no write before the answer (docs/read-path.md). 0 (the default)
	// prepares nothing.
	PrepareAfter time.Duration `json:"prepare_after"`
	// PreparedMaxAge: a prepared chunk older than this is still served fresh, but beside a new
	// chunk from the generator (the pools have had time to fill again). Default 30s.
	PreparedMaxAge time.Duration `json:"prepared_max_age"`
	// MinChunkInterval is the least time between two generator calls for one user in this
	// process (a first page's or a preparation's). A first page sooner than that after the
	// last call serves the feed as it stands, prepared chunks included, with FreshRecent
	// instead of asking the generator again; a preparation due sooner waits for it. A user who
	// reloads ten times a second gets one chunk a second, not ten chunks of the few pins that
	// came meanwhile, and the reloads cost a read each. 0 (the default) bounds nothing.
	MinChunkInterval time.Duration `json:"min_chunk_interval"`
	// InlineMaterialize is how many served chunks this process materializes at once itself,
	// in the background after the page is answered, instead of enqueueing a materialize job;
	// a chunk past it, or whose inline run fails, is enqueued as before. The process that
	// serves the feed is the one that runs its materialize jobs, so this moves no work, and
	// saves the job's round trips through Redis (enqueue, dequeue, completion) per page.
	// Nothing is less durable: the chunk's pending row is written first, and a process that
	// dies before it is materialized leaves it to a later read or the recovery pass, as a lost
	// job would. Default 4; 0 enqueues every chunk.
	InlineMaterialize int `json:"inline_materialize"`
	// MaxInflight is how many GetFeed calls this process runs at once; a call past it waits in
	// line (at most MaxInflight of them) up to AdmissionWait for a slot, and is then shed:
	// RESOURCE_EXHAUSTED with a retry delay, nothing done (docs/reliability.md, "Overload").
	// 0 (the default) means DefaultMaxInflight(), 64 per GOMAXPROCS.
	MaxInflight int `json:"max_inflight"`
	// AdmissionWait is how long a GetFeed call past MaxInflight waits for a slot before it is
	// shed; 0 sheds it at once. Default 50ms.
	AdmissionWait time.Duration `json:"admission_wait"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		GeneratorDeadline: 150 * time.Millisecond,
		PersistTimeout:    200 * time.Millisecond,
		MaxItems:          1000,
		DefaultPageSize:   25,
		MaxPageSize:       200,
		StalePending:      30 * time.Second,
		PreparedMaxAge:    30 * time.Second,
		InlineMaterialize: 4,
		AdmissionWait:     DefaultAdmissionWait,
	}
}

// DefaultAdmissionWait is Config.AdmissionWait's default.
const DefaultAdmissionWait = 50 * time.Millisecond

// MaxMaxInflight is the largest Config.MaxInflight.
const MaxMaxInflight = 1 << 20

// Validate reports the first knob out of range.
func (c Config) Validate() error {
	switch {
	case c.GeneratorDeadline <= 0 || c.GeneratorDeadline > time.Minute:
		return fmt.Errorf("config: generator deadline %v is not in (0, 1m]", c.GeneratorDeadline)
	case c.PersistTimeout <= 0 || c.PersistTimeout > time.Minute:
		return fmt.Errorf("config: persist timeout %v is not in (0, 1m]", c.PersistTimeout)
	case c.MaxItems < 1 || c.MaxItems > 1<<20:
		return fmt.Errorf("config: max items %d is not in [1, 2^20]", c.MaxItems)
	case c.MaxPageSize < 1 || c.MaxPageSize > 10000:
		return fmt.Errorf("config: max page size %d is not in [1, 10000]", c.MaxPageSize)
	case c.DefaultPageSize < 1 || c.DefaultPageSize > c.MaxPageSize:
		return fmt.Errorf("config: default page size %d is not in [1, max page size]", c.DefaultPageSize)
	case c.StalePending <= 0:
		return fmt.Errorf("config: stale pending %v is not positive", c.StalePending)
	case c.PrepareAfter < 0 || c.PrepareAfter > time.Hour:
		return fmt.Errorf("config: prepare after %v is not in [0, 1h]", c.PrepareAfter)
	case c.PreparedMaxAge <= 0 || c.PreparedMaxAge > time.Hour:
		return fmt.Errorf("config: prepared max age %v is not in (0, 1h]", c.PreparedMaxAge)
	case c.MinChunkInterval < 0 || c.MinChunkInterval > time.Hour:
		return fmt.Errorf("config: min chunk interval %v is not in [0, 1h]", c.MinChunkInterval)
	case c.InlineMaterialize < 0 || c.InlineMaterialize > 1024:
		return fmt.Errorf("config: inline materialize %d is not in [0, 1024]", c.InlineMaterialize)
	case c.MaxInflight < 0 || c.MaxInflight > MaxMaxInflight:
		return fmt.Errorf("config: max inflight %d is not in [0, %d]", c.MaxInflight, MaxMaxInflight)
	case c.AdmissionWait < 0 || c.AdmissionWait > time.Minute:
		return fmt.Errorf("config: admission wait %v is not in [0, 1m]", c.AdmissionWait)
	}
	return nil
}

// Deps are the service's collaborators.
type Deps struct {
	// Primary and Standby hold the materialized feed ("feed" table). Writes go to Primary
	// only (wrap it with a Replicator to copy them to Standby, unless the database replicates
	// them itself); reads are hedged.
	Primary, Standby zen.Table
	// StandbyGate, when set, is the Standby wrapped in a StalenessGate; the knobs file's
	// standby.max_staleness tunes it. Set Standby to the gate too.
	StandbyGate *StalenessGate
	Generator   Generator
	Enqueuer    Enqueuer
	// Hedger runs the speculative reads; nil builds one with hedge.DefaultPolicy.
	Hedger *hedge.Hedger
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now defaults to time.Now.
	Now func() time.Time
	// Liveness, when set, drops deleted pins from materialized reads (see filterLive: a
	// Liveness error serves the page unfiltered). LiveTimeout bounds each check; 0 means
	// DefaultLiveTimeout.
	Liveness    Liveness
	LiveTimeout time.Duration
	// Eligibility, when set, drops from prepared chunks the pins whose follow was removed or
	// which were deleted since they were composed (see filterRemoved; without it, Liveness
	// alone drops their deleted pins). Its check is bounded by LiveTimeout too.
	Eligibility Eligibility
	// Activity, when set, is called (in the background) on every GetFeed; its "rebuilding"
	// answer is reported in Page.Rebuilding if it arrives within ActivityWait of the request's
	// start (0 means DefaultActivityWait), else the page says false.
	Activity     Activity
	ActivityWait time.Duration
	// IndexShards is the number of shards (0 to IndexShards-1) whose pending-chunk index
	// RecoverAll walks; it must cover every shard that holds users. 0 means
	// DefaultIndexShards (4096, the default shard map); at most 65536.
	IndexShards int
	// UnsureGrace is how long the service waits before it looks whether a chunk recording
	// whose write failed with no answer (a timeout: it may still land) did land, and settles
	// the chunk by what it finds. Longer than any store write stays in flight; 0 means
	// DefaultUnsureGrace.
	UnsureGrace time.Duration
	// TrimEvery is how often materializing a chunk trims the feed: after 1 chunk in TrimEvery,
	// picked by the chunk's ID, so that a retried materialization decides the same. A trim
	// reads the user's whole feed (up to Config.MaxItems rows and the done markers), so doing
	// it after every chunk costs a read that grows with the feed; between trims the feed may
	// exceed MaxItems by the chunks since the last one (about TrimEvery of them). 0 means
	// DefaultTrimEvery; 1 trims after every chunk.
	TrimEvery int
	// BackgroundLanes bounds the read path's background tasks (preparations, inline
	// materializations) running at once in this process, so that they cannot hold every
	// processor while pages wait for one (docs/read-path.md, "Background work waits its
	// turn"). 0 means half of GOMAXPROCS, at least 1, which suits an embedded store, where
	// that work is the processors'; at most MaxBackgroundLanes, which is no bound beyond the
	// preparations' and Config.InlineMaterialize's own (a store across the network, where the
	// work waits on RPCs).
	BackgroundLanes int
	// Quiet, when set, holds the read path's background work (preparations, inline
	// materializations) until no request of the process is in flight, for at most QuietBound
	// (0 means DefaultQuietBound), so that it takes the gaps between requests rather than the
	// processors a request and its answer wait for (internal/quiet.Gate; docs/read-path.md,
	// "Background work takes the gaps"). nil: background work starts as soon as it has a lane.
	Quiet      Quiet
	QuietBound time.Duration
	// HeadCacheBytes bounds the memory of the feed-head cache: each active user's last first-page
	// read of the primary, served again while the user's head version row says the feed has
	// not changed (headcache.go). 0 means DefaultHeadCacheBytes; negative caches nothing (the
	// versions are written all the same, for other processes over the same store).
	HeadCacheBytes int64
}

// Quiet tells background work when the process's requests leave the processors free
// (internal/quiet.Gate).
type Quiet interface {
	// Wait returns once no request is in flight, after bound, or when ctx is done, and reports
	// whether it found such a gap.
	Wait(ctx context.Context, bound time.Duration) bool
}

// DefaultQuietBound is Deps.QuietBound's default: background work is delayed by at most this
// long when requests leave no gap (a steady high rate), never starved.
const DefaultQuietBound = 10 * time.Millisecond

// DefaultUnsureGrace is Deps.UnsureGrace's default: beyond the HBase client's RPC timeouts.
const DefaultUnsureGrace = 30 * time.Second

// MaxBackgroundLanes is Deps.BackgroundLanes's largest value.
const MaxBackgroundLanes = 1024

// DefaultTrimEvery is Deps.TrimEvery's default.
const DefaultTrimEvery = 8

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
	// process (zen.ID -> struct{}); prepared those for which this process recorded a prepared
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
	// active holds the users whose activity hook answered "not rebuilding" lately, and when
	// (see activeAge).
	active userMarks
	// inlineRunning counts the materializations running in this process (see
	// Config.InlineMaterialize).
	inlineRunning atomic.Int64
	// lanes bounds the read path's background work running at once in this process
	// (preparations and inline materializations; see acquireLane).
	lanes chan struct{}
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
	if d.LiveTimeout <= 0 {
		d.LiveTimeout = DefaultLiveTimeout
	}
	if d.ActivityWait <= 0 {
		d.ActivityWait = DefaultActivityWait
	}
	if d.IndexShards == 0 {
		d.IndexShards = DefaultIndexShards
	}
	if d.UnsureGrace <= 0 {
		d.UnsureGrace = DefaultUnsureGrace
	}
	if d.TrimEvery == 0 {
		d.TrimEvery = DefaultTrimEvery
	}
	if d.TrimEvery < 1 || d.TrimEvery > 1<<16 {
		return nil, fmt.Errorf("feedsvc: trim every %d is not in [1, 65536]", d.TrimEvery)
	}
	if d.BackgroundLanes == 0 {
		d.BackgroundLanes = defaultBackgroundLanes()
	}
	if d.BackgroundLanes < 1 || d.BackgroundLanes > MaxBackgroundLanes {
		return nil, fmt.Errorf("feedsvc: background lanes %d is not in [1, %d]", d.BackgroundLanes, MaxBackgroundLanes)
	}
	if d.QuietBound == 0 {
		d.QuietBound = DefaultQuietBound
	}
	if d.QuietBound < 0 || d.QuietBound > time.Second {
		return nil, fmt.Errorf("feedsvc: quiet bound %v is not in [0, 1s]", d.QuietBound)
	}
	if d.HeadCacheBytes == 0 {
		d.HeadCacheBytes = DefaultHeadCacheBytes
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
		trimEvery: uint32(d.TrimEvery), prepQueue: make(chan prepTask, maxPrepQueue),
		lanes: make(chan struct{}, d.BackgroundLanes), quiet: d.Quiet, quietBound: d.QuietBound, head: head}
	s.closingCtx, s.stopAll = context.WithCancel(context.Background())
	s.closing = s.closingCtx.Done()
	s.prepared.max, s.asked.max, s.active.max = maxPreparedHints, maxPreparedHints, maxActiveUsers
	s.emptyPools.max = maxPreparedHints
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

// entry is one item read from the feed with its position.
type entry struct {
	Item
	at position
	// prepared marks an item of a prepared chunk not served yet: checked against the
	// removals before it is shown (filterRemoved).
	prepared bool
}

type genResult struct {
	c   Chunk
	err error
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

func (s *Service) laterPage(ctx context.Context, user zen.ID, after position, size int) (Page, error) {
	res, out, err := s.read(ctx, user, &after, size)
	if err != nil {
		return Page{}, err
	}
	page := Page{FreshStatus: FreshNotFirstPage, From: out.From, Hedged: out.Hedged}
	s.fill(&page, user, nil, res, size, nil)
	return page, nil
}

func (s *Service) firstPage(ctx context.Context, cfg Config, user zen.ID, size int) (Page, error) {
	pageStart := time.Now()
	if state, why := s.hedger.BreakerStatus(); state == hedge.BreakerOpen {
		// The primary is failing or hanging (its breaker opened on the reads). A chunk could not
		// be recorded on it before the answer: generating one would take pins from the pools,
		// wait PersistTimeout on the primary, and give them back. Serve the materialized feed
		// (the breaker routes the read to the standby first) without calling the generator.
		start := time.Now()
		res, out, err := s.read(ctx, user, nil, size)
		s.m.observeStage(stageRead, time.Since(start))
		if err != nil {
			return Page{}, err
		}
		page := Page{From: out.From, Hedged: out.Hedged, FreshStatus: FreshPrimaryDown,
			FreshDetail: "the primary feed store's circuit breaker is open (" + why + "): no fresh chunk can be recorded"}
		s.fill(&page, user, nil, res, size, nil)
		return page, nil
	}
	type readResult struct {
		res pageRead
		out hedge.Outcome
		err error
	}
	readCh := make(chan readResult, 1)
	if cfg.PrepareAfter > 0 && s.maybePrepared(user) {
		// This process prepared the user's next chunk: read first, and serve it if it is young,
		// with no generator call.
		start := time.Now()
		res, out, err := s.read(ctx, user, nil, size)
		s.m.observeStage(stageRead, time.Since(start))
		if err != nil {
			return Page{}, err
		}
		if len(res.prepared) == 0 || res.prepared[0].pc.Owner != s.incarnation {
			// Served or materialized meanwhile; or the newest is another incarnation's, which
			// the page through the generator below shows as feed items.
			s.forgetPrepared(user)
		} else if s.now().UnixMilli()-res.prepared[0].pc.ServedMs <= cfg.PreparedMaxAge.Milliseconds() {
			page := Page{From: out.From, Hedged: out.Hedged, FreshStatus: FreshEmpty}
			served := s.servePrepared(ctx, user, res.prepared, prepServed)
			if len(served) > 0 {
				page.FreshStatus = FreshIncluded
			}
			s.fill(&page, user, nil, res, size, served)
			s.prepareLater(user, cfg, 0)
			s.m.observeStage(stagePagePrepared, time.Since(pageStart))
			return page, nil
		}
		readCh <- readResult{res, out, nil}
	}
	if since, ok := s.askedWithin(user, cfg.MinChunkInterval); ok {
		// The generator was asked for this user's chunk a moment ago: serve the feed as it
		// stands, and the prepared chunks in it, with no generator call.
		var rd readResult
		if len(readCh) > 0 {
			rd = <-readCh
		} else {
			start := time.Now()
			rd.res, rd.out, rd.err = s.read(ctx, user, nil, size)
			s.m.observeStage(stageRead, time.Since(start))
		}
		if rd.err != nil {
			return Page{}, rd.err
		}
		page := Page{From: rd.out.From, Hedged: rd.out.Hedged, FreshStatus: FreshRecent,
			FreshDetail: fmt.Sprintf("the generator was asked %v ago (feed.min_chunk_interval %v)", since, cfg.MinChunkInterval)}
		var served map[uint64]bool
		if len(rd.res.prepared) > 0 {
			if served = s.servePrepared(ctx, user, rd.res.prepared, prepServed); len(served) > 0 {
				page.FreshStatus, page.FreshDetail = FreshIncluded, ""
			}
		}
		// The next chunk is prepared once the interval allows (a no-op when one is scheduled, or
		// when the preparations found the pools empty: then the first visit after the interval
		// asks the generator itself), also when nothing was served.
		s.prepareLater(user, cfg, 0)
		s.fill(&page, user, nil, rd.res, size, served)
		s.m.observeStage(stagePageRecent, time.Since(pageStart))
		return page, nil
	}
	// The generator runs with its own deadline; if it ignores the deadline, the request leaves
	// without it and a background reader settles whatever it returns late.
	s.noteAsked(user)
	genCh := make(chan genResult, 1)
	gctx, gcancel := context.WithTimeout(ctx, cfg.GeneratorDeadline)
	defer gcancel()
	start := time.Now()
	go func() {
		c, err := s.gen.GenerateChunk(gctx, user)
		genCh <- genResult{c, err}
	}()
	if len(readCh) == 0 {
		go func() {
			res, out, err := s.read(ctx, user, nil, size)
			s.m.observeStage(stageRead, time.Since(start))
			readCh <- readResult{res, out, err}
		}()
	}

	var gen genResult
	timedOut := false
	select {
	case gen = <-genCh:
	case <-gctx.Done():
		timedOut = true
		s.abandon(user, genCh)
	}
	s.m.observeStage(stageGenerator, time.Since(start))
	rd := <-readCh

	page := Page{From: rd.out.From, Hedged: rd.out.Hedged}
	var fresh []entry
	switch {
	case timedOut:
		page.FreshStatus, page.FreshDetail = FreshTimeout, fmt.Sprintf("no chunk within %v", cfg.GeneratorDeadline)
	case gen.err != nil && errors.Is(gen.err, context.DeadlineExceeded):
		page.FreshStatus, page.FreshDetail = FreshTimeout, gen.err.Error()
	case gen.err != nil:
		page.FreshStatus, page.FreshDetail = FreshGeneratorError, gen.err.Error()
	case gen.c.User != 0 && gen.c.User != user:
		page.FreshStatus, page.FreshDetail = FreshGeneratorError, fmt.Sprintf("chunk for user %d", gen.c.User)
		s.settleLater(user, gen.c.ID, false)
	case len(gen.c.Items) == 0:
		page.FreshStatus = FreshEmpty
		if gen.c.ID != "" {
			s.settleLater(user, gen.c.ID, true)
		}
	case rd.err != nil:
		// Neither store answered: the chunk cannot be recorded either; give it back.
		s.noteEmptyPools(user, false)
		s.settleLater(user, gen.c.ID, false)
	default:
		s.noteEmptyPools(user, false)
		pstart := time.Now()
		var err error
		fresh, err = s.persist(ctx, cfg, user, gen.c, rd.res, rd.out.From == hedge.Primary, false)
		s.m.observeStage(stagePersist, time.Since(pstart))
		if err != nil {
			page.FreshStatus, page.FreshDetail = FreshPersistFailed, err.Error()
			s.m.persistFailed.Inc()
			s.unrecorded(user, gen.c.ID, "record served chunk", err)
		} else {
			page.FreshStatus = FreshIncluded
		}
	}
	if rd.err != nil {
		return Page{}, rd.err
	}
	// Prepared chunks the read met (this incarnation's older than PreparedMaxAge, fresh after the
	// new chunk; another's, as feed items) are served too: their pins are at the top of the feed.
	var served map[uint64]bool
	if len(rd.res.prepared) > 0 {
		if served = s.servePrepared(ctx, user, rd.res.prepared, prepStale); len(served) > 0 && page.FreshStatus != FreshIncluded {
			page.FreshStatus, page.FreshDetail = FreshIncluded, ""
		}
	}
	s.fill(&page, user, fresh, rd.res, size, served)
	if gen.err == nil && !timedOut {
		// Not when the generator failed or was late: a preparation would ask it again.
		s.prepareLater(user, cfg, cfg.PrepareAfter)
	}
	s.m.observeStage(stagePageGenerated, time.Since(pageStart))
	return page, nil
}

// unrecorded settles a chunk whose recording failed: at once back to the pools, or, when the
// write may still land (an *unsureRecording), once that is known.
func (s *Service) unrecorded(user zen.ID, chunkID, what string, err error) {
	var unsure *unsureRecording
	if errors.As(err, &unsure) {
		// The recording may still land: giving the chunk back now could serve its pins
		// twice (from the pending row and again from the pools). Look once it cannot.
		s.log.Warn(what+": outcome unknown", zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
		s.settleWhenSure(user, chunkID, unsure.seq)
		return
	}
	s.log.Warn(what, zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
	s.settleLater(user, chunkID, false)
}

// fill composes the page: fresh entries, then the materialized ones, each pin once, at most
// size items, and the cursor after the last.
func (s *Service) fill(page *Page, user zen.ID, fresh []entry, res pageRead, size int, served map[uint64]bool) {
	seen := make(map[zen.ID]bool, size)
	if page.Items == nil {
		page.Items = make([]PageItem, 0, min(size, len(fresh)+len(res.entries)))
	}
	// last is a copy, not a pointer into e: that would move every entry to the heap.
	var last position
	haveLast := false
	add := func(e *entry, isFresh bool) bool {
		if len(page.Items) >= size {
			return false
		}
		last, haveLast = e.at, true
		if seen[e.Pin] {
			return true
		}
		seen[e.Pin] = true
		page.Items = append(page.Items, PageItem{Item: e.Item, Fresh: isFresh})
		return true
	}
	more := res.more
	for i := range fresh {
		if !add(&fresh[i], true) {
			more = true
			break
		}
	}
	for i := range res.entries {
		if !add(&res.entries[i], served[res.entries[i].at.Seq]) {
			more = true
			break
		}
	}
	if more && len(page.Items) < size && res.consumed != nil {
		// Every item read was served or deleted: continue after the last one read.
		last, haveLast = *res.consumed, true
	}
	if more && haveLast {
		page.NextCursor = encodeCursor(user, last)
	}
	s.reenqueueStale(user, res.stale)
}

// abandon settles a chunk the generator returns after the request gave up on it.
func (s *Service) abandon(user zen.ID, ch <-chan genResult) {
	s.m.generatorLate.Inc()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		r := <-ch
		if r.err == nil && r.c.ID != "" {
			s.settle(user, r.c.ID, false)
		}
	}()
}

func (s *Service) settleLater(user zen.ID, chunkID string, delivered bool) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.settle(user, chunkID, delivered)
	}()
}

// settleWhenSure settles a chunk whose recording's outcome is unknown, once the write can no
// longer land: recorded (a pending row, or already materialized) means the user has it, and
// its materialization is enqueued; not recorded means it goes back to the pools. When the
// store cannot say, or the service closes first, the recovery pass settles it.
func (s *Service) settleWhenSure(user zen.ID, chunkID string, seq uint64) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(s.unsureGrace)
		defer t.Stop()
		select {
		case <-s.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The recording may have landed after the head version written when it failed.
		s.headChanged(ctx, user)
		st, err := s.ChunkStatus(ctx, user, chunkID)
		switch {
		case err != nil:
			s.log.Warn("chunk of an unknown recording: left to recovery", zap.Stringer("user", user),
				zap.String("chunk", chunkID), zap.Error(err))
		case st == ChunkPending:
			s.m.unsureRecordings.WithLabelValues("recorded").Inc()
			if err := s.enq.EnqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: chunkID, Seq: seq}); err != nil {
				// The pending row is there: a later read or the recovery pass re-enqueues it.
				s.m.enqueueFailed.Inc()
				s.log.Warn("enqueue materialize", zap.Stringer("user", user), zap.String("chunk", chunkID), zap.Error(err))
			}
		case st == ChunkDone:
			s.m.unsureRecordings.WithLabelValues("recorded").Inc()
			s.settle(user, chunkID, true)
		default:
			s.m.unsureRecordings.WithLabelValues("not_recorded").Inc()
			s.settle(user, chunkID, false)
		}
	}()
}

func (s *Service) settle(user zen.ID, chunkID string, delivered bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.gen.Settle(ctx, user, chunkID, delivered); err != nil {
		// The generator's Pending list lets a recovery pass settle it later.
		s.log.Warn("settle chunk", zap.Stringer("user", user), zap.String("chunk", chunkID),
			zap.Bool("delivered", delivered), zap.Error(err))
	}
}

// persist records the served chunk as pending before the user sees it: it drops pins already
// in the feed (pin index) or on this page, takes the chunk's sequence, writes one pending row,
// and enqueues the materialization. It returns the chunk's entries as served.
func (s *Service) persist(ctx context.Context, cfg Config, user zen.ID, c Chunk, page pageRead, fromPrimary, prepared bool) ([]entry, error) {
	if c.ID == "" || len(c.ID) > maxChunkID {
		return nil, fmt.Errorf("chunk id of %d bytes", len(c.ID))
	}
	if len(c.Items) > maxChunkItems {
		return nil, fmt.Errorf("chunk of %d items, at most %d", len(c.Items), maxChunkItems)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.PersistTimeout)
	defer cancel()
	// The pins of the user's chunks served but not yet materialized are not in the pin index.
	// The generator offers such a pin again only after a machine crash undid its chunk there
	// (generator.Options.CallerRecords: the pending row is the chunk's durable record). Such a
	// chunk is newer than every materialized one (a materialization settles its chunk with a
	// synced write to the generator's log, which makes the earlier chunks durable there too),
	// so a page read from the primary that went past the pending chunks met it. Otherwise (the
	// standby answered, or the page filled up with pending items) the pending chunks are read
	// from the primary, through their index.
	var onPage map[zen.ID]bool
	if fromPrimary && page.pastPending {
		onPage = make(map[zen.ID]bool, len(page.entries)+len(page.pendingPins))
	} else {
		var err error
		if onPage, err = s.pendingPins(ctx, user); err != nil {
			return nil, fmt.Errorf("pending chunks: %w", err)
		}
	}
	for _, e := range page.entries {
		onPage[e.Pin] = true
	}
	for _, p := range page.pendingPins {
		onPage[p] = true
	}
	// One batched read of the chunk's pins in the pin index, not a goroutine per pin.
	present := make([]bool, len(c.Items))
	var keys [][]byte
	var at []int
	for i, it := range c.Items {
		if onPage[it.Pin] {
			present[i] = true
			continue
		}
		keys = append(keys, pinKey(user, it.Pin))
		at = append(at, i)
	}
	vals, idxErr := zen.GetMany(ctx, s.primary, keys)
	if idxErr != nil {
		return nil, fmt.Errorf("pin index: %w", idxErr)
	}
	for j, i := range at {
		present[i] = vals[j] != nil
	}
	pc := pendingChunk{ChunkID: c.ID, ServedMs: s.now().UnixMilli(), Prepared: prepared}
	if prepared {
		pc.Owner = s.incarnation
	}
	seen := make(map[zen.ID]bool, len(c.Items))
	var out []entry
	for i, it := range c.Items {
		if present[i] || seen[it.Pin] || it.Pin == 0 {
			continue
		}
		seen[it.Pin] = true
		if len(it.Reason) > maxReason {
			it.Reason = it.Reason[:maxReason]
		}
		pc.Items = append(pc.Items, it)
		pc.Pos = append(pc.Pos, uint32(i))
		out = append(out, entry{Item: it})
	}
	seq, err := s.record(ctx, user, c.ID, encodePending(pc))
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].at = position{Seq: seq, Pos: pc.Pos[i]}
	}
	if !prepared {
		s.enqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: c.ID, Seq: seq})
	}
	return out, nil
}

// enqueueMaterialize materializes a served chunk in the background: in this process while
// fewer than Config.InlineMaterialize run here, else (or when that fails) through a materialize
// job.
func (s *Service) enqueueMaterialize(ctx context.Context, task MaterializeTask) {
	s.afterAnswer(func() { s.materializeNow(ctx, task) })
}

// afterAnswer runs f in a goroutine of its own behind the page's response writer, counted in
// bg and enqueues (tests wait for them). It is for what a page leaves to do after its answer:
// the pending row is durable already, and what f does (the served mark, the materialization)
// is made good later when it is lost (a later read, the recovery pass), so neither its Redis
// round trips nor its writes hold the reader.
func (s *Service) afterAnswer(f func()) {
	s.bg.Add(1)
	s.enqueues.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.enqueues.Done()
		// Behind whatever is runnable: the page's response writer first (see prepareLater).
		runtime.Gosched()
		f()
	}()
}

// materializeNow materializes task inline if a slot is free, else enqueues its job (bounded by
// materializeEnqueueBound).
func (s *Service) materializeNow(ctx context.Context, task MaterializeTask) {
	if s.materializeInline(ctx, task) {
		return
	}
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), materializeEnqueueBound)
	defer ecancel()
	if err := s.enq.EnqueueMaterialize(ectx, task); err != nil {
		s.m.enqueueFailed.Inc()
		s.log.Warn("enqueue materialize", zap.Stringer("user", task.User), zap.String("chunk", task.ChunkID), zap.Error(err))
	}
}

// materializeInline materializes task in this process if an inline slot is free, and reports
// whether it is done. Materialize is safe to run twice, concurrently or after a crash, so a
// job for the same chunk (a read that found it stale, the recovery pass) may run beside it.
func (s *Service) materializeInline(ctx context.Context, task MaterializeTask) bool {
	select {
	case <-s.closing:
		return false // shutting down: the job (or the pending row) outlives this process
	default:
	}
	limit := int64(s.Config().InlineMaterialize)
	if limit <= 0 {
		s.m.inline.WithLabelValues(inlineOff).Inc()
		return false
	}
	if s.inlineRunning.Add(1) > limit {
		s.inlineRunning.Add(-1)
		s.m.inline.WithLabelValues(inlineBusy).Inc()
		return false
	}
	defer s.inlineRunning.Add(-1)
	if !s.acquireLane() {
		s.m.inline.WithLabelValues(inlineBusy).Inc()
		return false
	}
	defer s.releaseLane()
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), materializeInlineBound)
	defer cancel()
	if err := s.Materialize(mctx, task); err != nil {
		s.m.inline.WithLabelValues(inlineFailed).Inc()
		s.log.Debug("materialize inline: enqueueing", zap.Stringer("user", task.User), zap.String("chunk", task.ChunkID), zap.Error(err))
		return false
	}
	s.m.inline.WithLabelValues(inlineDone).Inc()
	return true
}

// pendingPins returns the pins of the user's pending chunks (served, not yet materialized), found
// through the pending-chunk index: usually none or one chunk.
func (s *Service) pendingPins(ctx context.Context, user zen.ID) (map[zen.ID]bool, error) {
	prefix := binary.BigEndian.AppendUint64(indexPrefix(user.Shard()), uint64(user))
	rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix), Limit: maxPendingChecked})
	if err != nil {
		return nil, err
	}
	pins := make(map[zen.ID]bool)
	if len(rows) == 0 {
		return pins, nil
	}
	keys := make([][]byte, 0, len(rows))
	for _, kv := range rows {
		if u, seq, ok := indexRow(user.Shard(), kv.Key); ok && u == user {
			keys = append(keys, pendingKey(user, seq))
		}
	}
	vals, err := zen.GetMany(ctx, s.primary, keys)
	if err != nil {
		return nil, err
	}
	for _, v := range vals {
		if v == nil {
			continue // materialized: its pins are in the pin index
		}
		pc, err := decodePending(v)
		if err != nil {
			return nil, err
		}
		for _, it := range pc.Items {
			pins[it.Pin] = true
		}
	}
	return pins, nil
}

// maxPendingChecked bounds the pending chunks pendingPins reads. A user has one or two unless
// materialization is down; past the bound, the pin index and Materialize still keep each pin
// once in the feed.
const maxPendingChecked = 64

// pageRead is what one materialized read returns.
type pageRead struct {
	entries []entry
	more    bool
	stale   []MaterializeTask
	// consumed is the position of the last item read, deleted ones included (set by
	// filterLive).
	consumed *position
	// pendingPins are the pins of every pending chunk the read met, whole, those past the
	// page included. pastPending is set when the read went past them: it met a materialized
	// item or the end of the feed.
	pendingPins []zen.ID
	pastPending bool
	// prepared are the unserved prepared chunks the read met (see Config.PrepareAfter), newest
	// first, each with its row as read (the served mark's expected value).
	prepared []preparedRow
	// version is the feed's head version row as a read from the top met it, and served the
	// served chunks it met not yet materialized, stale or not (headcache.go).
	version []byte
	served  []servedChunk
}

// preparedRow is an unserved prepared chunk met by a read.
type preparedRow struct {
	seq uint64
	row []byte
	pc  pendingChunk
}

// read reads up to size live entries after `after` (nil: from the top), hedged across the
// stores, the prepared chunks it met checked against the removals (filterRemoved).
func (s *Service) read(ctx context.Context, user zen.ID, after *position, size int) (pageRead, hedge.Outcome, error) {
	res, out, err := s.readRaw(ctx, user, after, size)
	if err != nil {
		return res, out, err
	}
	res, err = s.filterLive(ctx, user, res, size)
	if err != nil {
		return res, out, err
	}
	return s.filterRemoved(ctx, user, res), out, nil
}

// readRaw reads up to size entries after `after` (nil: from the top), hedged across the stores.
func (s *Service) readRaw(ctx context.Context, user zen.ID, after *position, size int) (pageRead, hedge.Outcome, error) {
	cut := s.now().Add(-s.Config().StalePending).UnixMilli()
	readFrom := func(t zen.Table) hedge.ReadFunc[pageRead] {
		return func(ctx context.Context) (pageRead, error) { return readPage(ctx, t, user, after, size, cut) }
	}
	fromPrimary := readFrom(s.primary)
	if after == nil && s.head.enabled() {
		fromPrimary = s.headReadFrom(s.primary, user, size, cut)
	}
	res, out, err := hedge.Traced(ctx, s.hedger, fromPrimary, readFrom(s.standby))
	if err != nil {
		return pageRead{}, out, fmt.Errorf("%w: read feed of %d: %w", ErrUnavailable, user, err)
	}
	return res, out, nil
}

// notePending records a pending chunk a read met (before its items, which the read merges):
// its pins, and whether it is prepared (fromTop: a first page's read), served or stale.
func (res *pageRead) notePending(user zen.ID, seq uint64, row []byte, pc pendingChunk, fromTop bool, cutMs int64) {
	for _, it := range pc.Items {
		res.pendingPins = append(res.pendingPins, it.Pin)
	}
	task := MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: seq}
	switch {
	case pc.Prepared && fromTop:
		res.prepared = append(res.prepared, preparedRow{seq: seq, row: bytes.Clone(row), pc: pc})
	case !pc.Prepared && fromTop:
		res.served = append(res.served, servedChunk{task, pc.ServedMs})
	}
	// A prepared chunk waits for its user's next visit, not for a materialization.
	if pc.ServedMs < cutMs && !pc.Prepared {
		res.stale = append(res.stale, task)
	}
}

// readPage scans t for up to size entries of user's feed after `after`, pending chunks merged
// in their place and each pin once. Pending chunks served before cutMs are reported as stale.
func readPage(ctx context.Context, t zen.Table, user zen.ID, after *position, size int, cutMs int64) (pageRead, error) {
	var res pageRead
	startKey, stop := FeedRange(user)
	if after != nil {
		startKey = pendingKey(user, after.Seq)
	}
	isAfter := func(p position) bool {
		return after == nil || p.Seq < after.Seq || (p.Seq == after.Seq && p.Pos > after.Pos)
	}
	pendingSeqs := map[uint64]bool{}
	seen := make(map[zen.ID]bool, size)
	res.entries = make([]entry, 0, size)
	batch := PageScanRows(size)
	for {
		rows, err := t.Scan(ctx, zen.ScanOptions{Start: startKey, Stop: stop, Limit: batch})
		if err != nil {
			return pageRead{}, fmt.Errorf("scan feed of %d: %w", user, err)
		}
		for _, kv := range rows {
			if len(res.entries) >= size {
				res.more = true
				return res, nil
			}
			pos, pending, err := feedKey(kv.Key)
			if err != nil {
				if isHeadVersionKey(kv.Key) {
					res.version = kv.Value
				}
				continue // not an item; never fail a page on one bad row
			}
			if pending {
				pc, err := decodePending(kv.Value)
				if err != nil {
					continue
				}
				pendingSeqs[pos.Seq] = true
				res.notePending(user, pos.Seq, kv.Value, pc, after == nil, cutMs)
				for j, it := range pc.Items {
					at := position{Seq: pos.Seq, Pos: pc.Pos[j]}
					if !isAfter(at) || seen[it.Pin] {
						continue
					}
					if len(res.entries) >= size {
						res.more = true
						return res, nil
					}
					seen[it.Pin] = true
					res.entries = append(res.entries, entry{Item: it, at: at, prepared: pc.Prepared})
				}
				continue
			}
			res.pastPending = true
			if pendingSeqs[pos.Seq] || !isAfter(pos) {
				continue
			}
			it, err := decodeItem(kv.Value)
			if err != nil || seen[it.Pin] {
				continue
			}
			seen[it.Pin] = true
			res.entries = append(res.entries, entry{Item: it, at: pos})
		}
		if len(rows) < batch {
			res.pastPending = true
			return res, nil
		}
		startKey = append(bytes.Clone(rows[len(rows)-1].Key), 0)
	}
}

// materializeEnqueueBound bounds the materialize enqueue of a first page, made after the page
// is answered (a Redis call that takes well under a millisecond when Redis is healthy): a hung
// or unreachable Redis holds no reader, and costs at most this long a goroutine per fresh first
// page; the chunk's pending row, already written, is enqueued again by a later read or the
// recovery pass.
const materializeEnqueueBound = time.Second

// materializeInlineBound bounds an inline materialization; past it the chunk is enqueued as a
// job (which runs Materialize again: it is idempotent).
const materializeInlineBound = 10 * time.Second

// timedEnqueuer times the materialize enqueue (smartfeed_feed_stage_seconds{stage="enqueue"}).
type timedEnqueuer struct {
	Enqueuer
	m *metrics
}

func (t timedEnqueuer) EnqueueMaterialize(ctx context.Context, task MaterializeTask) error {
	start := time.Now()
	err := t.Enqueuer.EnqueueMaterialize(ctx, task)
	t.m.observeStage(stageEnqueue, time.Since(start))
	return err
}
