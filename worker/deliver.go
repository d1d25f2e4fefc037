package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// Delivery: one page of receivers read, skipped (deleted, inactive), scored and written into
// their pools, trimmed now and then.

// pinInfo is what scoring needs to know about a pin, read once per task.
type pinInfo struct {
	pin, author, board, interest zen.ID
	createdMs                    int64
	saves, likes                 int64
	interests                    []zen.ID // up to Config.MatchInterests
	repin                        bool
}

func (w *Worker) loadPinInfo(ctx context.Context, pi *pinInfo) error {
	n, err := w.g.CountEdgesMany(ctx, []zen.ListKey{{From: pi.pin, Type: zen.EdgePinBoards}, {From: pi.pin, Type: zen.EdgePinLikers}})
	if err != nil {
		return fmt.Errorf("pin %d saves and likes: %w", pi.pin, err)
	}
	pi.saves, pi.likes = n[0], n[1]
	return w.loadInterests(ctx, pi)
}

// loadInterests reads the pin's interests (up to Config.MatchInterests) into pi.
func (w *Worker) loadInterests(ctx context.Context, pi *pinInfo) error {
	es, _, err := w.g.ListEdges(ctx, pi.pin, zen.EdgePinInterests, "", w.cfg.MatchInterests, false)
	if err != nil {
		return fmt.Errorf("pin %d interests: %w", pi.pin, err)
	}
	pi.interests = pi.interests[:0]
	for _, e := range es {
		pi.interests = append(pi.interests, e.To)
	}
	return nil
}

// noActiveRow stands for a receiver with no last-active row (never seen, or its row lost):
// delivered to, as a recent one.
const noActiveRow = math.MinInt64

// skipFor says whether a receiver whose last-active row holds last (noActiveRow: none) is
// skipped, and why: "deleted" (the tombstone), "inactive" (not seen for InactiveAfter), or ""
// (deliver).
func (w *Worker) skipFor(last, nowMs int64) string {
	switch {
	case last == noActiveRow:
		return ""
	case last == deletedUser:
		return "deleted"
	case w.cfg.InactiveAfter > 0 && nowMs-last > w.cfg.InactiveAfter.Milliseconds():
		return "inactive"
	}
	return ""
}

// receiver is one user about to get a pin, with the per-user features.
type receiver struct {
	user     zen.ID
	affinity int64
	match    float64
	skip     string              // "" = deliver; otherwise why not
	prof     *engagement.Profile // the receiver's online features; nil without an engagement store
}

// loadReceivers reads, for each user, the last-active row, the affinity for author and the
// interest match of the pin, in two batched reads, and marks those to skip (deleted or inactive
// users). The affinity and interest follows come from feats where it has them, and with feats
// the last-active rows that said "deliver" from w.active (nil feats: everything is read).
func (w *Worker) loadReceivers(ctx context.Context, users []zen.ID, pi *pinInfo, followedInterest zen.ID, feats *featureCache) ([]receiver, error) {
	rs := make([]receiver, len(users))
	keys := make([][]byte, 0, 2*len(users))
	var active *featureCache
	if feats != nil {
		active = w.active
	}
	actVals, actCached := cachedActive(active, users)
	actAt := make([]int, 0, len(users)) // the receivers whose last-active row is read
	for i, u := range users {
		rs[i].user = u
		if actCached == nil || !actCached[i] {
			actAt = append(actAt, i)
			keys = append(keys, stateKey(u, rowActive, 0))
		}
	}
	var affAt []int // the receivers whose affinity is read with the active rows
	if pi.author != 0 {
		var cached []bool
		if feats != nil {
			fks := make([]featureKey, len(users))
			for i, u := range users {
				fks[i] = featureKey{kind: featAffinity, user: u, of: pi.author}
			}
			vals := make([]int64, len(users))
			cached = make([]bool, len(users))
			feats.get(fks, vals, cached)
			for i := range rs {
				rs[i].affinity = vals[i]
			}
		}
		affAt = make([]int, 0, len(users))
		for i, u := range users {
			if cached == nil || !cached[i] {
				affAt = append(affAt, i)
				keys = append(keys, stateKey(u, rowAffinity, pi.author))
			}
		}
	}
	vals, err := zen.GetMany(ctx, w.state, keys)
	if err != nil {
		return nil, fmt.Errorf("read receivers: %w", err)
	}
	nowMs := w.now().UnixMilli()
	for i := range actCached {
		if actCached[i] {
			rs[i].skip = w.skipFor(actVals[i], nowMs)
		}
	}
	var keep []featureKey
	var keepVals []int64
	for j, i := range actAt {
		last, ok := i64(vals[j])
		if !ok {
			last = noActiveRow
		}
		if rs[i].skip = w.skipFor(last, nowMs); rs[i].skip == "" && active != nil {
			keep = append(keep, featureKey{kind: featActive, user: users[i]})
			keepVals = append(keepVals, last)
		}
	}
	active.put(keep, keepVals)
	for j, i := range affAt {
		rs[i].affinity, _ = i64(vals[len(actAt)+j])
	}
	if feats != nil && len(affAt) > 0 {
		put, got := make([]featureKey, len(affAt)), make([]int64, len(affAt))
		for j, i := range affAt {
			put[j], got[j] = featureKey{kind: featAffinity, user: users[i], of: pi.author}, rs[i].affinity
		}
		feats.put(put, got)
	}
	if err := w.matchInterests(ctx, rs, pi, followedInterest, feats); err != nil {
		return nil, err
	}
	return rs, nil
}

