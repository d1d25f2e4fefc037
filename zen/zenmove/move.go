// Package zenmove moves a range of shards from one store to another while the graph serves:
// copy the range's rows of every shard-keyed table to the target, repeat catch-up passes over
// what changed until the remainder is small, fence writes to those shards only (zenroute), run a
// final pass, verify row counts and checksums per shard, and switch the shard map to the target.
//
// Every pass is the same diff of source against target (copy rows missing or different on the
// target, delete rows gone from the source), so a pass is idempotent and a move resumes after a
// crash by running passes again: the progress row (Options.State) only says which move is under
// way and how far it got. A crash while fenced leaves the fence in a published map only; the
// rerun finishes the move from the final pass, or lifts the fence when verification fails.
package zenmove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// Maps is where a move reads the shard map in use and publishes the maps that fence and switch.
type Maps interface {
	// Current returns the map in use.
	Current() *zen.ShardMap
	// Publish installs m wherever the map is routed by and returns only once no write can still
	// be on its way under the previous map (zenroute.Store.Swap in this process; every process
	// sharing the map, when they share it through ZooKeeper).
	Publish(ctx context.Context, m *zen.ShardMap) error
}

// Plan is one move: shards From..To (inclusive) to the store named Target.
type Plan struct {
	From, To uint16
	Target   string
	// MaxFence refuses to fence when the last catch-up pass took longer (the final pass, under
	// the fence, reads the same rows): the range is too big for one move. 0 means
	// DefaultMaxFence; a negative value means no limit. It is not part of the move's identity.
	MaxFence time.Duration `json:"-"`
}

// DefaultMaxFence keeps a fence under the 5 s that writes to fenced shards wait by default
// (zenroute.Options.FenceWait).
const DefaultMaxFence = 4 * time.Second

// String names the move: "shards 16–31 to cold".
func (p Plan) String() string { return fmt.Sprintf("shards %d–%d to %s", p.From, p.To, p.Target) }

// same reports whether o is the same move (range and target).
func (p Plan) same(o Plan) bool { return p.From == o.From && p.To == o.To && p.Target == o.Target }

