package generator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrInvalidArgument marks a request the generator refuses (zero user, bad size, malformed
// chunk ID). The gRPC edge maps it to InvalidArgument.
var ErrInvalidArgument = errors.New("generator: invalid argument")

// Pools is what the generator needs of zen.Pools (declared here, by its consumer).
type Pools interface {
	// Top returns the n best entries of one pool, best first.
	Top(ctx context.Context, user zen.ID, src zen.Source, n int) ([]zen.PoolEntry, error)
	// Take removes the given entries from the pools, each pin for exactly one caller, and
	// returns those this call won.
	Take(ctx context.Context, user zen.ID, es []zen.PoolEntry) ([]zen.PoolEntry, error)
	// Insert puts entries into the pools; idempotent. A pin taken (or removed) is not put back.
	Insert(ctx context.Context, es []zen.PoolEntry) (int, error)
	// Restore puts entries this generator took back into the pools (replacing their taken
	// tombstones); idempotent. Used only to give back a chunk that was not delivered.
	Restore(ctx context.Context, es []zen.PoolEntry) (int, error)
	// Expire removes the user's entries created before olderThanMs and returns how many.
	Expire(ctx context.Context, user zen.ID, olderThanMs int64) (int, error)
	// Forget removes pins for good: nothing puts them back, and readers delete the rows late
	// jobs write for them. Idempotent.
	Forget(ctx context.Context, user zen.ID, pins []zen.ID) (int, error)
}

var _ Pools = (*zen.Pools)(nil)

// multiTop is implemented by Pools that read several sources together (zen.Pools: in about
// one round trip on HBase); the generator then reads a user's sources with one call.
type multiTop interface {
	// TopMany returns Top of each of srcs, one list per source, in order.
	TopMany(ctx context.Context, user zen.ID, srcs []zen.Source, n int) ([][]zen.PoolEntry, error)
}

var _ multiTop = (*zen.Pools)(nil)

// Item is one pin of a chunk.
type Item struct {
	Pin    zen.ID
	Source zen.Source
	Score  float64
	Author zen.ID
	Board  zen.ID
	Reason string
}

// Chunk is an ordered set of new pins for one user, best first. ID is empty when nothing
// was available (such a chunk needs no settling).
type Chunk struct {
	ID    string
	User  zen.ID
	Items []Item
	Debug []string
	// CreatedMs is when the chunk was composed (Unix milliseconds); a recovery pass leaves
	// younger chunks alone, as a request may still be serving them.
	CreatedMs int64
}

// Options are the per-request knobs of GenerateChunk.
type Options struct {
	// Max caps the chunk size; 0 means the configured maximum. It must be in [0, HardMaxChunk].
	Max int
	// Debug fills Chunk.Debug with the size computation, each choice and each deferral.
	Debug bool
	// CallerRecords says the caller writes its own durable record of the chunk before anyone
	// sees it (the feed service's pending row, whose materialization claims each pin once in
	// the feed's pin index). Where the chunk's steps are written lazily (the pools and the
	// state share a log), the ready record then does not wait for its fsync either, and the
	// answer comes one fsync sooner. A machine crash may then undo an answered chunk: recovery
	// finds it unfinished (Pending finishes it from its intent) or never begun (its pins back in
	// the pools), never half-taken. The caller's record is what the user was shown; the caller
	// drops a pin of it that is offered again (the feed service: its pending chunks and pin
	// index), and Settle of a chunk the generator lost is a no-op. Without it, an answered
	// chunk survives any crash.
	CallerRecords bool
}

// Params wires a Generator.
type Params struct {
	// Pools holds the users' pools (zen.NewPools in production). Required.
	Pools Pools
	// State is the "genstate" table: per-user state, in-flight chunks, claims. Required.
	State zen.Table
	// Config is the initial configuration; nil means DefaultConfig.
	Config *Config
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means no logging.
	Logger *zap.Logger
	// Registerer receives the generator's metrics; nil means they are not registered.
	Registerer prometheus.Registerer
	// Liveness, when set, filters deleted pins out of the candidates before they are taken
	// (see dropDead; an error fails the chunk). nil serves every pin of the pools.
	Liveness Liveness
	// Eligibility, with Liveness, lets Check tell which pins a removal took from a user (the
	// follow that brought them is gone). nil: Check refuses to tell (ErrNoChecks).
	Eligibility Eligibility
}

// Generator composes chunks. Its methods are safe for concurrent use, also across processes
// sharing the same tables.
type Generator struct {
	pools Pools
	state zen.Table
	live  Liveness
	elig  Eligibility
	now   func() time.Time
	log   *zap.Logger
	cfg   atomic.Pointer[Config]
	m     metrics
	// lazySteps: the pools and the state table share one sequential log (zen.SameLog), so a
	// chunk's writes before its ready record go lazily (zen.Lazily) and the ready record's
	// synced commit makes them durable together (see chunkRun.stepCtx).
	lazySteps bool
	// roundNs is a moving average of one take round's duration (reads, claims, take), which
	// short uses to decide whether another round fits before the caller's deadline.
	roundNs atomic.Int64
	// lastNo is the last chunk number handed out by this process (see nextNo).
	lastNo atomic.Uint64
	// The expiry sweeps GenerateChunk starts after its answer (see sweepLater): at most one
	// per user at a time.
	sweeps   sync.WaitGroup
	sweeping sync.Map // zen.ID -> struct{}
}

// sweepTimeout bounds one background expiry sweep.
const sweepTimeout = 30 * time.Second

// sweepLater expires the user's pool entries created before `before` and records the sweep in
// the user's state, in the background: it is cleanup (a chunk never serves an expired pin: the
// read skips them, and the worker's upkeep expires entries as it inserts), so no request waits
// for a scan of the whole pools. One sweep per user runs at a time; Wait waits for them.
func (g *Generator) sweepLater(user zen.ID, before, nowMs int64) {
	if _, running := g.sweeping.LoadOrStore(user, struct{}{}); running {
		return
	}
	g.sweeps.Go(func() {
		defer g.sweeping.Delete(user)
		ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
		defer cancel()
		start := time.Now()
		if err := g.sweep(ctx, user, before, nowMs, &debugLog{}); err != nil {
			g.log.Warn("expiry sweep", zap.Uint64("user", uint64(user)), zap.Error(err))
			return
		}
		g.m.since(stageSweep, start)
	})
}

// Wait blocks until the expiry sweeps started so far have finished (a process stopping calls
// it before closing the stores).
func (g *Generator) Wait() { g.sweeps.Wait() }

// observeRound folds one round's duration into the moving average (weight 1/8).
func (g *Generator) observeRound(d time.Duration) {
	for {
		old := g.roundNs.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if g.roundNs.CompareAndSwap(old, next) {
			return
		}
	}
}

// short reports whether ctx's deadline leaves less than two average rounds after now (one for
// the round, one for the writes that finish the chunk). Without a deadline there is always time.
func (g *Generator) short(ctx context.Context, now time.Time) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	return dl.Sub(now) < 2*time.Duration(g.roundNs.Load())
}

