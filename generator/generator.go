package generator

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// GenerateChunk composes the user's next chunk and takes its pins out of the pools.
//
// Crash safety: the chunk's record is written first, listing the chosen pins (intent); each
// pin is then claimed in genstate (compare-and-set) and taken from the pools; finally the
// record is rewritten with only the pins won, in serving order. A pin claimed first by a
// concurrent chunk is replaced by another candidate. A record left unfinished by a crash is
// recovered by Pending (served later) or Settle (served or put back).
//
// The steps: start (state, size), then up to TakeRounds rounds (takeRound: readCandidates,
// choose, writeIntent, claim, takeClaimed), then finishChunk (arrange, ready record, state).
func (g *Generator) GenerateChunk(ctx context.Context, user zen.ID, opts Options) (Chunk, error) {
	if err := checkUser(user); err != nil {
		return Chunk{}, err
	}
	if opts.Max < 0 || opts.Max > HardMaxChunk {
		return Chunk{}, fmt.Errorf("%w: max %d not in [0, %d]", ErrInvalidArgument, opts.Max, HardMaxChunk)
	}
	r := &chunkRun{g: g, user: user, cfg: g.cfg.Load(), dbg: &debugLog{on: opts.Debug}, callerRecords: opts.CallerRecords}
	r.nowMs = g.now().UnixMilli()
	if err := r.start(ctx, opts.Max); err != nil {
		return Chunk{}, err
	}
	// The sweep starts once the chunk is recorded (so its state update does not race this
	// request's), on the way out of every path.
	defer func() {
		if r.sawExpired {
			g.sweepLater(user, r.expireBefore, r.nowMs)
		}
	}()
	for round := 0; round < r.cfg.TakeRounds && len(r.won) < r.n; round++ {
		more, err := r.takeRound(ctx, round)
		if err != nil {
			return Chunk{}, err
		}
		if !more {
			break
		}
	}
	return r.finishChunk(ctx)
}

// visitSlack is how stale the recorded last visit may be left by an empty visit (see
// finishChunk): the chunk size grows by Config.PerHour per hour away, so a minute is noise.
const visitSlack = time.Minute

// chunkRun is the state of one GenerateChunk call, shared by its steps.
type chunkRun struct {
	g     *Generator
	user  zen.ID
	cfg   *Config
	nowMs int64
	dbg   *debugLog
	t     time.Time // the start of the current stage (metrics)

	// callerRecords: the caller makes the chunk durable itself (Options.CallerRecords).
	callerRecords bool

	st           userState // the state row read at the start, and its raw value
	stRaw        []byte
	n            int   // the pins wanted
	expireBefore int64 // pins created before are expired
	sawExpired   bool  // an expired pin was seen, or a sweep is due: sweep after the answer

	plan        []sourcePlan
	k           int             // the best pins read per source
	excluded    map[zen.ID]bool // pins out of the running: expired, dead, or picked once
	liveChecked map[zen.ID]bool
	won         []pick
	wonBy       []int // pins won per source of plan
	no          uint64
	rec         *record
	intent      []byte    // the record as last written (intent)
	last        selection // the last round's choice
}

// start reads the user's state and sizes the chunk (callerMax: Options.Max).
func (r *chunkRun) start(ctx context.Context, callerMax int) error {
	g, cfg, dbg := r.g, r.cfg, r.dbg
	r.t = time.Now()
	st, stRaw, err := g.loadState(ctx, r.user)
	if err != nil {
		return err
	}
	r.st, r.stRaw = st, stRaw
	r.t = r.since(ctx, stageState)
	n, note := wantedSize(cfg, st.LastVisitMs, r.nowMs, st.Owed, callerMax)
	r.n = n
	dbg.add("size: %s", note)

	r.expireBefore = r.nowMs - time.Duration(cfg.MaxAge).Milliseconds()
	if r.nowMs-st.LastExpireMs >= time.Duration(cfg.ExpireEvery).Milliseconds() {
		r.sawExpired = true // due: swept after the answer
	}

	r.plan = cfg.plan()
	r.k = int(math.Ceil(float64(n) * cfg.ReadFactor))
	dbg.add("read: best %d per source (n %d × read_factor %g)", r.k, n, cfg.ReadFactor)
	r.excluded = map[zen.ID]bool{}
	r.liveChecked = map[zen.ID]bool{}
	r.wonBy = make([]int, len(r.plan))
	return nil
}

