package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// Composing a page: the first page (a fresh chunk from the generator or a prepared one, in
// front of the materialized feed) and the later ones (the materialized feed after the cursor).

func (s *Service) laterPage(ctx context.Context, user zen.ID, after position, size int) (Page, error) {
	res, out, err := s.read(ctx, user, &after, size)
	if err != nil {
		return Page{}, err
	}
	page := Page{FreshStatus: FreshNotFirstPage, From: out.From, Hedged: out.Hedged}
	s.fill(&page, user, nil, res, size, nil)
	return page, nil
}

type genResult struct {
	c   Chunk
	err error
}

// readResult is a first page's read of the materialized feed.
type readResult struct {
	res pageRead
	out hedge.Outcome
	err error
}

// firstPage composes a first page by the first of four ways that applies: the feed alone when
// the primary's breaker is open (breakerPage); this process's young prepared chunk in front of
// the feed (preparedPage); the feed as it stands when the generator was asked a moment ago
// (recentPage); else a fresh chunk from the generator, read beside the feed (generatedPage).
func (s *Service) firstPage(ctx context.Context, cfg Config, user zen.ID, size int) (Page, error) {
	pageStart := time.Now()
	if state, why := s.hedger.BreakerStatus(); state == hedge.BreakerOpen {
		return s.breakerPage(ctx, user, size, why)
	}
	returning := s.returning(user, cfg)
	var early *readResult
	if cfg.PrepareAfter > 0 && s.maybePrepared(user) {
		// This process prepared the user's next chunk: read first, and serve it if it is young,
		// with no generator call.
		rd := s.timedRead(ctx, user, size)
		if rd.err != nil {
			return Page{}, rd.err
		}
		if page, ok := s.preparedPage(ctx, cfg, user, size, rd.res, rd.out, pageStart); ok {
			return page, nil
		}
		early = &rd
	}
	if since, ok := s.askedWithin(user, cfg.MinChunkInterval); ok {
		return s.recentPage(ctx, cfg, user, size, early, since, pageStart)
	}
	if behind := s.materializeBehind(); behind > 0 {
		return s.deferredPage(ctx, user, size, early, fmt.Sprintf(
			"%d served chunks were waiting for their materialization in this process: the feed as it stands; the new pins stay in the pools", behind), pageStart)
	}
	if limit, ok := s.startGenerating(cfg); !ok {
		return s.deferredPage(ctx, user, size, early, fmt.Sprintf(
			"%d first pages were waiting on the generator (feed.max_generating): the feed as it stands; the new pins stay in the pools", limit), pageStart)
	}
	s.takeQueuedPrep(user)
	return s.generatedPage(ctx, cfg, user, size, early, returning, pageStart)
}

// DefaultMaxGenerating is Config.MaxGenerating's value when 0: two first pages waiting on the
// generator per processor the Go runtime uses.
func DefaultMaxGenerating() int { return 2 * runtime.GOMAXPROCS(0) }

// startGenerating counts a first page that will wait on the generator, unless
// Config.MaxGenerating of them wait already; then ok is false and limit is the bound. Every
// true is matched by one decrement, when the page's generator call returns (generatedPage).
func (s *Service) startGenerating(cfg Config) (limit int, ok bool) {
	limit = cfg.MaxGenerating
	if limit == 0 {
		limit = DefaultMaxGenerating()
	}
	if s.generating.Add(1) > int64(limit) {
		s.generating.Add(-1)
		return limit, false
	}
	return limit, true
}

// deferredPage serves the feed as it stands, and the prepared chunks in it, with no generator
// call: Config.MaxGenerating first pages of this process were waiting on the generator
// already, or materializeBehind chunks on their materialization; detail says which. The new
// pins stay in the pools, for the user's next visit. early is the read a look for a prepared
// chunk made already, if any.
func (s *Service) deferredPage(ctx context.Context, user zen.ID, size int, early *readResult, detail string, pageStart time.Time) (Page, error) {
	page, err := s.standingPage(ctx, user, size, early, FreshDeferred, detail)
	if err != nil {
		return Page{}, err
	}
	s.m.observeStage(stagePageDeferred, time.Since(pageStart))
	return page, nil
}