type metrics struct {
	chunks   prometheus.Counter
	pins     *prometheus.CounterVec
	deferred prometheus.Counter
	dropped  prometheus.Counter
	deleted  prometheus.Counter
	lost     prometheus.Counter
	settled  *prometheus.CounterVec
	// stage times each stage of GenerateChunk (state, read, live, claim, take, record,
	// finish), so a slow chunk says where its time went.
	stage *prometheus.HistogramVec
}

// Stages of GenerateChunk, the label values of smartfeed_generator_stage_seconds.
const (
	stageState  = "state"  // the user's state row
	stageRead   = "read"   // Top of every source
	stageLive   = "live"   // liveness of the candidates
	stageClaim  = "claim"  // chunk number, intent record and the batched claims
	stageTake   = "take"   // the batched take from the pools
	stageRecord = "record" // the ready record
	stageFinish = "finish" // the state update after the chunk
	stageSweep  = "sweep"  // the expiry sweep, when due (in the background, after the answer)
)

// since observes the time since start under stage and returns now, the next stage's start.
func (m *metrics) since(stage string, start time.Time) time.Time {
	now := time.Now()
	m.stage.WithLabelValues(stage).Observe(now.Sub(start).Seconds())
	return now
}

// New returns a Generator.
func New(p Params) (*Generator, error) {
	if p.Pools == nil || p.State == nil {
		return nil, errors.New("generator: Pools and State are required")
	}
	g := &Generator{pools: p.Pools, state: p.State, live: p.Liveness, elig: p.Eligibility, now: p.Now, log: p.Logger}
	if pt, ok := p.Pools.(interface{ Table() zen.Table }); ok && p.State != nil {
		g.lazySteps = zen.SameLog(pt.Table(), p.State)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	c := DefaultConfig()
	if p.Config != nil {
		c = *p.Config
	}
	if err := g.SetConfig(c); err != nil {
		return nil, err
	}
	f := promauto.With(p.Registerer)
	g.m = metrics{
		chunks:   f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_generator_chunks_total", Help: "Chunks generated (non-empty)."}),
		pins:     f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_generator_pins_total", Help: "Pins put into chunks, by source."}, []string{"source"}),
		deferred: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_generator_deferred_total", Help: "Weak pins seen and left in the pools for a later session."}),
		dropped:  f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_generator_dropped_total", Help: "Pins dropped from the pools as expired."}),
		deleted:  f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_generator_deleted_total", Help: "Deleted pins dropped from the pools on read (Liveness)."}),
		lost:     f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_generator_claims_lost_total", Help: "Chosen pins claimed first by a concurrent chunk and replaced."}),
		settled:  f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_generator_settled_total", Help: "Chunks settled, by outcome."}, []string{"delivered"}),
		stage: f.NewHistogramVec(prometheus.HistogramOpts{Name: "smartfeed_generator_stage_seconds",
			Help:    "Time spent in each stage of GenerateChunk.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)}, []string{"stage"}),
	}
	return g, nil
}

// Config returns the configuration in force.
func (g *Generator) Config() Config { return *g.cfg.Load() }

// SetConfig validates c and puts it in force for the next requests; on error nothing changes.
func (g *Generator) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	srcs := make(map[string]SourceConfig, len(c.Sources))
	for k, v := range c.Sources {
		srcs[k] = v
	}
	c.Sources = srcs
	g.cfg.Store(&c)
	return nil
}

// ReloadConfig reads the JSON file at path and puts it in force; on error the configuration
// in force is kept.
func (g *Generator) ReloadConfig(path string) error {
	c, err := LoadConfig(path)
	if err != nil {
		return err
	}
	if err := g.SetConfig(c); err != nil {
		return err
	}
	g.log.Info("generator config reloaded", zap.String("path", path))
	return nil
}

// Drops returns how many of the user's pins this generator's expiry sweeps dropped.
func (g *Generator) Drops(ctx context.Context, user zen.ID) (int64, error) {
	return g.state.Increment(ctx, userKey(user, tagDrops), 0)
}

func checkUser(user zen.ID) error {
	if user == 0 {
		return fmt.Errorf("%w: user is zero", ErrInvalidArgument)
	}
	return nil
}

// debugLog collects debug lines when asked for.
type debugLog struct {
	on    bool
	lines []string
}

func (d *debugLog) add(format string, a ...any) {
	if d.on {
		d.lines = append(d.lines, fmt.Sprintf(format, a...))
	}
}

// sweep drops the user's expired pins from the pools and counts them.
func (g *Generator) sweep(ctx context.Context, user zen.ID, before, nowMs int64, dbg *debugLog) error {
	n, err := g.pools.Expire(ctx, user, before)
	if err != nil {
		return fmt.Errorf("expire pools of %d: %w", uint64(user), err)
	}
	if n > 0 {
		if _, err := g.state.Increment(ctx, userKey(user, tagDrops), int64(n)); err != nil {
			return fmt.Errorf("count drops of %d: %w", uint64(user), err)
		}
		g.m.dropped.Add(float64(n))
		dbg.add("expired: dropped %d pins created before %s", n, time.UnixMilli(before).UTC().Format(time.RFC3339))
	}
	return g.updateState(ctx, user, func(s *userState) { s.LastExpireMs = nowMs })
}
