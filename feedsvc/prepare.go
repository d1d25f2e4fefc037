package feedsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Preparing a chunk ahead of a visit (Config.PrepareAfter; docs/read-path.md, "A fresh page
// with no fsync on it").
//
// A first page schedules the preparation of the user's next chunk. When it runs, the generator
// takes the chunk from the pools and the chunk is recorded as a prepared row: a pending row
// whose version says "not served yet", written with a synced write like any served chunk, so
// from then on its pins are in the user's feed and in no pool. The next first page reads it at
// the top of the feed and serves it: a compare-and-set rewrites the row as served, and the page
// is answered once that write is durable (its fsync joins whatever else the store is syncing),
// then its materialization is enqueued. Only the request whose compare-and-set wins shows the
// items as fresh; a concurrent one shows them as feed items. No crash can show a prepared
// chunk as fresh twice. By default the page waits for the rewrite's fsync, so a crash that
// loses it comes before any answer that showed the chunk (session 50). With
// Deps.LazyServedMark the rewrite is lazy and the page does not wait for it; a crash may then
// lose it after the answer, and the next start, told the store was not closed cleanly, runs
// DemotePrepared before it serves: every prepared row is rewritten as served (its pins stay
// where they are, as feed items), so a chunk that was shown is not shown as fresh again, and
// one that was not is never labelled fresh (at most once, not exactly once).

const (
	// maxPreparing bounds the preparations running at once in a process; past it a
	// preparation waits up to laneWait for one to end, then is skipped (the next visit calls
	// the generator, as without preparation).
	maxPreparing = 4
	// maxPreparedHints bounds the users this process remembers as prepared (see maybePrepared);
	// past it the hints are dropped, which only sends those users' next visits through the
	// generator, which then serves their prepared chunks too.
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

// servePrepared marks the prepared chunks a first page read as served, each with a synced
// compare-and-set on the primary that only one request wins, and enqueues their
// materialization. It returns the sequences of the chunks this request won: their items are
// fresh on this page. outcome labels the metric (served, or stale when a new chunk came too).
func (s *Service) servePrepared(ctx context.Context, user zen.ID, rows []preparedRow, outcome string) map[uint64]bool {
	start := time.Now()
	s.forgetPrepared(user)
	ctx, cancel := context.WithTimeout(ctx, s.Config().PersistTimeout)
	defer cancel()
	now := s.now().UnixMilli()
	served := make(map[uint64]bool, len(rows))
	for _, p := range rows {
		pc := p.pc
		pc.Prepared, pc.ServedMs = false, now
		wctx := ctx
		if s.lazyServedMark {
			wctx = zen.Lazily(ctx)
		}
		ok, err := s.primary.CheckAndSet(wctx, pendingKey(user, p.seq), p.row, encodePending(pc))
		switch {
		case err != nil:
			// Shown as feed items; the next visit serves it (it is still prepared) unless the
			// write landed, in which case a read re-enqueues it once it is stale.
			s.m.prepared.WithLabelValues(prepFailed).Inc()
			s.log.Warn("serve prepared chunk", zap.Stringer("user", user), zap.String("chunk", pc.ChunkID), zap.Error(err))
			continue
		case !ok:
			s.m.prepared.WithLabelValues(prepLost).Inc()
			continue
		}
		served[p.seq] = true
		s.m.prepared.WithLabelValues(outcome).Inc()
		s.enqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: p.seq})
	}
	s.m.observeStage(stageFlip, time.Since(start))
	return served
}