// standingPage composes a first page with no generator call: the feed as it stands, and the
// prepared chunks in it, with status and detail saying why. early is the read a look for a
// prepared chunk made already, if any.
func (s *Service) standingPage(ctx context.Context, user zen.ID, size int, early *readResult, status FreshStatus, detail string) (Page, error) {
	var rd readResult
	if early != nil {
		rd = *early
	} else {
		rd = s.timedRead(ctx, user, size)
	}
	if rd.err != nil {
		return Page{}, rd.err
	}
	page := Page{From: rd.out.From, Hedged: rd.out.Hedged, FreshStatus: status, FreshDetail: detail}
	served := s.servePreparedOn(ctx, &page, user, rd.res.prepared, prepServed)
	s.fill(&page, user, nil, rd.res, size, served)
	return page, nil
}

// timedRead reads the first page of the materialized feed, timed as the read stage.
func (s *Service) timedRead(ctx context.Context, user zen.ID, size int) readResult {
	start := time.Now()
	var rd readResult
	rd.res, rd.out, rd.err = s.read(ctx, user, nil, size)
	s.m.observeStage(stageRead, time.Since(start))
	return rd
}

// breakerPage serves the materialized feed without calling the generator. The primary is
// failing or hanging (its breaker opened on the reads): a chunk could not be recorded on it
// before the answer, so generating one would take pins from the pools, wait PersistTimeout on
// the primary, and give them back. The breaker routes the read to the standby first.
func (s *Service) breakerPage(ctx context.Context, user zen.ID, size int, why string) (Page, error) {
	rd := s.timedRead(ctx, user, size)
	if rd.err != nil {
		return Page{}, rd.err
	}
	page := Page{From: rd.out.From, Hedged: rd.out.Hedged, FreshStatus: FreshPrimaryDown,
		FreshDetail: "the primary feed store's circuit breaker is open (" + why + "): no fresh chunk can be recorded"}
	s.fill(&page, user, nil, rd.res, size, nil)
	return page, nil
}

// preparedPage serves the newest prepared chunk res met when it is this incarnation's and
// younger than PreparedMaxAge; ok is false when the page goes on without it.
func (s *Service) preparedPage(ctx context.Context, cfg Config, user zen.ID, size int, res pageRead, out hedge.Outcome, pageStart time.Time) (page Page, ok bool) {
	if len(res.prepared) == 0 || res.prepared[0].pc.Owner != s.incarnation {
		// Served or materialized meanwhile; or the newest is another incarnation's, which
		// the page through the generator shows as feed items.
		s.forgetPrepared(user)
		return Page{}, false
	}
	if s.now().UnixMilli()-res.prepared[0].pc.ServedMs > cfg.PreparedMaxAge.Milliseconds() {
		return Page{}, false
	}
	page = Page{From: out.From, Hedged: out.Hedged, FreshStatus: FreshEmpty}
	served := s.servePreparedOn(ctx, &page, user, res.prepared, prepServed)
	s.fill(&page, user, nil, res, size, served)
	s.prepareLater(user, cfg, 0)
	s.m.observeStage(stagePagePrepared, time.Since(pageStart))
	return page, true
}