// takeRound runs one round: read the candidates, choose, record the intent, claim and take the
// chosen pins. It reports whether another round may run (false: out of time or of candidates).
func (r *chunkRun) takeRound(ctx context.Context, round int) (bool, error) {
	g, dbg := r.g, r.dbg
	roundStart := time.Now()
	if round > 0 && g.short(ctx, roundStart) {
		// Another round would likely miss the caller's deadline: serve the pins won so far
		// (the shortfall is owed to the next chunk) rather than nothing.
		dbg.add("deadline: %d of %d pins after %d rounds, no time for another", len(r.won), r.n, round)
		return false, nil
	}
	lists, err := r.readCandidates(ctx)
	if err != nil {
		return false, err
	}
	r.last = choose(r.plan, lists, r.wonBy, r.n, r.cfg.MinChunk)
	if round == 0 {
		for _, s := range r.last.notes {
			dbg.add("%s", s)
		}
	}
	if len(r.last.picks) == 0 {
		return false, nil
	}
	if err := r.writeIntent(ctx); err != nil {
		return false, err
	}
	claimed, err := r.claim(ctx)
	if err != nil {
		return false, err
	}
	if err := r.takeClaimed(ctx, claimed); err != nil {
		return false, err
	}
	g.observeRound(time.Since(roundStart))
	return true, nil
}

// readCandidates reads the best pins of each source, leaving out the excluded and the expired.
// Deleted candidates leave the lists; the pools are read again (deeper, as the excluded grow)
// so that deleted pins at the top cannot starve a chunk.
func (r *chunkRun) readCandidates(ctx context.Context) ([][]zen.PoolEntry, error) {
	g, user, plan, excluded, dbg := r.g, r.user, r.plan, r.excluded, r.dbg
	var lists [][]zen.PoolEntry
	for attempt := 0; ; attempt++ {
		lists = make([][]zen.PoolEntry, len(plan))
		tops, err := g.readTops(ctx, user, plan, min(r.k+len(excluded), HardMaxChunk*10))
		if err != nil {
			return nil, g.abandon(ctx, user, r.no, r.rec, err)
		}
		for i, top := range tops {
			for _, e := range top {
				switch {
				case excluded[e.Pin]:
				case e.CreatedMs < r.expireBefore:
					excluded[e.Pin] = true
					r.sawExpired = true
					dbg.add("expired: %s, left for the sweep", describe(e))
				default:
					lists[i] = append(lists[i], e)
				}
			}
		}
		// A pin in two pools (append-only inserts) counts once, from the pool where it scores
		// best.
		lists = zen.BestAcrossSources(lists)
		r.t = r.since(ctx, stageRead)
		if g.live == nil {
			break
		}
		dead, err := g.dropDead(ctx, user, lists, excluded, r.liveChecked, dbg)
		if err != nil {
			return nil, g.abandon(ctx, user, r.no, r.rec, err)
		}
		r.t = r.since(ctx, stageLive)
		if dead == 0 || attempt >= maxLiveRereads {
			break
		}
	}
	return lists, nil
}

// readTops reads the n best entries of each source of plan: with one TopMany when the pools
// can, else one Top per source.
func (g *Generator) readTops(ctx context.Context, user zen.ID, plan []sourcePlan, n int) ([][]zen.PoolEntry, error) {
	if mt, ok := g.pools.(multiTop); ok {
		srcs := make([]zen.Source, len(plan))
		for i, p := range plan {
			srcs[i] = p.src
		}
		tops, err := mt.TopMany(ctx, user, srcs, n)
		if err != nil {
			return nil, fmt.Errorf("read pools of %d: %w", uint64(user), err)
		}
		return tops, nil
	}
	tops := make([][]zen.PoolEntry, len(plan))
	for i, p := range plan {
		top, err := g.pools.Top(ctx, user, p.src, n)
		if err != nil {
			return nil, fmt.Errorf("read pool %d/%s: %w", uint64(user), p.name, err)
		}
		tops[i] = top
	}
	return tops, nil
}

// stepCtx is the context of the writes of steps 1 and 2 (intent, claims, take, releases). When
// the pools and the state share a log (Generator.lazySteps) they do not wait for their own
// fsync: what a machine crash leaves of them is a prefix, in order, as a crash between synced
// steps would, which recovery already handles; and the ready record (step 3), or the empty
// chunk's drop, or abandon's writes on a failure, are synced writes to the same log that make
// them durable before the chunk is answered. Everything else uses ctx.
func (r *chunkRun) stepCtx(ctx context.Context) context.Context {
	if r.g.lazySteps {
		return zen.Lazily(ctx)
	}
	return ctx
}

