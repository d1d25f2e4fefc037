package feedsvc

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Preparing a chunk ahead of a visit (Config.PrepareAfter; docs/read-path.md, "Prepared
// chunks: a fresh page with no write on it").
//
// A first page schedules the preparation of the user's next chunk. When it runs, the generator
// takes the chunk from the pools and the chunk is recorded as a prepared row: a pending row
// whose version says "not served yet", written with a synced write like any served chunk, so
// from then on its pins are in the user's feed and in no pool. The row names its owner, the
// incarnation of the process that prepared it (Service.incarnation, random at each start), and
// that process remembers the chunk as its own to show (ownedChunks). The next first page reads
// the row at the top of the feed. If the row is this incarnation's and the chunk can be taken
// from its memory (one request takes it), the page shows its items as fresh, with no write
// before the answer; then, in the background, a lazy compare-and-set rewrites the row as
// served and the materialization is enqueued. A row of another incarnation (another process,
// or this one before a restart), or one this process has no memory of, is shown as feed items
// and demoted the same way, never fresh. So no crash, restart or concurrent request shows a
// prepared chunk as fresh twice: only one incarnation may show it, and in memory it shows it
// once (at most once, not exactly once: a restart, or a visit through another process, costs
// a prepared chunk its fresh label, not its pins).

// Preparations are background work, scheduled and bounded, never dropped below saturation: a
// due preparation joins a FIFO of at most maxPrepQueue users (one entry per user: a user with a
// preparation scheduled, queued or running gets no second one), and at most maxPreparing
// workers take them in turn, each in a background lane (Deps.BackgroundLanes) for as long as it
// takes one to come free. Only a full queue drops a preparation, which costs its user a
// generator call on the next visit, as without preparation. When the workers fall behind (the
// processors busy with pages), a preparation may wait in the queue longer than
// Config.MinChunkInterval; the user's next first page then asks the generator itself and
// cancels the queued preparation (takeQueuedPrep), so a user's pools are never asked twice for
// one visit's chunk: past saturation, preparations give way to pages instead of adding work.
//
// A preparation that finds the pools empty tries again PrepareAfter later, prepareTries times
// in all (a fanout under way fills them). When the last try finds them empty too, the user is
// remembered (emptyPools) and no preparation is scheduled for that user until a generator call
// finds pins again: the next first page calls the generator itself, as every first page with
// nothing prepared does, and that answer is what clears the mark. It is learnt from the pools'
// own answer, in whichever process the generator and the fanout run, so nothing needs to be
// invalidated across processes and the fanout writes nothing more; a page is never less fresh
// for the mark (only background preparations are skipped). Without it, every first page of a
// user whose pools stay empty left prepareTries empty preparations behind it.
const (
	// maxPreparing bounds the preparations running at once in a process.
	maxPreparing = 4
	// maxPrepQueue bounds the preparations waiting for a worker.
	maxPrepQueue = 16384
	// maxPreparedHints bounds the users this process remembers as prepared (see maybePrepared),
	// and those it remembers with empty pools; past it the marks are dropped, which only sends
	// those users' next visits through the generator, which then serves their prepared chunks
	// too, or lets them be prepared once more.
	maxPreparedHints = 100_000
)

// maybePrepared reports whether this process recorded a prepared chunk for user that no visit
// has served yet: the first page then reads before it calls the generator.
func (s *Service) maybePrepared(user zen.ID) bool {
	_, ok := s.prepared.get(user)
	return ok
}

func (s *Service) notePrepared(user zen.ID) { s.prepared.set(user, s.now().UnixMilli()) }

func (s *Service) forgetPrepared(user zen.ID) { s.prepared.forget(user) }

// servePrepared shows the prepared chunks a first page read: those this incarnation prepared
// and has not shown (taken from its memory, at most once each) are fresh on this page; the
// others are feed items. It writes nothing before it returns: the rows are then rewritten as
// served, lazily, and their materializations enqueued, in the background (markServed). It
// returns the sequences of the chunks shown fresh. outcome labels the metric (served, or stale
// when a new chunk came too).
func (s *Service) servePrepared(ctx context.Context, user zen.ID, rows []preparedRow, outcome string) map[uint64]bool {
	start := time.Now()
	s.forgetPrepared(user)
	served := make(map[uint64]bool, len(rows))
	for _, p := range rows {
		switch {
		case p.pc.Owner == s.incarnation && s.own.take(p.pc.ChunkID):
			// A chunk whose every pin a removal took (filterRemoved) shows nothing fresh.
			if len(p.pc.Items) > 0 {
				served[p.seq] = true
			}
			s.m.prepared.WithLabelValues(outcome).Inc()
		case p.pc.Owner == s.incarnation:
			// Taken by a concurrent page, or forgotten (the memory's bound).
			s.m.prepared.WithLabelValues(prepLost).Inc()
		default:
			s.m.prepared.WithLabelValues(prepForeign).Inc()
		}
	}
	s.markServed(ctx, user, rows)
	s.m.observeStage(stageFlip, time.Since(start))
	return served
}

// markServed rewrites, in the background, the prepared rows a page showed (fresh or not) as
// served, each with a lazy compare-and-set on the primary, and enqueues the materialization of
// each it rewrote. Nothing depends on the rewrite for the fresh label (the memory of the
// incarnation does): a rewrite lost to a crash leaves a row no process shows as fresh, demoted
// again by the next visit or materialized by the recovery pass. A row that changed meanwhile (a
// concurrent page rewrote it, a materialization removed it) was enqueued by whoever changed it.
func (s *Service) markServed(ctx context.Context, user zen.ID, rows []preparedRow) {
	if len(rows) == 0 {
		return
	}
	s.afterAnswer(func() {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Config().PersistTimeout)
		defer cancel()
		now := s.now().UnixMilli()
		for _, p := range rows {
			pc := p.pc
			pc.Prepared, pc.Owner, pc.ServedMs = false, 0, now
			ok, err := s.primary.CheckAndSet(zen.Lazily(mctx), pendingKey(user, p.seq), p.row, encodePending(pc))
			if ok || err != nil {
				s.headChanged(mctx, user)
			}
			switch {
			case err != nil:
				s.m.prepared.WithLabelValues(prepFailed).Inc()
				s.log.Warn("mark prepared chunk served", zap.Stringer("user", user), zap.String("chunk", pc.ChunkID), zap.Error(err))
			case ok:
				s.materializeNow(ctx, MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: p.seq})
			}
		}
	})
}