// cachedActive looks the users' last-active rows up in active: nil slices without a cache.
func cachedActive(active *featureCache, users []zen.ID) (vals []int64, cached []bool) {
	if active == nil {
		return nil, nil
	}
	aks := make([]featureKey, len(users))
	for i, u := range users {
		aks[i] = featureKey{kind: featActive, user: u}
	}
	vals, cached = make([]int64, len(users)), make([]bool, len(users))
	active.get(aks, vals, cached)
	return vals, cached
}

// matchInterests sets each receiver's interest match: the share of the pin's interests it
// follows (followedInterest, the list it came from, counts as followed).
func (w *Worker) matchInterests(ctx context.Context, rs []receiver, pi *pinInfo, followedInterest zen.ID, feats *featureCache) error {
	if len(pi.interests) == 0 {
		return nil
	}
	// Whether each receiver follows each of the pin's interests: from the cache, and the rest in
	// one batched read of the follow edges, not a goroutine per receiver.
	var fks []featureKey
	var of []int
	hits := make([]int, len(rs))
	for i := range rs {
		if rs[i].skip != "" {
			continue
		}
		for _, in := range pi.interests {
			if in == followedInterest {
				hits[i]++
				continue
			}
			fks = append(fks, featureKey{kind: featInterest, user: rs[i].user, of: in})
			of = append(of, i)
		}
	}
	if len(fks) > 0 {
		// Without a cache every pair is read (get leaves cached all false).
		follows, cached := make([]int64, len(fks)), make([]bool, len(fks))
		feats.get(fks, follows, cached)
		var eks []zen.EdgeKey
		var missed []int
		for j, k := range fks {
			if !cached[j] {
				eks = append(eks, zen.EdgeKey{From: k.user, Type: zen.EdgeFollowsInterest, To: k.of})
				missed = append(missed, j)
			}
		}
		if len(eks) > 0 {
			has, err := w.g.HasEdges(ctx, eks)
			if err != nil {
				return fmt.Errorf("interest match: %w", err)
			}
			put, putVals := make([]featureKey, len(missed)), make([]int64, len(missed))
			for m, j := range missed {
				if has[m] {
					follows[j] = 1
				}
				put[m], putVals[m] = fks[j], follows[j]
			}
			feats.put(put, putVals)
		}
		for j, f := range follows {
			if f == 1 {
				hits[of[j]]++
			}
		}
	}
	for i := range rs {
		if rs[i].skip == "" {
			rs[i].match = float64(hits[i]) / float64(len(pi.interests))
		}
	}
	return nil
}

func (w *Worker) entry(r receiver, pi *pinInfo, src zen.Source, ageMs int64, co float64, reason string) zen.PoolEntry {
	f := w.features(r, pi, src, ageMs, co)
	return zen.PoolEntry{User: r.user, Source: src, Score: w.scorer.Score(f), Pin: pi.pin,
		Author: pi.author, Board: pi.board, Interest: pi.interest, CreatedMs: pi.createdMs, Reason: reason}
}

// features are the scoring features of pi for receiver r.
func (w *Worker) features(r receiver, pi *pinInfo, src zen.Source, ageMs int64, co float64) Features {
	f := Features{
		Source: src, AgeHours: float64(max(0, ageMs)) / float64(time.Hour.Milliseconds()),
		Affinity: float64(r.affinity), Saves: pi.saves, Likes: pi.likes, InterestMatch: r.match,
		CoOccurrence: co, Repin: pi.repin, User: r.user,
	}
	w.engagementFeatures(&f, r, pi)
	return f
}