// readyCtx is the context of the ready record's write (step 3): lazy like the steps before it
// when the caller records the chunk durably itself (Options.CallerRecords), else ctx, so the
// answer waits for the chunk to be durable.
func (r *chunkRun) readyCtx(ctx context.Context) context.Context {
	if r.callerRecords {
		return r.stepCtx(ctx)
	}
	return ctx
}

// writeIntent is step 1, intent: the record lists every pin this chunk may hold before any is
// claimed.
func (r *chunkRun) writeIntent(ctx context.Context) error {
	g, user := r.g, r.user
	var entries []recEntry
	for _, p := range r.won {
		entries = append(entries, recEntry{Entry: p.e, Reason: p.reason})
	}
	for _, p := range r.last.picks {
		entries = append(entries, recEntry{Entry: p.e, Reason: p.reason})
	}
	var err error
	if r.rec == nil {
		// The record's first write numbers the chunk and indexes it for recovery
		// (InFlightUsers).
		if r.no, r.rec, r.intent, err = g.createRecord(r.stepCtx(ctx), user, r.nowMs, entries); err != nil {
			return err
		}
	} else {
		r.rec.Entries = entries
		if r.intent, err = g.putRecordBytes(r.stepCtx(ctx), user, r.no, r.rec); err != nil {
			return g.abandon(ctx, user, r.no, r.rec, err)
		}
	}
	return nil
}

// claim is step 2, first half: claim each chosen pin (one chunk per pin). All of the round's
// claims go in one batched compare-and-set (one synced commit). It returns the pins claimed.
func (r *chunkRun) claim(ctx context.Context) ([]pick, error) {
	g, user, rec := r.g, r.user, r.rec
	claimed := make([]pick, 0, len(r.last.picks))
	conds := make([]zen.Cond, len(r.last.picks))
	for i, p := range r.last.picks {
		r.excluded[p.e.Pin] = true
		conds[i] = zen.Cond{Key: userKey2(user, tagClaim, uint64(p.e.Pin)), Value: []byte(rec.ID)}
	}
	oks, err := zen.CheckAndSetMany(r.stepCtx(ctx), g.state, conds)
	if err != nil {
		return nil, g.abandon(ctx, user, r.no, rec, fmt.Errorf("claim %d pins: %w", len(conds), err))
	}
	for i, p := range r.last.picks {
		if oks[i] {
			claimed = append(claimed, p)
		} else {
			g.m.lost.Inc()
			r.dbg.add("lost: %s claimed by another chunk; replacing", describe(p.e))
		}
	}
	return claimed, nil
}

// takeClaimed is step 2, second half: take the claimed pins out of the pools. Those won join
// r.won; the claims of pins gone from the pools meanwhile are released.
func (r *chunkRun) takeClaimed(ctx context.Context, claimed []pick) error {
	g, user, rec, plan := r.g, r.user, r.rec, r.plan
	es := make([]zen.PoolEntry, len(claimed))
	for i, p := range claimed {
		es[i] = p.e
	}
	r.t = r.since(ctx, stageClaim)
	taken, err := g.pools.Take(r.stepCtx(ctx), user, es)
	r.t = r.since(ctx, stageTake)
	if err != nil {
		return g.abandon(ctx, user, r.no, rec, fmt.Errorf("take from pools of %d: %w", uint64(user), err))
	}
	got := make(map[zen.ID]bool, len(taken))
	for _, e := range taken {
		got[e.Pin] = true
	}
	var releases []zen.Cond
	for _, p := range claimed {
		if got[p.e.Pin] {
			r.won = append(r.won, p)
			for i := range plan {
				if plan[i].src == p.e.Source {
					r.wonBy[i]++
				}
			}
			continue
		}
		// Claimed but gone from the pools (removed or expired meanwhile): not ours to serve.
		g.m.lost.Inc()
		r.dbg.add("lost: %s left the pools before it was taken; replacing", describe(p.e))
		releases = append(releases, zen.Cond{Key: userKey2(user, tagClaim, uint64(p.e.Pin)), Expected: []byte(rec.ID)})
	}
	if len(releases) > 0 {
		if _, err := zen.CheckAndSetMany(r.stepCtx(ctx), g.state, releases); err != nil {
			return g.abandon(ctx, user, r.no, rec, fmt.Errorf("release %d pins: %w", len(releases), err))
		}
	}
	return nil
}