// returning marks user's first page now and reports whether to prepare after it: always
// without Config.PrepareReturning (or with nothing to prepare), else when the user's previous
// first page in this process came less than PreparedMaxAge before.
func (s *Service) returning(user zen.ID, cfg Config) bool {
	if !cfg.PrepareReturning || cfg.PrepareAfter <= 0 {
		return true
	}
	now := s.now().UnixMilli()
	prev, ok := s.visits.get(user)
	s.visits.set(user, now)
	return ok && now >= prev && now-prev < cfg.PreparedMaxAge.Milliseconds()
}

// noteAsked records that this process asks the generator for user's chunk now (see
// Config.MinChunkInterval).
func (s *Service) noteAsked(user zen.ID) { s.asked.set(user, s.now().UnixMilli()) }

// askedWithin reports whether this process asked the generator for user's chunk less than
// interval ago, and how long ago.
func (s *Service) askedWithin(user zen.ID, interval time.Duration) (time.Duration, bool) {
	if interval <= 0 {
		return 0, false
	}
	at, ok := s.asked.get(user)
	if !ok {
		return 0, false
	}
	since := time.Duration(s.now().UnixMilli()-at) * time.Millisecond
	return since, since >= 0 && since < interval
}

// askWait is how long until user's next generator call is interval after the last one (0 when
// it may be now).
func (s *Service) askWait(user zen.ID, interval time.Duration) time.Duration {
	if since, ok := s.askedWithin(user, interval); ok {
		return interval - since
	}
	return 0
}

