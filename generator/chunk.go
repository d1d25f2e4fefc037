package generator

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

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