// finishChunk is step 3: it arranges the pins won, makes the record ready with exactly those
// pins in serving order (or drops an empty one), and updates the user's state.
func (r *chunkRun) finishChunk(ctx context.Context) (Chunk, error) {
	g, user, cfg, dbg, plan, rec, no, nowMs, n := r.g, r.user, r.cfg, r.dbg, r.plan, r.rec, r.no, r.nowMs, r.n
	for _, e := range r.last.deferred {
		dbg.add("defer: %s under threshold %.4g, left for a later session", describe(e), g.threshold(plan, e.Source))
	}
	g.m.deferred.Add(float64(len(r.last.deferred)))

	arranged, notes := arrange(r.won, cfg.MaxRun)
	for _, s := range notes {
		dbg.add("%s", s)
	}
	chunk := Chunk{User: user, CreatedMs: nowMs}
	if len(arranged) > 0 {
		// 3. Ready: the record now holds exactly the pins won, in serving order.
		rec.State = stateReady
		rec.Entries = rec.Entries[:0]
		for i, p := range arranged {
			rec.Entries = append(rec.Entries, recEntry{Entry: p.e, Reason: p.reason})
			chunk.Items = append(chunk.Items, itemOf(p.e, p.reason))
			dbg.add("pick %d: %s: %s", i+1, describe(p.e), p.reason)
			g.m.pins.WithLabelValues(p.e.Source.String()).Inc()
		}
		// The ready record and the state row go in one batched compare-and-set when the state
		// row is still the one read at the start (one synced commit instead of two).
		// If the row changed meanwhile (a background sweep, another request), the state
		// update below reads it again.
		next := r.st
		next.LastVisitMs = nowMs
		if len(arranged) >= next.Owed {
			next.Owed = 0
		}
		stateDone, err := g.readyWithState(r.readyCtx(ctx), user, no, rec, r.intent, r.stRaw, next)
		if err != nil {
			return Chunk{}, g.abandon(ctx, user, no, rec, err)
		}
		r.t = r.since(ctx, stageRecord)
		chunk.ID = rec.ID
		g.m.chunks.Inc()
		if stateDone {
			dbg.add("chunk %q: %d of %d wanted", chunk.ID, len(chunk.Items), n)
			chunk.Debug = dbg.lines
			return chunk, nil
		}
	} else if rec != nil {
		// Nothing won: the intent record holds no claim of ours.
		if err := g.state.Apply(ctx, []zen.Mutation{{Key: userKey2(user, tagChunk, no), Delete: true},
			{Key: inflightKey(user, no), Delete: true}}); err != nil {
			return Chunk{}, fmt.Errorf("drop empty chunk %s: %w", rec.ID, err)
		}
	}
	got := len(chunk.Items)
	if got == 0 && r.st.LastVisitMs > 0 && nowMs-r.st.LastVisitMs < visitSlack.Milliseconds() && r.st.Owed <= 0 {
		// An empty visit soon after the last one recorded: the chunk size counts hours away,
		// so moving the last visit by under visitSlack changes nothing worth a synced write on
		// every read of a user with nothing new.
		r.since(ctx, stageFinish)
		dbg.add("chunk: empty; last visit %d ms ago, kept", nowMs-r.st.LastVisitMs)
		chunk.Debug = dbg.lines
		return chunk, nil
	}
	if err := g.updateState(ctx, user, func(s *userState) {
		s.LastVisitMs = nowMs
		if got >= s.Owed {
			s.Owed = 0
		}
	}); err != nil {
		// The chunk is taken and recorded; a stale last visit only affects the next size.
		g.log.Warn("update generator state", zap.Uint64("user", uint64(user)), zap.Error(err))
	}
	r.since(ctx, stageFinish)
	dbg.add("chunk %q: %d of %d wanted", chunk.ID, got, n)
	chunk.Debug = dbg.lines
	return chunk, nil
}

func (g *Generator) threshold(plan []sourcePlan, s zen.Source) float64 {
	for _, p := range plan {
		if p.src == s {
			return p.threshold
		}
	}
	return 0
}