// prepareLater schedules the preparation of user's next chunk after delay, unless one is
// scheduled, queued or running in this process already, or the last try of one found user's
// pools empty and no generator call has found pins since (see emptyPools). A page served from the generator drained the pools: it
// prepares after cfg.PrepareAfter, to let them fill. A page served from a prepared chunk left
// in the pools what came since that chunk was prepared: it prepares at once. When due, the
// preparation joins the queue the workers take from (enqueuePrep).
func (s *Service) prepareLater(user zen.ID, cfg Config, delay time.Duration) {
	if cfg.PrepareAfter <= 0 {
		return
	}
	if _, empty := s.emptyPools.get(user); empty {
		s.m.prepSchedule.WithLabelValues(prepEmptyPool).Inc()
		return
	}
	e := &prepEntry{}
	if _, busy := s.preparing.LoadOrStore(user, e); busy {
		s.m.prepSchedule.WithLabelValues(prepCoalesced).Inc()
		return
	}
	if wait := s.askWait(user, cfg.MinChunkInterval); wait > delay {
		delay = wait // not before the user's generator calls are MinChunkInterval apart
	}
	s.bg.Add(1)
	task := prepTask{user: user, e: e}
	if delay <= 0 {
		s.enqueuePrepTry(task)
		return
	}
	time.AfterFunc(delay, func() { s.enqueuePrepTry(task) })
}

// prepTask is a scheduled preparation: its user, its entry in Service.preparing, and how many
// tries found the pools empty before.
type prepTask struct {
	user zen.ID
	e    *prepEntry
	try  int
}

// prepEntry is a user's scheduled preparation in Service.preparing; state is one of the
// prepState values.
type prepEntry struct{ state atomic.Int32 }

// A scheduled preparation's states. A queued one a first page takes over (takeQueuedPrep) is
// cancelled: its worker skips it.
const (
	prepWaiting   int32 = iota // scheduled, not yet due (or due again after empty pools)
	prepInQueue                // due and queued for a worker
	prepAsking                 // running: asking the generator, recording the chunk
	prepCancelled              // taken over by a first page before a worker took it
)

// enqueuePrepTry puts a due preparation in the queue and starts a worker if fewer than
// maxPreparing run. The preparation is this user's generator call from now on: a visit while
// it waits is served the feed as it stands (feed.min_chunk_interval), not sent to the generator
// beside it; a visit after that interval takes its place (takeQueuedPrep).
func (s *Service) enqueuePrepTry(task prepTask) {
	select {
	case <-s.closing:
		s.prepEnded(task)
		return
	default:
	}
	s.noteAsked(task.user)
	task.e.state.Store(prepInQueue)
	select {
	case s.prepQueue <- task:
		s.m.prepSchedule.WithLabelValues(prepQueued).Inc()
		s.m.prepQueued.Inc()
	default:
		s.m.prepSchedule.WithLabelValues(prepDropped).Inc()
		s.prepEnded(task)
		return
	}
	if s.prepWorkers.Add(1) > maxPreparing {
		s.prepWorkers.Add(-1)
		return
	}
	s.bg.Add(1)
	go s.prepWorker()
}

// prepWorker runs queued preparations until the queue is empty.
func (s *Service) prepWorker() {
	defer s.bg.Done()
	for {
		select {
		case task := <-s.prepQueue:
			s.runPrep(task)
			continue
		default:
		}
		s.prepWorkers.Add(-1)
		// A preparation queued as this worker found the queue empty, while maxPreparing were
		// still counted, started no worker: take it.
		if len(s.prepQueue) == 0 {
			return
		}
		if s.prepWorkers.Add(1) > maxPreparing {
			s.prepWorkers.Add(-1)
			return
		}
	}
}

// runPrep runs one queued preparation in a background lane. It counts as queued until it has
// the lane, and may be taken over by a first page until then (takeQueuedPrep): it then only
// ends.
func (s *Service) runPrep(task prepTask) {
	user := task.user
	if task.e.state.Load() == prepCancelled {
		s.m.prepQueued.Dec()
		s.bg.Done() // the page that took it over removed it from Service.preparing
		return
	}
	// Background work that costs a generator call: let whatever is runnable first (the page's
	// response writer, which a page's handler has just woken) go before it.
	runtime.Gosched()
	var empty, taken bool
	err := s.inLane(s.closingCtx, func() {
		s.m.prepQueued.Dec()
		if taken = !task.e.state.CompareAndSwap(prepInQueue, prepAsking); taken {
			return
		}
		s.m.prepRunning.Inc()
		empty = s.prepare(user)
		s.m.prepRunning.Dec()
	})
	switch {
	case err != nil:
		s.m.prepQueued.Dec() // closing
	case taken:
		// The page that took it over removed it from Service.preparing.
		s.bg.Done()
		return
	case empty && task.try+1 < prepareTries:
		task.try++
		task.e.state.Store(prepWaiting)
		time.AfterFunc(s.Config().PrepareAfter, func() { s.enqueuePrepTry(task) })
		return
	case empty:
		s.noteEmptyPools(user, true)
	}
	s.prepEnded(task)
}

