package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/quiet"
	"github.com/smartfeed/smartfeed/zen"
)

// Configuration and collaborators: the live-tunable knobs (Config), the dependencies New
// takes (Deps) and their defaults.

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
	// PrepareReturning, with PrepareAfter, prepares only for a user in a session: one whose
	// previous first page in this process came less than PreparedMaxAge before. A preparation
	// costs a generator call, a synced write and a materialization; it pays when its user comes
	// back while it is young, and a user who came back once is the one likely to come back
	// again. A single visit leaves nothing prepared behind it; the user's next visit then asks
	// the generator itself, as every first page with nothing prepared does. false (the default)
	// prepares after every first page.
	PrepareReturning bool `json:"prepare_returning"`
	// MinChunkInterval is the least time between two generator calls for one user in this
	// process (a first page's or a preparation's). A first page sooner than that after the
	// last call serves the feed as it stands, prepared chunks included, with FreshRecent
	// instead of asking the generator again; a preparation due sooner waits for it. A user who
	// reloads ten times a second gets one chunk a second, not ten chunks of the few pins that
	// came meanwhile, and the reloads cost a read each. 0 (the default) bounds nothing.
	MinChunkInterval time.Duration `json:"min_chunk_interval"`
	// InlineMaterialize is how many served chunks this process materializes at once itself,
	// in the background after the page is answered, instead of enqueueing a materialize job;
	// the chunks past it wait for them in a queue in memory (background.go), and a chunk that
	// finds that queue full, or whose inline run fails, is enqueued as a job. The process that
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
	// MaxGenerating is how many first pages of this process wait on the generator at once. A
	// first page past it, which would have asked the generator, serves the feed as it stands
	// (FreshDeferred), prepared chunks included, and leaves the new pins in the pools for the
	// next visit. A page that asks the generator costs a generator call, a synced recording and
	// a materialization, many times a page read; when the processors cannot keep up with them,
	// those pages give way first, so that every page keeps its latency and the process keeps
	// up, and the bound is met again once the load falls (docs/reliability.md, "Overload").
	// 0 (the default) means DefaultMaxGenerating(), two per GOMAXPROCS.
	MaxGenerating int `json:"max_generating"`
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
	case c.MaxGenerating < 0 || c.MaxGenerating > MaxMaxInflight:
		return fmt.Errorf("config: max generating %d is not in [0, %d]", c.MaxGenerating, MaxMaxInflight)
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
	// Lanes, when set, are the background lanes of the whole process, shared with its other
	// background work (a worker's fanout deliveries in the same process): BackgroundLanes is
	// then ignored. nil: the service has BackgroundLanes lanes of its own.
	Lanes *quiet.Lanes
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

// setDefaults replaces the zero values of d's bounds by their defaults and checks those that
// have a range (the required collaborators, the hedger and the metrics are New's).
func (d *Deps) setDefaults() error {
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
		return fmt.Errorf("feedsvc: trim every %d is not in [1, 65536]", d.TrimEvery)
	}
	if d.BackgroundLanes == 0 {
		d.BackgroundLanes = DefaultBackgroundLanes()
	}
	if d.BackgroundLanes < 1 || d.BackgroundLanes > MaxBackgroundLanes {
		return fmt.Errorf("feedsvc: background lanes %d is not in [1, %d]", d.BackgroundLanes, MaxBackgroundLanes)
	}
	if d.Lanes == nil {
		d.Lanes = quiet.NewLanes(d.BackgroundLanes)
	}
	if d.QuietBound == 0 {
		d.QuietBound = DefaultQuietBound
	}
	if d.QuietBound < 0 || d.QuietBound > time.Second {
		return fmt.Errorf("feedsvc: quiet bound %v is not in [0, 1s]", d.QuietBound)
	}
	if d.HeadCacheBytes == 0 {
		d.HeadCacheBytes = DefaultHeadCacheBytes
	}
	return nil
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