// HandleFanoutChunk delivers one page of a fanout: it lists the receivers from (ListFrom,
// EdgeType) at Cursor, at most Limit of them, skips deleted and inactive users, scores the pin for
// each and inserts the page in one batch, then trims and expires the pools of about 1 in
// Config.TrimEvery receivers. Running it twice writes the same rows (Pools.Insert keeps one row
// per (user, pin), the better score).
func (w *Worker) HandleFanoutChunk(ctx context.Context, p pinlater.FanoutChunkPayload) error {
	if _, err := w.deliverChunk(ctx, p, nil); err != nil {
		return err
	}
	w.m.observeDelay(w.now(), p.CreatedMs)
	w.m.tasks.WithLabelValues(pinlater.TypeFanoutChunk).Inc()
	return nil
}

// deliverChunk is HandleFanoutChunk's work, and a fanout task's for a list it delivers inline.
//
// With facts nil it delivers the chunk task's page: the list's edges in list order from
// p.Cursor, as enqueueChunks paged them. With facts (an inline list, whose facts an earlier
// list of the same fanout task may have read) it delivers the list's first p.Limit members in ID
// order (zen.Graph.Members: the point rows only, half the rows of a page of edges), and reports
// whether the list holds more.
func (w *Worker) deliverChunk(ctx context.Context, p pinlater.FanoutChunkPayload, facts *pinFacts) (more bool, err error) {
	es, more, err := w.scoreChunk(ctx, p, facts)
	if err != nil {
		return false, err
	}
	if err := w.insert(ctx, es); err != nil {
		return false, fmt.Errorf("chunk %d: %w", p.Pin, err)
	}
	return more, nil
}

// scoreChunk is deliverChunk's reads and scoring: the pool entries of the chunk's receivers,
// and whether the list holds more. It runs in a background lane (Options.Lanes), given back
// before deliverChunk's synced write.
func (w *Worker) scoreChunk(ctx context.Context, p pinlater.FanoutChunkPayload, facts *pinFacts) ([]zen.PoolEntry, bool, error) {
	c, err := checkChunk(p)
	if err != nil {
		return nil, false, err
	}
	if w.lanes == nil {
		return w.scoreChunkIn(ctx, p, c, facts)
	}
	start := time.Now()
	var (
		es   []zen.PoolEntry
		more bool
	)
	lerr := w.lanes.Do(ctx, func() {
		w.m.laneWait.Observe(time.Since(start).Seconds())
		es, more, err = w.scoreChunkIn(ctx, p, c, facts)
	})
	if lerr != nil {
		return nil, false, fmt.Errorf("chunk %d: wait for a lane: %w", p.Pin, lerr)
	}
	return es, more, err
}

// scoreChunkIn is scoreChunk's work, in its lane.
func (w *Worker) scoreChunkIn(ctx context.Context, p pinlater.FanoutChunkPayload, c chunkIDs, facts *pinFacts) ([]zen.PoolEntry, bool, error) {
	pin, author, board, interest, src, et := c.pin, c.author, c.board, c.interest, c.src, c.et
	// Only lists delivered inline (at most InlineReceivers receivers: the common author, board
	// or interest) use the feature cache. A list long enough for chunk tasks would mostly fill
	// it with pairs that do not recur within the TTL: with it, a 1,000,000-follower fanout's
	// peak heap rose from 9–12 to 86 MiB (VmHWM 135 MiB, over TestFanoutMillionFollowers' bound).
	feats, inline := w.feats, facts != nil
	if !inline {
		facts, feats = &pinFacts{}, nil
	}
	if err := facts.load(ctx, w, pin, author); err != nil || facts.gone {
		return nil, false, err
	}
	users, more, err := w.chunkUsers(ctx, p, pin, et, inline)
	if err != nil {
		return nil, false, err
	}
	users = slices.DeleteFunc(users, func(u zen.ID) bool { return u == author })
	pi := &pinInfo{pin: pin, author: author, board: board, interest: interest, createdMs: p.CreatedMs,
		repin: facts.repin, saves: facts.saves, likes: facts.likes, interests: facts.interests}
	rs, err := w.receivers(ctx, users, pi, interest, feats)
	if err != nil {
		return nil, false, fmt.Errorf("chunk %d: %w", pin, err)
	}
	reason := "followed user"
	switch {
	case src == zen.SourceInterest:
		reason = "followed interest"
	case et == zen.EdgeBoardFollowers:
		reason = "followed board"
	}
	es := make([]zen.PoolEntry, 0, len(rs))
	for _, r := range rs {
		if r.skip != "" {
			w.m.skipped.WithLabelValues(r.skip).Inc()
			continue
		}
		es = append(es, w.entry(r, pi, src, 0, 0, reason))
	}
	return es, more, nil
}