// Options configures a Mover.
type Options struct {
	// Tables are the shard-keyed tables moved; nil means zenroute.ShardedTables().
	Tables []string
	// Batch is the rows per scan and per write; 0 means 500.
	Batch int
	// Remainder is the number of rows changed by a catch-up pass at or below which the move
	// fences; 0 means 100.
	Remainder int
	// MaxPasses bounds the catch-up passes before the fence (the move also fences once a pass
	// stops shrinking); 0 means 8.
	MaxPasses int
	// PassRetries is how many times a catch-up pass that failed is run again before the move
	// gives up (a pass is a diff of the source against the target, so running it again is
	// safe); the final pass, under the fence, is not retried. 0 means 5; negative, none.
	PassRetries int
	// RetryBackoff is the wait before the first retry of a pass, doubled before each next one;
	// 0 means 2s. The default's five retries wait 62 s in all: longer than gohbase's 30 s read
	// timeout, after which a region client that got no answer is closed and the next call
	// connects again.
	RetryBackoff time.Duration
	// State is the table that keeps the progress row of a move under way (phase, pass), so a
	// rerun after a crash knows it; nil keeps none.
	State zen.Table
	// Logger receives progress and the fence's duration; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives smartfeed_shardmove_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// Progress is reported as a move goes.
type Progress struct {
	Phase string // "count", "pass", "retry", "final", "verify", "switch", "done"
	Pass  int    // catch-up pass number (1 = the copy)
	Table string
	Done  int64 // source rows examined in this phase so far
	Total int64 // source rows counted before the copy (an estimate once writes go on)
	// Changed is the rows this pass wrote or deleted on the target so far.
	Changed int64
}

// ShardStat is one shard's rows and bytes (keys plus values) on a store, over the moved tables.
type ShardStat struct {
	Shard uint16 `json:"shard"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// Result tells what a move did (or, for a dry run, would do).
type Result struct {
	Plan        Plan          `json:"plan"`
	Source      string        `json:"source"`
	DryRun      bool          `json:"dry_run"`
	Resumed     bool          `json:"resumed"`      // a progress row of this move was found
	AlreadyDone bool          `json:"already_done"` // the map already had the shards on the target
	Shards      []ShardStat   `json:"shards"`       // on the source before the copy (dry run) or at the switch
	TargetRows  int64         `json:"target_rows"`  // rows of the range already on the target (dry run)
	Passes      int           `json:"passes"`       // catch-up passes before the fence, the copy included
	RowsCopied  int64         `json:"rows_copied"`  // puts on the target, all passes
	RowsDeleted int64         `json:"rows_deleted"` // deletes on the target, all passes
	FinalRows   int64         `json:"final_rows"`   // rows the final pass (under the fence) changed
	Fence       time.Duration `json:"fence_ns"`     // from the fenced map published to the switch published
	Took        time.Duration `json:"took_ns"`
}

// ErrPlan is wrapped by the refusal of a plan that cannot run: a bad range, one spread over
// several stores or partly fenced, an unknown store.
var ErrPlan = errors.New("zenmove: bad plan")

// ErrUnfinished is wrapped by the refusal of a move while another one is unfinished.
var ErrUnfinished = errors.New("zenmove: another move is unfinished")

// ErrFenceTooLong is wrapped by the refusal to fence a range whose passes take longer than
// Plan.MaxFence. Nothing was fenced; move smaller ranges (a later move reconciles the rows this
// one copied).
var ErrFenceTooLong = errors.New("zenmove: the fence would be too long")

// ErrMismatch is returned when verification finds the target differing from the source: the
// fence is lifted and the map keeps the shards on the source.
var ErrMismatch = errors.New("zenmove: verification failed")

// Mover runs moves over named stores. Run one move at a time per shard map.
type Mover struct {
	stores map[string]zen.Store
	maps   Maps
	o      Options
	log    *zap.Logger
	met    metrics
}

type metrics struct {
	copied, deleted, passes prometheus.Counter
	retries                 prometheus.Counter // catch-up passes run again after a failure
	fence                   prometheus.Histogram
	moves                   *prometheus.CounterVec
}

// New returns a Mover over stores (by name; the names the shard map uses).
func New(stores map[string]zen.Store, maps Maps, o Options) (*Mover, error) {
	if maps == nil {
		return nil, errors.New("zenmove: no shard map source")
	}
	if o.Tables == nil {
		o.Tables = zenroute.ShardedTables()
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.Remainder <= 0 {
		o.Remainder = 100
	}
	if o.PassRetries == 0 {
		o.PassRetries = 5
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 2 * time.Second
	}
	if o.MaxPasses <= 0 {
		o.MaxPasses = 8
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	f := promauto.With(o.Registerer)
	mv := &Mover{stores: stores, maps: maps, o: o, log: o.Logger, met: metrics{
		copied: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_shardmove_rows_copied_total",
			Help: "Rows a shard move wrote to its target (all passes)."}),
		deleted: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_shardmove_rows_deleted_total",
			Help: "Rows a shard move deleted from its target because the source no longer had them."}),
		passes: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_shardmove_passes_total",
			Help: "Copy and catch-up passes of shard moves, the final pass under the fence included."}),
		retries: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_shardmove_pass_retries_total",
			Help: "Catch-up passes of shard moves run again after a failure (Options.PassRetries)."}),
		fence: f.NewHistogram(prometheus.HistogramOpts{Name: "smartfeed_shardmove_fence_seconds",
			Help:    "How long a shard move kept writes to the moving shards fenced.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		moves: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_shardmove_moves_total",
			Help: "Shard moves by result: switched, failed, refused (fence too long or bad plan: nothing fenced), rolled_back (fence lifted), dry_run."}, []string{"result"}),
	}}
	return mv, nil
}

// state is the progress row of a move under way.
type state struct {
	Plan    Plan      `json:"plan"`
	Source  string    `json:"source"`
	Phase   string    `json:"phase"` // "passes", "fenced"
	Pass    int       `json:"pass"`
	Total   int64     `json:"total"` // source rows counted before the copy
	Started time.Time `json:"started"`
}

var stateKey = []byte("shardmove")

func (mv *Mover) loadState(ctx context.Context) (*state, error) {
	if mv.o.State == nil {
		return nil, nil
	}
	b, err := mv.o.State.Get(ctx, stateKey)
	if errors.Is(err, zen.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read move progress: %w", err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode move progress %q: %w", b, err)
	}
	return &s, nil
}

func (mv *Mover) saveState(ctx context.Context, s *state) error {
	if mv.o.State == nil {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode move progress: %w", err)
	}
	if err := mv.o.State.Apply(ctx, []zen.Mutation{{Key: stateKey, Value: b}}); err != nil {
		return fmt.Errorf("save move progress: %w", err)
	}
	return nil
}

func (mv *Mover) clearState(ctx context.Context) error {
	if mv.o.State == nil {
		return nil
	}
	if err := mv.o.State.Apply(ctx, []zen.Mutation{{Key: stateKey, Delete: true}}); err != nil {
		return fmt.Errorf("clear move progress: %w", err)
	}
	return nil
}

// source returns the store holding every shard of the plan in m, whether they are fenced, and
// whether they are already on the target; a range split over several stores is refused.
func source(m *zen.ShardMap, p Plan) (name string, fenced, onTarget bool, err error) {
	if p.From > p.To {
		return "", false, false, fmt.Errorf("%w: shards %d–%d: from above to", ErrPlan, p.From, p.To)
	}
	if p.To > m.HighestShard() {
		return "", false, false, fmt.Errorf("%w: shards %d–%d: the shard map covers shards 0–%d only", ErrPlan, p.From, p.To, m.HighestShard())
	}
	anyFenced, allFenced := false, true
	for _, r := range m.Ranges() {
		if r.To < p.From || r.From > p.To {
			continue
		}
		if name != "" && r.Store != name {
			return "", false, false, fmt.Errorf("%w: shards %d–%d are on several stores (%s, %s): move each store's part on its own",
				ErrPlan, p.From, p.To, name, r.Store)
		}
		name = r.Store
		anyFenced = anyFenced || r.Fenced
		allFenced = allFenced && r.Fenced
	}
	if anyFenced && !allFenced {
		return "", false, false, fmt.Errorf("%w: shards %d–%d are partly fenced by another move", ErrPlan, p.From, p.To)
	}
	return name, allFenced, name == p.Target, nil
}

// endpoints resolves the plan's source and target tables.
func (mv *Mover) endpoints(ctx context.Context, src, dst string) (map[string][2]zen.Table, error) {
	s, ok := mv.stores[src]
	if !ok {
		return nil, fmt.Errorf("%w: source store %q is not open here", ErrPlan, src)
	}
	d, ok := mv.stores[dst]
	if !ok {
		return nil, fmt.Errorf("%w: unknown target store %q (stores: %v)", ErrPlan, dst, mv.storeNames())
	}
	out := map[string][2]zen.Table{}
	for _, name := range mv.o.Tables {
		st, err := s.Table(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("open %s on %s: %w", name, src, err)
		}
		dt, err := d.Table(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("open %s on %s: %w", name, dst, err)
		}
		out[name] = [2]zen.Table{st, dt}
	}
	return out, nil
}

func (mv *Mover) storeNames() []string {
	var n []string
	for k := range mv.stores {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// DryRun reports the rows and bytes per shard the plan would move and how many rows of the range
// the target already holds, changing nothing.
func (mv *Mover) DryRun(ctx context.Context, p Plan) (Result, error) {
	t0 := time.Now()
	res := Result{Plan: p, DryRun: true}
	src, _, onTarget, err := source(mv.maps.Current(), p)
	if err != nil {
		return res, err
	}
	res.Source, res.AlreadyDone = src, onTarget
	if onTarget {
		return res, nil
	}
	eps, err := mv.endpoints(ctx, src, p.Target)
	if err != nil {
		return res, err
	}
	stats := map[uint16]*ShardStat{}
	for _, name := range mv.o.Tables {
		if err := mv.each(ctx, eps[name][0], p, func(kv zen.KV) {
			sh := uint16(zen.KeyShard(kv.Key))
			s := stats[sh]
			if s == nil {
				s = &ShardStat{Shard: sh}
				stats[sh] = s
			}
			s.Rows++
			s.Bytes += int64(len(kv.Key) + len(kv.Value))
		}); err != nil {
			return res, err
		}
		if err := mv.each(ctx, eps[name][1], p, func(zen.KV) { res.TargetRows++ }); err != nil {
			return res, err
		}
	}
	res.Shards = sortedStats(stats)
	res.Took = time.Since(t0)
	mv.met.moves.WithLabelValues("dry_run").Inc()
	return res, nil
}

func sortedStats(m map[uint16]*ShardStat) []ShardStat {
	out := make([]ShardStat, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ShardStat) int { return int(a.Shard) - int(b.Shard) })
	return out
}

// each calls fn on every row of the plan's range in t, in key order, batch by batch.
func (mv *Mover) each(ctx context.Context, t zen.Table, p Plan, fn func(zen.KV)) error {
	c := newCursor(t, p, mv.o.Batch)
	for {
		kv, ok, err := c.peek(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		fn(kv)
		c.next()
	}
}

// recordFailure counts and logs a move that ended with err (nil: nothing to record).
func (mv *Mover) recordFailure(p Plan, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrFenceTooLong) || errors.Is(err, ErrPlan):
		// Refused before anything was fenced or switched: the caller is told what to do
		// (move a smaller range, fix the plan); nothing in the system failed.
		mv.met.moves.WithLabelValues("refused").Inc()
		mv.log.Warn("shard move refused", zap.Stringer("plan", p), zap.Error(err))
	default:
		mv.met.moves.WithLabelValues("failed").Inc()
		mv.log.Error("shard move failed", zap.Stringer("plan", p), zap.Error(err))
	}
}

// Move runs the plan to the end: passes, fence, final pass, verification, switch. report, when
// set, is called as it goes. A rerun of a move that crashed resumes it; a rerun of one that
// finished reports AlreadyDone.
func (mv *Mover) Move(ctx context.Context, p Plan, report func(Progress)) (res Result, err error) {
	t0 := time.Now()
	if report == nil {
		report = func(Progress) {}
	}
	res = Result{Plan: p}
	defer func() {
		res.Took = time.Since(t0)
		mv.recordFailure(p, err)
	}()
	prev, err := mv.loadState(ctx)
	if err != nil {
		return res, err
	}
	if prev != nil && !prev.Plan.same(p) {
		return res, fmt.Errorf("%w (%s, phase %s): rerun it to finish it first", ErrUnfinished, prev.Plan, prev.Phase)
	}
	res.Resumed = prev != nil
	cur := mv.maps.Current()
	src, fenced, onTarget, err := source(cur, p)
	if err != nil {
		return res, err
	}
	res.Source = src
	if onTarget {
		if fenced { // switched but a crash kept the fence: lift it
			if err := mv.maps.Publish(ctx, mustWith(cur, p, func(r *zen.ShardRange) { r.Fenced = false })); err != nil {
				return res, fmt.Errorf("lift the fence: %w", err)
			}
		}
		res.AlreadyDone = true
		return res, mv.clearState(ctx)
	}
	if prev != nil && prev.Source != src {
		return res, fmt.Errorf("%w: it read from %s but the map now has the shards on %s", ErrUnfinished, prev.Source, src)
	}
	eps, err := mv.endpoints(ctx, src, p.Target)
	if err != nil {
		return res, err
	}
	st := &state{Plan: p, Source: src, Phase: "passes", Started: time.Now().UTC()}
	if prev != nil {
		st.Started, st.Total = prev.Started, prev.Total
	}
	mv.log.Info("shard move", zap.Stringer("plan", p), zap.String("source", src), zap.Bool("resumed", res.Resumed),
		zap.Bool("fenced", fenced))
	if !fenced {
		var total int64
		report(Progress{Phase: "count"})
		for _, name := range mv.o.Tables {
			if err := mv.each(ctx, eps[name][0], p, func(zen.KV) { total++ }); err != nil {
				return res, err
			}
		}
		st.Total = total
		lastDur, err := mv.passes(ctx, eps, p, st, report, &res)
		if err != nil {
			return res, err
		}
		maxFence := p.MaxFence
		if maxFence == 0 {
			maxFence = DefaultMaxFence
		}
		if maxFence > 0 && lastDur > maxFence {
			if err := mv.clearState(ctx); err != nil {
				return res, err
			}
			return res, fmt.Errorf("%w: a pass over shards %d–%d takes %v, over the %v limit: move a smaller range",
				ErrFenceTooLong, p.From, p.To, lastDur.Round(time.Millisecond), maxFence)
		}
	}
	return mv.fenceAndSwitch(ctx, eps, p, st, fenced, res, report)
}

// fenceAndSwitch fences the shards (unless a crashed run left them fenced), runs the final pass,
// verifies and switches; on failure it lifts the fence.
func (mv *Mover) fenceAndSwitch(ctx context.Context, eps map[string][2]zen.Table, p Plan, st *state, fenced bool,
	res Result, report func(Progress)) (Result, error) {
	cur := mv.maps.Current()
	unfenced := mustWith(cur, p, func(r *zen.ShardRange) { r.Fenced = false })
	st.Phase = "fenced"
	if err := mv.saveState(ctx, st); err != nil {
		return res, err
	}
	fenceStart := time.Now()
	if !fenced {
		if err := mv.maps.Publish(ctx, mustWith(cur, p, func(r *zen.ShardRange) { r.Fenced = true })); err != nil {
			mv.lift(unfenced, p)
			return res, fmt.Errorf("publish the fence: %w", err)
		}
	}
	mv.log.Info("shard move fenced", zap.Stringer("plan", p))
	fail := func(err error) (Result, error) {
		if lerr := mv.lift(unfenced, p); lerr != nil {
			return res, errors.Join(err, lerr)
		}
		st.Phase = "passes"
		_ = mv.saveState(context.WithoutCancel(ctx), st)
		mv.met.moves.WithLabelValues("rolled_back").Inc()
		return res, err
	}
	dig := newDigests()
	put, del, err := mv.pass(ctx, eps, p, "final", st.Pass+1, st.Total, report, dig)
	if err != nil {
		return fail(fmt.Errorf("final pass: %w", err))
	}
	res.FinalRows = put + del
	res.RowsCopied += put
	res.RowsDeleted += del
	report(Progress{Phase: "verify"})
	stats, err := dig.compare(mv.o.Tables, p)
	if err != nil {
		return fail(err)
	}
	res.Shards = stats
	report(Progress{Phase: "switch"})
	switched := mustWith(cur, p, func(r *zen.ShardRange) { r.Store, r.Fenced = p.Target, false })
	if err := mv.maps.Publish(ctx, switched); err != nil {
		return fail(fmt.Errorf("publish the switch: %w", err))
	}
	res.Fence = time.Since(fenceStart)
	mv.met.fence.Observe(res.Fence.Seconds())
	mv.met.moves.WithLabelValues("switched").Inc()
	mv.log.Info("shard move switched", zap.Stringer("plan", p), zap.Duration("fence", res.Fence),
		zap.Int64("final_rows", res.FinalRows), zap.Int64("copied", res.RowsCopied))
	report(Progress{Phase: "done"})
	if err := mv.clearState(ctx); err != nil {
		mv.log.Warn("shard move switched but its progress row stays; a rerun clears it", zap.Error(err))
	}
	return res, nil
}

// lift publishes the map without the fence, under a context of its own (the move's may be done).
func (mv *Mover) lift(unfenced *zen.ShardMap, p Plan) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mv.maps.Publish(ctx, unfenced); err != nil {
		mv.log.Error("shard move: lifting the fence failed; rerun the move to finish or lift it", zap.Stringer("plan", p), zap.Error(err))
		return fmt.Errorf("lift the fence: %w", err)
	}
	mv.log.Warn("shard move: fence lifted, the shards stay on the source", zap.Stringer("plan", p))
	return nil
}