func itemOf(e zen.PoolEntry, reason string) Item {
	return Item{Pin: e.Pin, Source: e.Source, Score: e.Score, Author: e.Author, Board: e.Board, Reason: reason}
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

// abandon tries to put back what a failed GenerateChunk claimed, and returns err. If that
// fails too, the intent record stays for Pending/Settle to recover.
func (g *Generator) abandon(ctx context.Context, user zen.ID, no uint64, rec *record, err error) error {
	if rec == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := g.release(ctx, user, no, rec, false); rerr != nil {
		g.log.Warn("put back failed chunk; left for recovery", zap.String("chunk", rec.ID), zap.Error(rerr))
	}
	return err
}

// owned returns the record's entries whose claim row names this chunk.
func (g *Generator) owned(ctx context.Context, user zen.ID, rec *record) ([]recEntry, error) {
	keys := make([][]byte, len(rec.Entries))
	for i, re := range rec.Entries {
		keys[i] = userKey2(user, tagClaim, uint64(re.Entry.Pin))
	}
	vals, err := zen.GetMany(ctx, g.state, keys)
	if err != nil {
		return nil, fmt.Errorf("read claims of chunk %s: %w", rec.ID, err)
	}
	var out []recEntry
	for i, re := range rec.Entries {
		if vals[i] != nil && string(vals[i]) == rec.ID {
			out = append(out, re)
		}
	}
	return out, nil
}

// finish turns an intent record left by a crash into a ready one: it keeps the pins this
// chunk claimed, makes sure they are out of the pools, and orders them for serving.
func (g *Generator) finish(ctx context.Context, user zen.ID, no uint64, rec *record) error {
	own, err := g.owned(ctx, user, rec)
	if err != nil {
		return err
	}
	es := make([]zen.PoolEntry, len(own))
	picks := make([]pick, len(own))
	for i, re := range own {
		es[i] = re.Entry
		picks[i] = pick{e: re.Entry, reason: re.Reason}
	}
	if len(es) > 0 {
		// Claimed pins not yet taken are taken now; already-taken ones are simply not won again.
		if _, err := g.pools.Take(ctx, user, es); err != nil {
			return fmt.Errorf("take pins of chunk %s: %w", rec.ID, err)
		}
	}
	arranged, _ := arrange(picks, g.cfg.Load().MaxRun)
	rec.State = stateReady
	rec.Entries = rec.Entries[:0]
	for _, p := range arranged {
		rec.Entries = append(rec.Entries, recEntry{Entry: p.e, Reason: p.reason})
	}
	return g.putRecord(ctx, user, no, rec)
}

// release closes a record: unless delivered is set, the pins it owns go back into the pools
// first; then its claims and the record itself are deleted. Every step is safe to repeat.
func (g *Generator) release(ctx context.Context, user zen.ID, no uint64, rec *record, delivered bool) error {
	own, err := g.owned(ctx, user, rec)
	if err != nil {
		return err
	}
	if !delivered && len(own) > 0 {
		es := make([]zen.PoolEntry, len(own))
		for i, re := range own {
			es[i] = re.Entry
		}
		// Restore, not Insert: Take left taken tombstones that a plain Insert must respect (so a
		// late fanout cannot re-add a served pin); giving the chunk back is what lifts them.
		if _, err := g.pools.Restore(ctx, es); err != nil {
			return fmt.Errorf("put back chunk %s: %w", rec.ID, err)
		}
	}
	if delivered && len(own) > 0 {
		// A delivered pin never comes back, so its taken tombstone becomes a forgotten one. Rows
		// that late jobs write for it (append-only inserts: another source, a redelivered
		// fanout) then are deleted by the readers that meet them. Under a taken tombstone they
		// would stay until the pool TTL, because a Restore may still want them, and every read
		// of the pool's head would step over them. Lazily: a crash that loses it leaves the
		// tombstones taken, which only keeps those rows longer.
		pins := make([]zen.ID, len(own))
		for i, re := range own {
			pins[i] = re.Entry.Pin
		}
		if _, err := g.pools.Forget(zen.Lazily(ctx), user, pins); err != nil {
			return fmt.Errorf("forget delivered pins of chunk %s: %w", rec.ID, err)
		}
	}
	if len(own) > 0 {
		conds := make([]zen.Cond, len(own))
		for i, re := range own {
			conds[i] = zen.Cond{Key: userKey2(user, tagClaim, uint64(re.Entry.Pin)), Expected: []byte(rec.ID)}
		}
		if _, err := zen.CheckAndSetMany(ctx, g.state, conds); err != nil {
			return fmt.Errorf("release %d pins of chunk %s: %w", len(own), rec.ID, err)
		}
	}
	if err := g.state.Apply(ctx, []zen.Mutation{{Key: userKey2(user, tagChunk, no), Delete: true},
		{Key: inflightKey(user, no), Delete: true}}); err != nil {
		return fmt.Errorf("delete chunk %s: %w", rec.ID, err)
	}
	return nil
}

// Settle closes an in-flight chunk. delivered=true: it has been materialized, its pins are
// forgotten in the pools (nothing puts them back), the record and its claims go away. delivered=false: its pins return to the pools and the next chunk of the
// user is at least as large. Settling a chunk already settled (or the empty chunk ID) does
// nothing; a malformed ID or one of another user is refused.
func (g *Generator) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if chunkID == "" {
		return nil
	}
	no, err := parseChunkID(user, chunkID)
	if err != nil {
		return err
	}
	rec, err := g.getRecord(ctx, user, no)
	if errors.Is(err, zen.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read chunk %s: %w", chunkID, err)
	}
	if rec.State == stateIntent {
		if err := g.finish(ctx, user, no, rec); err != nil {
			return err
		}
	}
	if !delivered {
		size := len(rec.Entries)
		if err := g.updateState(ctx, user, func(s *userState) { s.Owed = max(s.Owed, size) }); err != nil {
			return err
		}
	}
	if err := g.release(ctx, user, no, rec, delivered); err != nil {
		return err
	}
	g.m.settled.WithLabelValues(fmt.Sprint(delivered)).Inc()
	return nil
}

