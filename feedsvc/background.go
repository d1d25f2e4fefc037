package feedsvc

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"
)

// Background work after the answer: the served chunk's materialization, inline in a lane of
// this process or through a job, and the lanes that bound such work.

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

// materializeNow materializes task in this process (queued for an inline worker, materializeInline)
// or, when that is off or its queue is full, enqueues its job (bounded by
// materializeEnqueueBound).
func (s *Service) materializeNow(ctx context.Context, task MaterializeTask) {
	if s.materializeInline(task) {
		return
	}
	s.enqueueJob(ctx, task)
}

// enqueueJob enqueues task's materialize job, bounded by materializeEnqueueBound, and reports
// whether it was enqueued.
func (s *Service) enqueueJob(ctx context.Context, task MaterializeTask) bool {
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), materializeEnqueueBound)
	defer ecancel()
	if err := s.enq.EnqueueMaterialize(ectx, task); err != nil {
		s.m.enqueueFailed.Inc()
		s.log.Warn("enqueue materialize", zap.Stringer("user", task.User), zap.String("chunk", task.ChunkID), zap.Error(err))
		return false
	}
	return true
}

// Inline materializations: a served chunk's materialization joins a FIFO in memory of at most
// maxMaterializeQueue chunks, which at most Config.InlineMaterialize workers of this process
// take in turn, each in a background lane for as long as it takes one to come free. So a chunk
// becomes a materialize job (a Redis round trip to enqueue it, more to run it) only when the
// queue is full, when its inline run fails, or at shutdown. The queue holds no state of its
// own: each chunk's pending row is durable before the page answers, so a chunk whose queued
// materialization a crash loses is completed by the recovery pass, and shown from its pending
// row meanwhile.
const maxMaterializeQueue = 4096

// materializeBehindAt is the backlog of the in-process materialization queue past which this
// process takes no new chunk from the pools (materializeBehind): first pages are served
// deferred, and preparations wait. Chunks are then made no faster than they are materialized,
// so the backlog, and the pending rows every read of those users decodes, stay bounded, and the
// queue never spills to jobs because of pages alone.
const materializeBehindAt = maxMaterializeQueue / 4

// materializeBehind returns the chunks waiting for an inline materialization when they are
// materializeBehindAt or more, else 0.
func (s *Service) materializeBehind() int {
	if n := len(s.matQueue); n >= materializeBehindAt {
		return n
	}
	return 0
}

// materializeInline queues task for an inline worker, starting one if fewer than
// Config.InlineMaterialize run, and reports whether it was queued.
func (s *Service) materializeInline(task MaterializeTask) bool {
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
	select {
	case s.matQueue <- task:
		s.m.matQueued.Inc()
	default:
		s.m.inline.WithLabelValues(inlineBusy).Inc()
		return false
	}
	if s.inlineRunning.Add(1) > limit {
		s.inlineRunning.Add(-1)
		return true
	}
	s.bg.Add(1)
	go s.materializeWorker()
	return true
}

// materializeWorker materializes queued chunks until the queue is empty.
func (s *Service) materializeWorker() {
	defer s.bg.Done()
	for {
		select {
		case task := <-s.matQueue:
			s.m.matQueued.Dec()
			s.materializeQueued(task)
			continue
		default:
		}
		s.inlineRunning.Add(-1)
		// A chunk queued as this worker found the queue empty, while the limit was still
		// counted, started no worker: take it.
		if len(s.matQueue) == 0 {
			return
		}
		if s.inlineRunning.Add(1) > int64(max(s.Config().InlineMaterialize, 1)) {
			s.inlineRunning.Add(-1)
			return
		}
	}
}

// materializeQueued materializes one queued chunk in a background lane; it becomes a job when
// that fails or the service is closing.
func (s *Service) materializeQueued(task MaterializeTask) {
	var err error
	if lerr := s.inLane(s.closingCtx, func() {
		mctx, cancel := context.WithTimeout(context.Background(), materializeInlineBound)
		defer cancel()
		err = s.Materialize(mctx, task)
	}); lerr != nil {
		// Closing: the chunks still queued become jobs, until one enqueue fails. The rest are
		// left to the recovery pass (their pending rows are durable), so a shutdown with Redis
		// unreachable costs one enqueue's bound, not one per queued chunk.
		s.m.inline.WithLabelValues(inlineClosing).Inc()
		if !s.closeEnqueueFailed.Load() && !s.enqueueJob(context.Background(), task) {
			s.closeEnqueueFailed.Store(true)
		}
		return
	}
	if err != nil {
		s.m.inline.WithLabelValues(inlineFailed).Inc()
		s.log.Debug("materialize inline: enqueueing", zap.Stringer("user", task.User), zap.String("chunk", task.ChunkID), zap.Error(err))
		s.enqueueJob(context.Background(), task)
		return
	}
	s.m.inline.WithLabelValues(inlineDone).Inc()
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

// DefaultBackgroundLanes is Deps.BackgroundLanes's default: half the processors, at least one.
// Go's scheduler has no priorities: a page's handler, its response writer and a client's reader
// queue for a processor behind whatever is runnable, so background work that could fill every
// processor makes the pages wait behind it, as execution traces of the bench show
// (docs/read-path.md, "Background work waits its turn"). Bounded to half, a processor is left
// for the requests.
func DefaultBackgroundLanes() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// inLane waits for a gap between the process's requests (Deps.Quiet, up to its bound), then for
// a background lane, however long that takes, and runs f in it (at the lanes' priority). It
// fails, f not run, when ctx ends or the service closes first.
func (s *Service) inLane(ctx context.Context, f func()) error {
	s.waitQuiet()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closingCtx, cancel)()
	if err := s.lanes.Do(lctx, f); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: the feed service is closing", ErrUnavailable)
	}
	return nil
}

// waitQuiet holds background work until no request is in flight, for at most quietBound (see
// Deps.Quiet); it returns at once when the service is closing.
func (s *Service) waitQuiet() {
	if s.quiet == nil {
		return
	}
	s.quiet.Wait(s.closingCtx, s.quietBound)
}

// materializeInLane is the Materialize of the recovery pass and of the materialize jobs: like
// the read path's own background work it waits for a gap between requests and a background
// lane (inLane), so that a pass that finds many chunks to complete, or a backlog of jobs, does
// not take the processors the pages need.
func (s *Service) materializeInLane(ctx context.Context, task MaterializeTask) error {
	var err error
	if lerr := s.inLane(ctx, func() { err = s.Materialize(ctx, task) }); lerr != nil {
		return lerr
	}
	return err
}