// DemotePrepared rewrites every prepared row of the primary as served, with no page having shown
// it as fresh, and enqueues its materialization: its pins stay at the top of the user's feed, as
// feed items. A start after a crash that may have lost lazy served marks (Deps.LazyServedMark)
// runs it before the first GetFeed, so that no chunk a page showed as fresh is shown as fresh
// again. It walks the pending index (Deps.IndexShards scans) and returns how many rows it
// rewrote. The rewrites are lazy: the store's marker of a clean close is gone until this process
// closes it, so a crash before they are durable makes the next start demote them again.
func (s *Service) DemotePrepared(ctx context.Context) (int, error) {
	const page = 1000
	n := 0
	now := s.now().UnixMilli()
	for shard := range s.indexShards {
		prefix := indexPrefix(uint16(shard))
		start, stop := prefix, zen.PrefixEnd(prefix)
		for {
			rows, err := s.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop, Limit: page})
			if err != nil {
				return n, fmt.Errorf("demote prepared: scan pending index of shard %d: %w", shard, err)
			}
			for _, kv := range rows {
				user, seq, ok := indexRow(uint16(shard), kv.Key)
				if !ok {
					continue
				}
				k := pendingKey(user, seq)
				raw, err := s.primary.Get(ctx, k)
				if errors.Is(err, zen.ErrNotFound) {
					continue
				}
				if err != nil {
					return n, fmt.Errorf("demote prepared: read pending chunk of %d: %w", user, err)
				}
				pc, err := decodePending(raw)
				if err != nil || !pc.Prepared {
					continue // a served chunk; a corrupt row is the recovery pass's to report
				}
				pc.Prepared, pc.ServedMs = false, now
				// Lazily: a crash that loses the rewrite is again a start that finds the store
				// unclean, which demotes the row again before anything is served; and no page
				// serves it as fresh meanwhile, since the rewrite is visible at once.
				ok, err = s.primary.CheckAndSet(zen.Lazily(ctx), k, raw, encodePending(pc))
				if err != nil {
					return n, fmt.Errorf("demote prepared chunk %s of %d: %w", pc.ChunkID, user, err)
				}
				if ok {
					n++
					s.m.prepared.WithLabelValues(prepDemoted).Inc()
					s.enqueueMaterialize(ctx, MaterializeTask{User: user, ChunkID: pc.ChunkID, Seq: seq})
				}
			}
			if len(rows) < page {
				break
			}
			start = append(bytes.Clone(rows[len(rows)-1].Key), 0)
		}
	}
	return n, nil
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
// scheduled or running in this process already. A page served from the generator drained the
// pools: it prepares after cfg.PrepareAfter, to let them fill. A page served from a prepared
// chunk left in the pools what came since that chunk was prepared: it prepares at once. A
// preparation that finds the pools empty tries again after cfg.PrepareAfter, up to
// prepareTries times in all.
func (s *Service) prepareLater(user zen.ID, cfg Config, delay time.Duration) {
	if cfg.PrepareAfter <= 0 {
		return
	}
	if _, busy := s.preparing.LoadOrStore(user, struct{}{}); busy {
		return
	}
	if wait := s.askWait(user, cfg.MinChunkInterval); wait > delay {
		delay = wait // not before the user's generator calls are MinChunkInterval apart
	}
	s.bg.Add(1)
	var try func(n int)
	try = func(n int) {
		// A preparation is background work that costs a generator call: let whatever is
		// runnable first (the page's response writer, which this page's handler has just woken)
		// go before it, or it waits for a processor behind it (session 49).
		runtime.Gosched()
		again := false
		defer func() {
			if !again {
				s.preparing.Delete(user)
				s.bg.Done()
			}
		}()
		select {
		case <-s.closing:
			return
		default:
		}
		// The preparation is this user's generator call from now on: a visit while it waits for
		// a slot or a lane is served the feed as it stands (feed.min_chunk_interval), not sent
		// to the generator beside it.
		s.noteAsked(user)
		// A preparation waits for a slot as for a lane, rather than being skipped as soon as
		// maxPreparing run: a skipped one sends the user's next visit through the generator,
		// and on HBase, where a preparation is mostly round trips (29 ms mean in make
		// bench-hbase), four were often all busy: 38 of 518 skipped in one run (session 58).
		if !s.acquire(s.prepSlots) {
			s.m.prepared.WithLabelValues(prepBusy).Inc()
			return
		}
		if !s.acquireLane() {
			<-s.prepSlots
			s.m.prepared.WithLabelValues(prepBusy).Inc()
			return
		}
		empty := s.prepare(user)
		s.releaseLane()
		<-s.prepSlots
		if empty && n+1 < prepareTries {
			again = true
			time.AfterFunc(s.Config().PrepareAfter, func() { try(n + 1) })
		}
	}
	if delay <= 0 {
		// Not a timer of 0: a goroutine a timer starts takes the processor's next slot from
		// the response writer the handler wakes as it returns, and runs first. Started here,
		// before the handler returns, it is the one that waits.
		go try(0)
		return
	}
	time.AfterFunc(delay, func() { try(0) })
}

// prepareTries bounds the preparations one page schedules while the pools stay empty.
const prepareTries = 3

// prepare takes user's next chunk from the generator and records it as a prepared row (synced).
// A chunk it cannot record goes back to the pools, as a first page's would. It reports whether
// the pools had nothing new.
func (s *Service) prepare(user zen.ID) (empty bool) {
	cfg := s.Config()
	start := time.Now()
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
	// No page was read: persist finds the user's pending chunks through their index.
	if _, err := s.persist(context.Background(), cfg, user, c, pageRead{}, false, true); err != nil {
		s.m.prepared.WithLabelValues(prepFailed).Inc()
		s.unrecorded(user, c.ID, "record prepared chunk", err)
		return false
	}
	s.m.prepared.WithLabelValues(prepRecorded).Inc()
	s.notePrepared(user)
	s.m.observeStage(stagePrepare, time.Since(start))
	return false
}

// laneWait bounds how long background work waits for a lane before it gives up (a preparation
// is skipped, a materialization goes to the queue).
const laneWait = 250 * time.Millisecond

// defaultBackgroundLanes is Deps.BackgroundLanes's default: half the processors, at least one.
// Go's scheduler has no priorities: a page's handler, its response writer and a client's reader
// queue for a processor behind whatever is runnable, so background work that could fill every
// processor makes the pages wait behind it (session 49's execution traces). Bounded to half,
// a processor is left for the requests.
func defaultBackgroundLanes() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// acquireLane waits up to laneWait for a background lane; false when none came free or the
// service is closing.
func (s *Service) acquireLane() bool { return s.acquire(s.lanes) }

// acquire waits up to laneWait to put a token in sem; false when it stayed full or the service
// is closing.
func (s *Service) acquire(sem chan struct{}) bool {
	select {
	case sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(laneWait)
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-s.closing:
		return false
	}
}

// releaseLane gives a lane back.
func (s *Service) releaseLane() { <-s.lanes }