// prepareTries bounds the preparations one page schedules while the pools stay empty.
const prepareTries = 3

// prepEnded ends a scheduled preparation: its user may be prepared again.
func (s *Service) prepEnded(task prepTask) {
	s.preparing.CompareAndDelete(task.user, task.e)
	s.bg.Done()
}

// takeQueuedPrep is a first page's look at user's scheduled preparation before the page asks
// the generator itself: the generator was last asked more than Config.MinChunkInterval ago, so
// a preparation still queued has waited that long for a worker. It is cancelled, the page's own
// generator call taking its place, so the user's pools are not asked twice. (A running one
// asked the generator a moment ago: the page was served the feed as it stands.)
func (s *Service) takeQueuedPrep(user zen.ID) {
	v, ok := s.preparing.Load(user)
	if !ok {
		return
	}
	e := v.(*prepEntry)
	if e.state.CompareAndSwap(prepInQueue, prepCancelled) {
		// The worker that dequeues it ends it (runPrep); the user may be prepared again now.
		s.preparing.CompareAndDelete(user, e)
		s.m.prepSchedule.WithLabelValues(prepTaken).Inc()
	}
}

// noteEmptyPools marks user's pools as found empty by the last try of a preparation, or clears
// the mark when a generator call found pins (see emptyPools).
func (s *Service) noteEmptyPools(user zen.ID, empty bool) {
	if empty {
		s.emptyPools.set(user, s.now().UnixMilli())
		return
	}
	s.emptyPools.forget(user)
}

// prepare takes user's next chunk from the generator and records it as a prepared row (synced).
// A chunk it cannot record goes back to the pools, as a first page's would. It reports whether
// the pools had nothing new.
func (s *Service) prepare(user zen.ID) (empty bool) {
	cfg := s.Config()
	start := time.Now()
	if s.materializeBehind() > 0 {
		// No new chunk while the served ones wait for their materialization: the next visit
		// asks again (or is deferred too).
		s.m.prepared.WithLabelValues(prepDeferred).Inc()
		return false
	}
	s.noteAsked(user)
	gctx, gcancel := context.WithTimeout(context.Background(), cfg.GeneratorDeadline)
	c, err := s.gen.GenerateChunk(gctx, user)
	gcancel()
	switch {
	case err != nil:
		s.m.prepared.WithLabelValues(prepFailed).Inc()
		s.log.Debug("prepare chunk", zap.Stringer("user", user), zap.Error(err))
		return false
	case c.User != 0 && c.User != user:
		s.m.prepared.WithLabelValues(prepFailed).Inc()
		s.settle(user, c.ID, false)
		return false
	case len(c.Items) == 0:
		s.m.prepared.WithLabelValues(prepEmpty).Inc()
		if c.ID != "" {
			s.settle(user, c.ID, true)
		}
		return true
	}
	s.noteEmptyPools(user, false)
	// Remembered as this incarnation's to show before the row is written: a visit that reads
	// the row finds it. No page was read: persist finds the user's pending chunks through their
	// index.
	s.own.add(c.ID)
	if _, err := s.persist(context.Background(), cfg, user, c, pageRead{}, false, true); err != nil {
		// Forgotten even when the row may still land (an unsure recording): it is then shown as
		// feed items, not fresh.
		s.own.take(c.ID)
		s.m.prepared.WithLabelValues(prepFailed).Inc()
		s.unrecorded(user, c.ID, "record prepared chunk", err)
		return false
	}
	s.m.prepared.WithLabelValues(prepRecorded).Inc()
	s.notePrepared(user)
	s.m.observeStage(stagePrepare, time.Since(start))
	return false
}