// recentPage serves the feed as it stands, and the prepared chunks in it, with no generator
// call: the generator was asked for this user's chunk since ago, within MinChunkInterval.
// early is the read a look for a prepared chunk made already, if any.
func (s *Service) recentPage(ctx context.Context, cfg Config, user zen.ID, size int, early *readResult, since time.Duration, pageStart time.Time) (Page, error) {
	page, err := s.standingPage(ctx, user, size, early, FreshRecent,
		fmt.Sprintf("the generator was asked %v ago (feed.min_chunk_interval %v)", since, cfg.MinChunkInterval))
	if err != nil {
		return Page{}, err
	}
	// The next chunk is prepared once the interval allows (a no-op when one is scheduled, or
	// when the preparations found the pools empty: then the first visit after the interval
	// asks the generator itself), also when nothing was served.
	s.prepareLater(user, cfg, 0)
	s.m.observeStage(stagePageRecent, time.Since(pageStart))
	return page, nil
}

// generatedPage asks the generator for a fresh chunk and reads the feed at the same time (or
// takes early, the read a look for a prepared chunk made already), records the chunk, and
// serves it in front of the feed. The generator runs with its own deadline; if it ignores the
// deadline, the request leaves without it and a background reader settles whatever it returns
// late. The next chunk is prepared for a returning user (Config.PrepareReturning).
func (s *Service) generatedPage(ctx context.Context, cfg Config, user zen.ID, size int, early *readResult, returning bool, pageStart time.Time) (Page, error) {
	s.noteAsked(user)
	genCh := make(chan genResult, 1)
	gctx, gcancel := context.WithTimeout(ctx, cfg.GeneratorDeadline)
	defer gcancel()
	start := time.Now()
	go func() {
		c, err := s.gen.GenerateChunk(gctx, user)
		s.generating.Add(-1) // counted by startGenerating
		genCh <- genResult{c, err}
	}()
	readCh := make(chan readResult, 1)
	if early != nil {
		readCh <- *early
	} else {
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
	fresh := s.keepChunk(ctx, cfg, user, &page, gen, timedOut, rd)
	if rd.err != nil {
		return Page{}, rd.err
	}
	// Prepared chunks the read met (this incarnation's older than PreparedMaxAge, fresh after the
	// new chunk; another's, as feed items) are served too: their pins are at the top of the feed.
	served := s.servePreparedOn(ctx, &page, user, rd.res.prepared, prepStale)
	s.fill(&page, user, fresh, rd.res, size, served)
	switch {
	case gen.err != nil || timedOut:
		// Not when the generator failed or was late: a preparation would ask it again.
	case !returning:
		s.m.prepSchedule.WithLabelValues(prepFirstVisit).Inc()
	default:
		s.prepareLater(user, cfg, cfg.PrepareAfter)
	}
	s.m.observeStage(stagePageGenerated, time.Since(pageStart))
	return page, nil
}

// keepChunk decides what becomes of the generator's answer: recorded and returned as the
// page's fresh entries, or settled back (or as delivered, when empty), the page's fresh status
// saying which and why.
func (s *Service) keepChunk(ctx context.Context, cfg Config, user zen.ID, page *Page, gen genResult, timedOut bool, rd readResult) []entry {
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
		fresh, err := s.persist(ctx, cfg, user, gen.c, rd.res, rd.out.From == hedge.Primary, false)
		s.m.observeStage(stagePersist, time.Since(pstart))
		if err != nil {
			page.FreshStatus, page.FreshDetail = FreshPersistFailed, err.Error()
			s.m.persistFailed.Inc()
			s.unrecorded(user, gen.c.ID, "record served chunk", err)
			return nil
		}
		page.FreshStatus = FreshIncluded
		return fresh
	}
	return nil
}

// servePreparedOn serves the prepared chunks rows (see servePrepared) on page, which then
// includes fresh items if any of them was served fresh; it returns their sequences.
func (s *Service) servePreparedOn(ctx context.Context, page *Page, user zen.ID, rows []preparedRow, outcome string) map[uint64]bool {
	if len(rows) == 0 {
		return nil
	}
	served := s.servePrepared(ctx, user, rows, outcome)
	if len(served) > 0 && page.FreshStatus != FreshIncluded {
		page.FreshStatus, page.FreshDetail = FreshIncluded, ""
	}
	return served
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