// insert writes entries in one batch and then trims the pools of the receivers picked by
// trimPick.
func (w *Worker) insert(ctx context.Context, es []zen.PoolEntry) error {
	if len(es) == 0 {
		return nil
	}
	ictx, span := startPoolInsert(ctx, es)
	n, err := w.pools.Insert(ictx, es)
	endPoolInsert(span, n, err)
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	w.m.inserts.Add(float64(n))
	if fn := w.onInsert.Load(); fn != nil {
		(*fn)(es)
	}
	for _, e := range es {
		if !w.trimPick(e.User, e.Pin) {
			continue
		}
		if err := w.upkeep(ctx, e.User); err != nil {
			return err
		}
	}
	return nil
}

// trimPick picks about 1 in TrimEvery (user, pin) pairs, the same ones on every run.
func (w *Worker) trimPick(user, pin zen.ID) bool {
	if w.cfg.TrimEvery <= 1 {
		return true
	}
	h := fnv.New64a()
	var b [16]byte
	for i := range 8 {
		b[i] = byte(uint64(user) >> (8 * i))
		b[8+i] = byte(uint64(pin) >> (8 * i))
	}
	h.Write(b[:])
	return h.Sum64()%uint64(w.cfg.TrimEvery) == 0
}

// pinFromObject reads the pin fields the worker uses from a pin object: "author" (user ID),
// "board" (board ID) and "created_ms" (int). Absent fields fall back to board (the board it
// was found on) and 0.
func pinFromObject(o zen.Object, board zen.ID) pinInfo {
	pi := pinInfo{pin: o.ID, board: board}
	if a, ok := zen.DataID(o.Data, "author"); ok && a.Check(zen.TypeUser) == nil {
		pi.author = a
	}
	if b, ok := zen.DataID(o.Data, "board"); ok && b.Check(zen.TypeBoard) == nil && board == 0 {
		pi.board = b
	}
	switch v := o.Data["created_ms"].(type) {
	case float64:
		pi.createdMs = int64(v)
	case int64:
		pi.createdMs = v
	case int:
		pi.createdMs = int64(v)
	case interface{ Int64() (int64, error) }:
		pi.createdMs, _ = v.Int64()
	case string:
		pi.createdMs, _ = strconv.ParseInt(v, 10, 64)
	}
	return pi
}

// chunkIDs are a fanout chunk's checked IDs, source and edge type.
type chunkIDs struct {
	pinRefs
	interest zen.ID
	src      zen.Source
	et       zen.EdgeType
}

// checkChunk checks a fanout chunk's IDs, source and edge type; an error is invalid input.
func checkChunk(p pinlater.FanoutChunkPayload) (c chunkIDs, err error) {
	if c.pinRefs, err = checkPinRefs("chunk", p.Pin, p.Author, p.Board); err != nil {
		return c, err
	}
	if p.Interest != 0 {
		if c.interest, err = checkID("chunk interest", p.Interest, zen.TypeInterest); err != nil {
			return c, err
		}
	}
	c.src = zen.Source(p.Source)
	if c.src != zen.SourceFollowing && c.src != zen.SourceInterest && c.src != zen.SourceRelated {
		return c, invalid("chunk source %d", p.Source)
	}
	c.et = zen.EdgeType(p.EdgeType)
	if _, to, ok := c.et.Endpoints(); !ok || to != zen.TypeUser {
		return c, invalid("chunk edge type %d does not list users", p.EdgeType)
	}
	return c, nil
}

// chunkUsers lists the chunk's receivers: the members of a short list delivered inline, or
// one page of a long list from the chunk's cursor; more says an inline list has more members.
func (w *Worker) chunkUsers(ctx context.Context, p pinlater.FanoutChunkPayload, pin zen.ID, et zen.EdgeType, inline bool) (users []zen.ID, more bool, err error) {
	if inline {
		if users, more, err = w.g.Members(ctx, zen.ID(p.ListFrom), et, p.Limit); err != nil {
			return nil, false, fmt.Errorf("chunk %d: members %d/%d: %w", pin, p.ListFrom, et, err)
		}
		return users, more, nil
	}
	edges, _, err := w.g.ListEdges(ctx, zen.ID(p.ListFrom), et, p.Cursor, p.Limit, false)
	if errors.Is(err, zen.ErrBadCursor) {
		return nil, false, invalid("chunk cursor: %v", err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("chunk %d: list %d/%d: %w", pin, p.ListFrom, et, err)
	}
	users = make([]zen.ID, 0, len(edges))
	for _, e := range edges {
		users = append(users, e.To)
	}
	return users, false, nil
}