// Pending lists the user's chunks taken from the pools and not yet settled, oldest first.
// Chunks a crash left unfinished are finished first (their claimed pins, in serving order),
// once they are older than InFlightGrace so a request still running is not disturbed; a
// crashed chunk that owns no pin is deleted.
func (g *Generator) Pending(ctx context.Context, user zen.ID) ([]Chunk, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	recs, err := g.records(ctx, user)
	if err != nil {
		return nil, err
	}
	grace := time.Duration(g.cfg.Load().InFlightGrace).Milliseconds()
	nowMs := g.now().UnixMilli()
	var out []Chunk
	records := make(map[uint64]bool, len(recs))
	for _, nr := range recs {
		no, rec := nr.no, nr.rec
		records[no] = true
		if rec.State == stateIntent {
			if nowMs-rec.CreatedMs < grace {
				continue
			}
			if err := g.finish(ctx, user, no, rec); err != nil {
				return nil, err
			}
			if len(rec.Entries) == 0 {
				if err := g.release(ctx, user, no, rec, true); err != nil {
					return nil, err
				}
				continue
			}
		}
		c := Chunk{ID: rec.ID, User: user, CreatedMs: rec.CreatedMs}
		for _, re := range rec.Entries {
			c.Items = append(c.Items, itemOf(re.Entry, re.Reason))
		}
		out = append(out, c)
	}
	if err := g.pruneIndex(ctx, user, records); err != nil {
		g.log.Warn("prune in-flight index", zap.Uint64("user", uint64(user)), zap.Error(err))
	}
	return out, nil
}

// Unfinished returns the pins claimed by user's chunks that no GenerateChunk has finished: one
// running now, or one a crash left that is younger than InFlightGrace (Pending skips those until
// then). It changes nothing. A pin claimed and not yet taken is still in the pools as well. It
// lets an audit account for every pin while a recovery is pending.
func (g *Generator) Unfinished(ctx context.Context, user zen.ID) ([]zen.ID, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	recs, err := g.records(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []zen.ID
	for _, nr := range recs {
		if nr.rec.State != stateIntent {
			continue
		}
		own, err := g.owned(ctx, user, nr.rec)
		if err != nil {
			return nil, err
		}
		for _, re := range own {
			out = append(out, re.Entry.Pin)
		}
	}
	return out, nil
}

// numberedRecord is one of a user's chunk records with its number.
type numberedRecord struct {
	no  uint64
	rec *record
}

// records reads and decodes all of user's chunk records, in number order.
func (g *Generator) records(ctx context.Context, user zen.ID) ([]numberedRecord, error) {
	prefix := userKey(user, tagChunk)
	rows, err := g.state.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: userKey(user, tagChunk+1)})
	if err != nil {
		return nil, fmt.Errorf("scan chunks of %d: %w", uint64(user), err)
	}
	out := make([]numberedRecord, 0, len(rows))
	for _, kv := range rows {
		if len(kv.Key) != len(prefix)+8 {
			continue
		}
		no := beUint64(kv.Key[len(prefix):])
		rec, err := decodeRecord(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", no, uint64(user), err)
		}
		out = append(out, numberedRecord{no: no, rec: rec})
	}
	return out, nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
