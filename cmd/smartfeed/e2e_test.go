package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/pinlater/pinlatertest"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// TestEndToEndInvariants wires the real worker, generator and feed service the way `smartfeed
// all` does (newApp: Pebble in a temp dir, a real Redis, the pinlater server running the worker
// and materialize handlers), drives a small graph through pin, repin, follow, unfollow and
// delete events, and checks docs/data-model.md §5's invariants across the services: nothing lost,
// nothing twice, order kept, degrade don't fail, idempotent jobs, and a crash of the generator's
// take and of the materialize job.
func TestEndToEndInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: needs Redis and runs every service; skipped with -short")
	}
	// "once" runs each task as pinlater delivers it; "twice" runs every handler twice in a
	// row (a retry right after a run whose acknowledgement was lost).
	for _, twice := range []bool{false, true} {
		name := "once"
		if twice {
			name = "twice"
		}
		t.Run(name, func(t *testing.T) { runE2E(t, twice) })
	}
}

// TestEndToEndPrepared: with the binary's default feed.prepare_after (500ms) and its wiring, a
// user back within feed.prepared_max_age (feed.prepare_returning) has the next chunk prepared
// after that page: the pins fanned out after it leave the pools for a prepared row, and the
// next first page serves them fresh
// (from the prepared row, which is marked served after the answer), once; the page after that
// has no fresh pin, and every pin is in the feed once.
func TestEndToEndPrepared(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: needs Redis and runs every service; skipped with -short")
	}
	def := config.DefaultConfig().Feed.PrepareAfter
	e := newE2E(t, false, func(c *config.Config) { c.Feed.PrepareAfter = def })
	if got := e.svc.Config().PrepareAfter; got != 500*time.Millisecond {
		t.Fatalf("the service's prepare_after is %v, want the default 500ms", got)
	}
	A, B := e.user("alice"), e.user("bob")
	bA := e.board(A)
	e.follow(B, A)
	e.drain()
	first := []zen.ID{e.pin(A, bA, 0), e.pin(A, bA, 0)}
	e.drain()
	get := func(when string) (feedsvc.Page, []zen.ID) {
		t.Helper()
		p, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: B, PageSize: 50})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		var fresh []zen.ID
		for _, it := range p.Items {
			if it.Fresh {
				fresh = append(fresh, it.Pin)
			}
		}
		slices.Sort(fresh)
		return p, fresh
	}
	slices.Sort(first)
	if p, fresh := get("first visit"); p.FreshStatus != feedsvc.FreshIncluded || !slices.Equal(fresh, first) {
		t.Fatalf("first visit: status %q, fresh %v; want included, %v", p.FreshStatus, fresh, first)
	}
	// A single visit prepares nothing; B back at once is a returning user, whose page prepares.
	if p, fresh := get("return visit"); len(fresh) != 0 {
		t.Fatalf("return visit: status %q, fresh %v; want nothing fresh (the pools are empty)", p.FreshStatus, fresh)
	}
	later := []zen.ID{e.pin(A, bA, 0), e.pin(A, bA, 0), e.pin(A, bA, 0)}
	slices.Sort(later)
	e.drain()
	// The preparation runs prepare_after after the return visit (and once min_chunk_interval
	// has passed), and again while it finds the pools empty.
	preparedPins := func() []zen.ID {
		rows, err := scanFeed(e.ctx, e.a.feedPrimary, B)
		e.must(err)
		var out []zen.ID
		for _, r := range rows {
			if r.Prepared {
				out = append(out, r.Pins...)
			}
		}
		slices.Sort(out)
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Equal(preparedPins(), later) {
		if time.Now().After(deadline) {
			t.Fatalf("prepared rows hold %v, want the pins fanned out after the first page %v", preparedPins(), later)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p, fresh := get("second visit")
	if p.FreshStatus != feedsvc.FreshIncluded || !slices.Equal(fresh, later) {
		t.Fatalf("second visit: status %q, fresh %v; want included, the prepared %v", p.FreshStatus, fresh, later)
	}
	// The served mark is written after the answer.
	for deadline := time.Now().Add(10 * time.Second); len(preparedPins()) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after the visit that served it, prepared rows still hold %v", preparedPins())
		}
	}
	if p, fresh := get("third visit"); len(fresh) != 0 {
		t.Errorf("third visit: status %q, fresh %v; want nothing fresh (the prepared chunk was served)", p.FreshStatus, fresh)
	}
	e.settle()
	e.checkFeedUnique(B)
}

// TestEndToEndMinChunkInterval: with the binary's default feed.min_chunk_interval (1s), a first
// page right after another is the feed as it stands (FreshRecent, no generator call): the pins
// fanned out meanwhile stay in the pools, and the first page after the interval serves them.
func TestEndToEndMinChunkInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: needs Redis and runs every service; skipped with -short")
	}
	e := newE2E(t, false, func(c *config.Config) { c.Feed.MinChunkInterval = config.DefaultConfig().Feed.MinChunkInterval })
	if got := e.svc.Config().MinChunkInterval; got != time.Second {
		t.Fatalf("the service's min chunk interval is %v, want the default 1s", got)
	}
	A, B := e.user("alice"), e.user("bob")
	bA := e.board(A)
	e.follow(B, A)
	e.drain()
	first := []zen.ID{e.pin(A, bA, 0), e.pin(A, bA, 0), e.pin(A, bA, 0)}
	e.drain()
	get := func(when string) feedsvc.Page {
		t.Helper()
		p, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: B, PageSize: 50})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		return p
	}
	fresh := func(p feedsvc.Page) (out []zen.ID) {
		for _, it := range p.Items {
			if it.Fresh {
				out = append(out, it.Pin)
			}
		}
		return out
	}
	p := get("first visit")
	if p.FreshStatus != feedsvc.FreshIncluded || len(fresh(p)) != len(first) {
		t.Fatalf("first visit: status %q, %d fresh; want included, %d", p.FreshStatus, len(fresh(p)), len(first))
	}
	if p := get("reload"); p.FreshStatus != feedsvc.FreshRecent || len(fresh(p)) != 0 || len(p.Items) != len(first) {
		t.Fatalf("reload at once: status %q, %d fresh, %d items; want recent, 0, %d", p.FreshStatus, len(fresh(p)), len(p.Items), len(first))
	}
	// Live: an hour from now on, so that the rest does not race the clock.
	c := e.svc.Config()
	c.MinChunkInterval = time.Hour
	e.must(e.svc.SetConfig(c))
	later := []zen.ID{e.pin(A, bA, 0), e.pin(A, bA, 0)}
	e.drain()
	if p := get("reload after new pins"); p.FreshStatus != feedsvc.FreshRecent || len(fresh(p)) != 0 {
		t.Fatalf("reload after new pins: status %q, %d fresh; want recent, 0", p.FreshStatus, len(fresh(p)))
	}
	for _, pin := range later {
		if where := e.locate(B)[pin]; !slices.Contains(where, "pool:following") {
			t.Errorf("pin %s fanned out during the interval is in %v, want the following pool", pin, where)
		}
	}
	c.MinChunkInterval = 0
	e.must(e.svc.SetConfig(c))
	p = get("visit after the interval")
	slices.Sort(later)
	got := fresh(p)
	slices.Sort(got)
	if p.FreshStatus != feedsvc.FreshIncluded || !slices.Equal(got, later) {
		t.Errorf("visit after the interval: status %q, fresh %v; want included, %v", p.FreshStatus, got, later)
	}
	e.settle()
}

func runE2E(t *testing.T, twice bool, opts ...func(*config.Config)) *e2e {
	e := newE2E(t, twice, opts...)

	// --- Graph: A, B, C, D; one board each; one interest I.
	A, B, C, D := e.user("alice"), e.user("bob"), e.user("carol"), e.user("dave")
	bA, bB, bC := e.board(A), e.board(B), e.board(C)
	_ = e.board(D)
	I := e.interest("cats")
	e.follow(B, A) // B gets A's pins
	e.follow(B, C) // and C's
	e.follow(C, A) // C gets A's pins, until C unfollows A
	e.follow(C, I) // and pins tagged I
	e.follow(D, bB)
	e.drain() // no task expected yet, but run whatever the graph writes enqueued

	// --- Pins: 8 by A, 4 by C, 3 by B tagged I.
	var aPins []zen.ID
	for range 8 {
		aPins = append(aPins, e.pin(A, bA, 0))
	}
	for range 4 {
		e.pin(C, bC, 0)
	}
	for range 3 {
		e.pin(B, bB, I)
	}
	e.drain()
	// A repin: B saves A's first pin to board B; D follows board B.
	e.repin(B, bB, aPins[0])
	e.drain()
	// A follow with backfill: D follows A, A's recent pins are copied into D's pools.
	e.follow(D, A)
	e.drain()
	// An unfollow: C stops following A; A's pins leave C's pools.
	e.unfollow(C, A)
	e.drain()
	// A pin delete: A deletes its second pin.
	e.deletePin(aPins[1])
	e.drain()
	e.checkAccounting("after events", A, B, C, D)
	// The deleted and unfollowed pins are gone from the pools.
	for _, u := range []zen.ID{A, B, C, D} {
		loc := e.locate(u)
		if l := loc[aPins[1]]; len(l) > 0 {
			t.Errorf("deleted pin %s still in %s's %v", aPins[1], e.names[u], l)
		}
	}

	// --- Nothing twice: 8 goroutines × 3 rounds of first pages for B; fresh pins never repeat.
	e.concurrentFirstPages(B, 8, 3)
	e.settle()
	e.checkAccounting("after concurrent first pages", A, B, C, D)
	e.checkQuiet(B)
	e.checkPaging(B, 4)
	e.checkFeedUnique(B)
	e.checkOrder(B)

	// --- Degrade, don't fail.
	e.checkDegrade(D, B)
	e.checkAccounting("after degrade", A, B, C, D)

	// --- Crash 1: the generator dies in its take, after the intent record and one pin taken.
	e.crashGeneratorTake(D)
	e.checkAccounting("after generator take crash and restart", A, B, C, D)

	// Serve D's feed so its pins are materialized too.
	e.concurrentFirstPages(D, 4, 3)
	e.settle()
	e.checkAccounting("after D's first pages", A, B, C, D)
	e.checkQuiet(D)
	e.checkFeedUnique(D)
	e.checkOrder(D)
	e.checkPaging(D, 3)

	// --- Crash 2: the materialize job dies after its first write; a fresh service replays it.
	e.crashMaterialize(C)
	e.checkAccounting("after materialize crash and replay", A, B, C, D)
	e.checkQuiet(C)
	e.checkFeedUnique(C)
	e.checkOrder(C)

	// --- Idempotent jobs: every task handled so far runs once more; pools and feeds unchanged.
	e.checkRerun(A, B, C, D)
	e.checkAccounting("after re-running every task", A, B, C, D)
	for _, u := range []zen.ID{B, C, D} {
		e.checkFeedUnique(u)
	}
	return e
}

// e2e is the running system and the test's model of what was fanned out.
type e2e struct {
	t     *testing.T
	ctx   context.Context
	a     *app
	pub   *worker.Publisher
	svc   *feedsvc.Service // GetFeed goes here: the app's parts, with a recording generator
	gen   *recGen
	names map[zen.ID]string

	// graph model
	followers map[zen.ID]map[zen.ID]bool // target → followers
	savedBy   map[zen.ID][]zen.ID        // user → pins they created (for backfill)
	createdMs map[zen.ID]int64

	// expected: user → pin → true while the pin must be somewhere; dropped: counted by policy.
	expected map[zen.ID]map[zen.ID]bool
	dropped  map[zen.ID]map[zen.ID]string

	// every handled pinlater task, in order (for the re-run)
	tasksMu sync.Mutex
	tasks   []*pinlater.Task
}

// recGen wraps the generator adapter: it records every chunk in the generator's order and can
// be made to fail.
type recGen struct {
	inner  feedsvc.Generator
	fail   atomic.Bool
	mu     sync.Mutex
	chunks []feedsvc.Chunk
}

func (g *recGen) GenerateChunk(ctx context.Context, user zen.ID) (feedsvc.Chunk, error) {
	if g.fail.Load() {
		return feedsvc.Chunk{}, errors.New("e2e: generator down")
	}
	c, err := g.inner.GenerateChunk(ctx, user)
	if err == nil && c.ID != "" {
		g.mu.Lock()
		g.chunks = append(g.chunks, c)
		g.mu.Unlock()
	}
	return c, err
}

func (g *recGen) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	return g.inner.Settle(ctx, user, chunkID, delivered)
}

func newE2E(t *testing.T, twice bool, opts ...func(*config.Config)) *e2e {
	cfg := config.DefaultConfig()
	cfg.Redis.Addr, cfg.Redis.Namespace = testenv.RedisNamespace(t, "e2e")
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.PebbleNoSync = true
	cfg.GRPC.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = ""
	cfg.Admin.GRPCAddr = ""
	cfg.ShutdownTimeout = jsontime.Duration(10 * time.Second)
	// The scenarios check what each first page's generator call handed out, pages back to
	// back: no bound between a user's calls (TestEndToEndMinChunkInterval tests the bound),
	// and no chunk prepared in the background between them, which would take pins from the
	// pools while the scenarios take and give back chunks by hand (TestEndToEndPrepared tests
	// preparation).
	cfg.Feed.MinChunkInterval = 0
	cfg.Feed.PrepareAfter = 0
	for _, o := range opts {
		o(&cfg)
	}
	a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := &e2e{t: t, ctx: t.Context(), a: a, names: map[zen.ID]string{},
		followers: map[zen.ID]map[zen.ID]bool{}, savedBy: map[zen.ID][]zen.ID{}, createdMs: map[zen.ID]int64{},
		expected: map[zen.ID]map[zen.ID]bool{}, dropped: map[zen.ID]map[zen.ID]string{}}
	// Record every task a handler completed, for the late re-run; with twice, run each twice.
	a.pinServer.Use(func(next pinlater.Handler) pinlater.Handler {
		return pinlater.HandlerFunc(func(ctx context.Context, task *pinlater.Task) error {
			err := next.ProcessTask(ctx, task)
			if err == nil && twice {
				err = next.ProcessTask(ctx, task)
			}
			if err == nil {
				e.tasksMu.Lock()
				e.tasks = append(e.tasks, task)
				e.tasksMu.Unlock()
			}
			return err
		})
	})
	// Small chunks, so concurrent first pages compete for the same pools.
	gc := generator.DefaultConfig()
	gc.MinChunk, gc.MaxChunk, gc.BaseChunk = 2, 3, 3
	if err := a.gen.SetConfig(gc); err != nil {
		t.Fatal(err)
	}
	e.gen = &recGen{inner: localGenerator{a.gen}}
	e.svc, err = feedsvc.New(feedsvc.Deps{Primary: a.feedPrimary, Standby: a.feedStandby, Generator: e.gen,
		Enqueuer: feedsvc.PinlaterEnqueuer{Client: a.pinClient}, Hedger: a.feed.Hedger()}, a.feed.Config())
	if err != nil {
		t.Fatal(err)
	}
	e.pub = worker.NewPublisher(a.pinClient, a.graph, 0)

	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() {
		e.svc.Wait()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("app run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("app did not stop within 30s")
		}
	})
	return e
}

func (e *e2e) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *e2e) user(name string) zen.ID {
	o, err := e.a.graph.Create(e.ctx, zen.TypeUser, 0, map[string]any{"username": name})
	e.must(err)
	e.names[o.ID] = name
	return o.ID
}

func (e *e2e) board(owner zen.ID) zen.ID {
	b, err := e.a.graph.Create(e.ctx, zen.TypeBoard, owner, map[string]any{"name": "board of " + e.names[owner], "owner": owner.String()})
	e.must(err)
	e.must(addBoth(e.ctx, e.a.graph, zen.Edge{From: owner, Type: zen.EdgeUserBoards, To: b.ID}))
	return b.ID
}

func (e *e2e) interest(name string) zen.ID {
	o, err := e.a.graph.Create(e.ctx, zen.TypeInterest, 0, map[string]any{"name": name})
	e.must(err)
	return o.ID
}

func followType(target zen.ID) zen.EdgeType {
	switch target.Type() {
	case zen.TypeBoard:
		return zen.EdgeFollowsBoard
	case zen.TypeInterest:
		return zen.EdgeFollowsInterest
	}
	return zen.EdgeFollowsUser
}

func (e *e2e) follow(user, target zen.ID) {
	e.must(addBoth(e.ctx, e.a.graph, zen.Edge{From: user, Type: followType(target), To: target}))
	if e.followers[target] == nil {
		e.followers[target] = map[zen.ID]bool{}
	}
	e.followers[target][user] = true
	_, err := e.pub.Followed(e.ctx, user, target)
	e.must(err)
	// Backfill: the target's own pins (a user's saves; boards and interests get theirs by pin).
	for _, p := range e.savedBy[target] {
		e.expect(user, p)
	}
}

func (e *e2e) unfollow(user, target zen.ID) {
	et := followType(target)
	e.must(e.a.graph.RemoveEdge(e.ctx, user, et, target))
	inv, _ := et.Inverse()
	e.must(e.a.graph.RemoveInverse(e.ctx, user, et, target))
	_ = inv
	delete(e.followers[target], user)
	_, err := e.pub.Unfollowed(e.ctx, user, target)
	e.must(err)
	// The model: every pin the user got only through target is dropped by policy. In this
	// graph C gets A's pins only through following A.
	for _, p := range e.savedBy[target] {
		if e.expected[user][p] {
			delete(e.expected[user], p)
			e.drop(user, p, "unfollowed")
		}
	}
}

func (e *e2e) pin(author, board, interest zen.ID) zen.ID {
	now := time.Now()
	p, err := e.a.graph.Create(e.ctx, zen.TypePin, board, map[string]any{"author": author.String(), "board": board.String(), "title": "e2e"})
	e.must(err)
	edges := []zen.Edge{{From: author, Type: zen.EdgeUserPins, To: p.ID}, {From: board, Type: zen.EdgeBoardPins, To: p.ID}}
	var interests []zen.ID
	if interest != 0 {
		edges = append(edges, zen.Edge{From: p.ID, Type: zen.EdgePinInterests, To: interest})
		interests = []zen.ID{interest}
	}
	for _, ed := range edges {
		e.must(addBoth(e.ctx, e.a.graph, ed))
	}
	e.savedBy[author] = append(e.savedBy[author], p.ID)
	e.createdMs[p.ID] = now.UnixMilli()
	_, err = e.pub.PinSaved(e.ctx, worker.PinSaved{Pin: p.ID, User: author, Board: board, Interests: interests, CreatedMs: now.UnixMilli()})
	e.must(err)
	e.fanout(p.ID, author, board, interests)
	return p.ID
}

func (e *e2e) repin(user, board, pin zen.ID) {
	for _, ed := range []zen.Edge{{From: user, Type: zen.EdgeUserPins, To: pin}, {From: board, Type: zen.EdgeBoardPins, To: pin}} {
		e.must(addBoth(e.ctx, e.a.graph, ed))
	}
	_, err := e.pub.PinSaved(e.ctx, worker.PinSaved{Pin: pin, User: user, Board: board, CreatedMs: e.createdMs[pin], Repin: true})
	e.must(err)
	e.fanout(pin, user, board, nil)
	// The saver has the pin now: it leaves the saver's own pools (worker/worker.go, "The saver
	// has the pin now").
	if e.expected[user][pin] {
		delete(e.expected[user], pin)
		e.drop(user, pin, "saved by the user")
	}
}

// fanout adds the receivers the design names: followers of the saver, of the board, of the
// interests (never the saver).
func (e *e2e) fanout(pin, saver, board zen.ID, interests []zen.ID) {
	for _, from := range append([]zen.ID{saver, board}, interests...) {
		for u := range e.followers[from] {
			if u != saver {
				e.expect(u, pin)
			}
		}
	}
}

func (e *e2e) expect(u, p zen.ID) {
	if e.dropped[u][p] != "" {
		return
	}
	if e.expected[u] == nil {
		e.expected[u] = map[zen.ID]bool{}
	}
	e.expected[u][p] = true
}

func (e *e2e) drop(u, p zen.ID, why string) {
	if e.dropped[u] == nil {
		e.dropped[u] = map[zen.ID]string{}
	}
	e.dropped[u][p] = why
}

func (e *e2e) deletePin(pin zen.ID) {
	o, err := e.a.graph.Get(e.ctx, pin)
	e.must(err)
	author, err := zen.ParseID(fmt.Sprint(o.Data["author"]))
	e.must(err)
	e.must(e.a.graph.Delete(e.ctx, pin))
	_, err = e.pub.PinDeleted(e.ctx, pin, author)
	e.must(err)
	for u := range e.expected {
		if e.expected[u][pin] {
			delete(e.expected[u], pin)
			e.drop(u, pin, "deleted")
		}
	}
}

// drain waits until every pinlater queue is empty (pending, active, scheduled, retrying).
func (e *e2e) drain() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	// Twice: a task that ran last may have enqueued another on a queue already checked.
	for range 2 {
		for q := range pinlater.DefaultQueueWeights() {
			if err := e.a.pinAdmin.WaitDrained(ctx, q, 20*time.Millisecond); err != nil {
				e.t.Fatalf("queue %s not drained: %v", q, err)
			}
		}
	}
	for q := range pinlater.DefaultQueueWeights() {
		st, err := e.a.pinAdmin.Queue(ctx, q)
		e.must(err)
		if st.Dead != 0 {
			e.t.Errorf("queue %s holds %d dead tasks", q, st.Dead)
		}
	}
}

// settle waits for GetFeed's background work, then for the queues, then for the standby.
func (e *e2e) settle() {
	e.t.Helper()
	e.svc.Wait()
	e.a.feed.Wait()
	e.drain()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	e.must(e.a.standbyFlush(ctx))
}

// feedRow is one row of a user's 'f' range of the feed table.
type feedRow struct {
	Seq     uint64
	Pos     uint32
	Pending bool
	// Prepared: a pending row holding a prepared chunk no page has served yet (its version
	// byte is 2, feedsvc/layout.go's preparedVersion).
	Prepared bool
	Pins     []zen.ID // one for an item row; the chunk's pins for a pending row
}

// scanFeed reads the user's materialized feed rows straight from a table, newest chunk first.
// The layout is feedsvc/layout.go's: user | 'f' | ^seq [| pos].
func scanFeed(ctx context.Context, tb zen.Table, user zen.ID) ([]feedRow, error) {
	start := append(binary.BigEndian.AppendUint64(nil, uint64(user)), 'f')
	stop := append(binary.BigEndian.AppendUint64(nil, uint64(user)), 'f'+1)
	kvs, err := tb.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop})
	if err != nil {
		return nil, err
	}
	var rows []feedRow
	for _, kv := range kvs {
		if len(kv.Key) == 9 {
			continue // user | 'f': the feed's head version (feedsvc/headcache.go), no item
		}
		r := feedRow{Seq: ^binary.BigEndian.Uint64(kv.Key[9:17])}
		switch len(kv.Key) {
		case 17:
			// Versions 2 and 3: prepared, not served (3 names its owner).
			r.Pending, r.Prepared = true, len(kv.Value) > 0 && (kv.Value[0] == 2 || kv.Value[0] == 3)
			pins, err := pendingPins(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("pending row %x: %w", kv.Key, err)
			}
			r.Pins = pins
		case 21:
			r.Pos = binary.BigEndian.Uint32(kv.Key[17:])
			if len(kv.Value) < 9 {
				return nil, fmt.Errorf("item row %x: short value", kv.Key)
			}
			r.Pins = []zen.ID{zen.ID(binary.BigEndian.Uint64(kv.Value[1:9]))}
		default:
			return nil, fmt.Errorf("feed key %x of %d bytes", kv.Key, len(kv.Key))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// pendingPins decodes the pins of a pending chunk row: version (3: then the owner, 8 bytes),
// chunk ID, served ms, items.
func pendingPins(b []byte) ([]zen.ID, error) {
	bad := errors.New("bad pending row")
	head := 1 // the version
	if len(b) > 0 && b[0] == 3 {
		head += 8 // the owner
	}
	if len(b) < head {
		return nil, bad
	}
	b = b[head:]
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n+8 {
		return nil, bad
	}
	b = b[k+int(n)+8:]
	count, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, bad
	}
	b = b[k:]
	var pins []zen.ID
	for range count {
		_, k := binary.Uvarint(b) // position
		if k <= 0 || len(b) < k+8+1+8+8+8 {
			return nil, bad
		}
		b = b[k:]
		pins = append(pins, zen.ID(binary.BigEndian.Uint64(b)))
		b = b[8+1+8+8+8:]
		rl, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < rl {
			return nil, bad
		}
		b = b[k+int(rl):]
	}
	return pins, nil
}

// materialized returns the pins of the user's item rows in feed order.
func (e *e2e) materialized(user zen.ID) []zen.ID {
	e.t.Helper()
	rows, err := scanFeed(e.ctx, e.a.feedPrimary, user)
	e.must(err)
	var pins []zen.ID
	for _, r := range rows {
		if !r.Pending {
			pins = append(pins, r.Pins...)
		}
	}
	return pins
}

var allSources = []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated}

// readerPools returns user's pools as readers see them, one list per allSources: each pin once,
// in the source of its best row (zen.BestAcrossSources over every source's whole Top).
func readerPools(ctx context.Context, p *zen.Pools, user zen.ID) ([][]zen.PoolEntry, error) {
	var lists [][]zen.PoolEntry
	for _, src := range allSources {
		es, err := p.Top(ctx, user, src, 10000)
		if err != nil {
			return nil, err
		}
		lists = append(lists, es)
	}
	return zen.BestAcrossSources(lists), nil
}

// locate lists, for each pin of user's, every place it is found: "pool:<source>",
// "inflight:generator", "inflight:pending" (a served chunk not yet materialized; counted with the
// generator's in-flight record as one place), "feed".
func (e *e2e) locate(user zen.ID) map[zen.ID][]string {
	return e.locateWith(user, e.a.gen)
}

func (e *e2e) locateWith(user zen.ID, gen *generator.Generator) map[zen.ID][]string {
	e.t.Helper()
	// In-flight chunks first: Pending finishes a crashed chunk (taking its claimed pins from
	// the pools), so the pools are read after it.
	inflight := map[zen.ID]bool{}
	chunks, err := gen.Pending(e.ctx, user)
	e.must(err)
	for _, c := range chunks {
		for _, it := range c.Items {
			inflight[it.Pin] = true
		}
	}
	loc := map[zen.ID][]string{}
	lists, err := readerPools(e.ctx, e.a.pools, user)
	e.must(err)
	for i, es := range lists {
		for _, pe := range es {
			loc[pe.Pin] = append(loc[pe.Pin], "pool:"+allSources[i].String())
		}
	}
	rows, err := scanFeed(e.ctx, e.a.feedPrimary, user)
	e.must(err)
	for _, r := range rows {
		for _, p := range r.Pins {
			if r.Pending {
				inflight[p] = true
			} else {
				loc[p] = append(loc[p], "feed")
			}
		}
	}
	for p := range inflight {
		loc[p] = append(loc[p], "inflight")
	}
	return loc
}

// checkAccounting: every expected pin of each user is in exactly one place; a pin dropped by
// policy is in no pool; anything else found is logged.
func (e *e2e) checkAccounting(when string, users ...zen.ID) {
	e.t.Helper()
	e.checkAccountingWith(when, e.a.gen, users...)
}

func (e *e2e) checkAccountingWith(when string, gen *generator.Generator, users ...zen.ID) {
	e.t.Helper()
	for _, u := range users {
		loc := e.locateWith(u, gen)
		for p := range e.expected[u] {
			if l := loc[p]; len(l) != 1 {
				e.t.Errorf("%s: nothing lost: %s's pin %s is in %v, want exactly one place", when, e.names[u], p, l)
			}
		}
		for p, why := range e.dropped[u] {
			for _, where := range loc[p] {
				if where != "feed" {
					e.t.Errorf("%s: %s's pin %s was dropped (%s) but is in %s", when, e.names[u], p, why, where)
				}
			}
		}
		for p, l := range loc {
			if !e.expected[u][p] && e.dropped[u][p] == "" {
				e.t.Logf("%s: %s has pin %s in %v beyond the fanout model (related pins, say)", when, e.names[u], p, l)
				if len(l) != 1 {
					e.t.Errorf("%s: %s's extra pin %s is in %d places %v", when, e.names[u], p, len(l), l)
				}
			}
		}
	}
}

// checkQuiet: once everything settled, nothing of user is in flight.
func (e *e2e) checkQuiet(user zen.ID) {
	e.t.Helper()
	for p, l := range e.locate(user) {
		if slices.Contains(l, "inflight") {
			e.t.Errorf("%s's pin %s still in flight after the queues drained: %v", e.names[user], p, l)
		}
	}
}

// concurrentFirstPages runs n goroutines × rounds first pages for user; a fresh pin is handed out
// once across all of them, and no page repeats an item.
func (e *e2e) concurrentFirstPages(user zen.ID, n, rounds int) {
	e.t.Helper()
	var mu sync.Mutex
	fresh := map[zen.ID]int{}
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				page, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: user, PageSize: 50})
				if err != nil {
					e.t.Errorf("goroutine %d round %d: GetFeed: %v", g, r, err)
					return
				}
				seen := map[zen.ID]bool{}
				mu.Lock()
				for _, it := range page.Items {
					if seen[it.Pin] {
						e.t.Errorf("nothing twice: a first page of %s repeats pin %s", e.names[user], it.Pin)
					}
					seen[it.Pin] = true
					if it.Fresh {
						fresh[it.Pin]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for p, c := range fresh {
		if c != 1 {
			e.t.Errorf("nothing twice: pin %s handed out fresh %d times to %s's concurrent first pages", p, c, e.names[user])
		}
	}
	if len(fresh) == 0 {
		e.t.Errorf("no fresh pin served to %s: the scenario tests nothing", e.names[user])
	}
	e.t.Logf("%s: %d goroutines × %d first pages handed out %d fresh pins", e.names[user], n, rounds, len(fresh))
}

// checkPaging pages through user's feed with small pages: no item twice, and the pages are the
// materialized feed in its order.
func (e *e2e) checkPaging(user zen.ID, size int) {
	e.t.Helper()
	var got []zen.ID
	seen := map[zen.ID]bool{}
	cursor := ""
	for i := 0; ; i++ {
		page, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: user, Cursor: cursor, PageSize: size})
		e.must(err)
		for _, it := range page.Items {
			if it.Fresh {
				e.t.Errorf("paging %s: a fresh pin %s while the pools should be empty", e.names[user], it.Pin)
			}
			if seen[it.Pin] {
				e.t.Errorf("nothing twice: paging %s repeats pin %s on page %d", e.names[user], it.Pin, i)
			}
			seen[it.Pin] = true
			got = append(got, it.Pin)
		}
		if page.NextCursor == "" {
			break
		}
		if i > 1000 {
			e.t.Fatal("paging does not end")
		}
		cursor = page.NextCursor
	}
	e.settle()
	if diff := cmp.Diff(e.materialized(user), got); diff != "" {
		e.t.Errorf("paging %s: pages differ from the materialized feed (-want +got):\n%s", e.names[user], diff)
	}
}

// checkFeedUnique: a pin appears at most once in the user's materialized feed (primary and
// standby).
func (e *e2e) checkFeedUnique(user zen.ID) {
	e.t.Helper()
	for _, tb := range []struct {
		name string
		t    zen.Table
	}{{"primary", e.a.feedPrimary}, {"standby", e.a.feedStandby}} {
		rows, err := scanFeed(e.ctx, tb.t, user)
		e.must(err)
		count := map[zen.ID]int{}
		for _, r := range rows {
			if !r.Pending {
				count[r.Pins[0]]++
			}
		}
		for p, c := range count {
			if c > 1 {
				e.t.Errorf("nothing twice: pin %s is %d times in %s's materialized feed (%s)", p, c, e.names[user], tb.name)
			}
		}
	}
}

// checkOrder: each chunk the generator made is in the materialized feed in the generator's
// order, contiguous, in one chunk row range.
func (e *e2e) checkOrder(user zen.ID) {
	e.t.Helper()
	rows, err := scanFeed(e.ctx, e.a.feedPrimary, user)
	e.must(err)
	index := map[zen.ID]int{}
	seqOf := map[zen.ID]uint64{}
	n := 0
	for _, r := range rows {
		if r.Pending {
			continue
		}
		index[r.Pins[0]] = n
		seqOf[r.Pins[0]] = r.Seq
		n++
	}
	e.gen.mu.Lock()
	chunks := slices.Clone(e.gen.chunks)
	e.gen.mu.Unlock()
	checked := 0
	for _, c := range chunks {
		if c.User != user {
			continue
		}
		var want []zen.ID
		for _, it := range c.Items {
			if _, ok := index[it.Pin]; ok {
				want = append(want, it.Pin)
			}
		}
		if len(want) == 0 {
			continue // given back (late) or not materialized: the accounting covers it
		}
		checked++
		var got []zen.ID
		for i := index[want[0]]; i < n && len(got) < len(want); i++ {
			for p, j := range index {
				if j == i {
					got = append(got, p)
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			e.t.Errorf("order kept: chunk %s of %s is not in the feed in the generator's order (-want +got):\n%s", c.ID, e.names[user], diff)
		}
		for _, p := range want {
			if seqOf[p] != seqOf[want[0]] {
				e.t.Errorf("order kept: chunk %s of %s split across feed chunks %d and %d", c.ID, e.names[user], seqOf[want[0]], seqOf[p])
			}
		}
	}
	if checked == 0 {
		e.t.Errorf("order: no chunk of %s in the materialized feed", e.names[user])
	}
}

// checkDegrade: generator down → GetFeed of user (whose pools hold pins) serves the
// materialized feed, flagged, and takes nothing from the pools; primary down → the standby
// answers; both down → an error.
func (e *e2e) checkDegrade(user, withFeed zen.ID) {
	e.t.Helper()
	before := e.locate(user)
	e.gen.fail.Store(true)
	for _, u := range []zen.ID{user, withFeed} {
		page, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: u, PageSize: 100})
		if err != nil {
			e.t.Errorf("degrade: generator down: GetFeed of %s: %v", e.names[u], err)
			continue
		}
		if page.FreshStatus != feedsvc.FreshGeneratorError {
			e.t.Errorf("degrade: generator down: FreshStatus %q, want %q", page.FreshStatus, feedsvc.FreshGeneratorError)
		}
		var got []zen.ID
		for _, it := range page.Items {
			got = append(got, it.Pin)
		}
		if diff := cmp.Diff(e.materialized(u), got); diff != "" {
			e.t.Errorf("degrade: generator down: %s's page is not the materialized feed (-want +got):\n%s", e.names[u], diff)
		}
	}
	e.gen.fail.Store(false)
	e.settle()
	if diff := cmp.Diff(before, e.locate(user)); diff != "" {
		e.t.Errorf("degrade: a failed generator call moved pins (-before +after):\n%s", diff)
	}

	// Primary down: the standby answers (replicated by settle's Flush).
	want := e.materialized(withFeed)
	e.must(e.a.faults[0].Set(faults.Config{Outage: true}))
	e.gen.fail.Store(true) // a first page with the primary down cannot record a chunk anyway
	page, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: withFeed, PageSize: 100})
	if err != nil {
		e.t.Errorf("degrade: primary down: GetFeed: %v", err)
	} else {
		if page.From != hedge.Standby {
			e.t.Errorf("degrade: primary down: answered by %v, want standby", page.From)
		}
		var got []zen.ID
		for _, it := range page.Items {
			got = append(got, it.Pin)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			e.t.Errorf("degrade: primary down: standby page differs (-want +got):\n%s", diff)
		}
	}
	e.gen.fail.Store(false)
	// The generator up, the primary down: the fresh chunk cannot be recorded; the page still
	// comes from the standby and the chunk's pins go back to the pools.
	page, err = e.svc.GetFeed(e.ctx, feedsvc.Request{User: user, PageSize: 100})
	if err != nil {
		e.t.Errorf("degrade: primary down, generator up: GetFeed: %v", err)
	} else if page.From != hedge.Standby {
		e.t.Errorf("degrade: primary down, generator up: answered by %v, want standby", page.From)
	}
	// Both down: an error, and no panic.
	e.must(e.a.faults[1].Set(faults.Config{Outage: true}))
	if _, err := e.svc.GetFeed(e.ctx, feedsvc.Request{User: withFeed, PageSize: 10, Cursor: ""}); err == nil {
		e.t.Error("degrade: primary and standby down: GetFeed succeeded")
	}
	e.must(e.a.faults[0].Set(faults.Config{}))
	e.must(e.a.faults[1].Set(faults.Config{}))
	e.settle()
	// Whatever the failed persist did, the pins are back where the accounting can find them.
	e.t.Logf("degrade: primary down + generator up: fresh status %q", page.FreshStatus)
}

// dead is a process that crashed: once set, every call of its tables and pools fails.
type dead struct{ atomic.Bool }

var errCrash = errors.New("e2e: crash")

func (d *dead) check() error {
	if d.Load() {
		return errCrash
	}
	return nil
}

// deadTable is a zen.Table of a process that can die.
type deadTable struct {
	zen.Table
	d *dead
}

func (t deadTable) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.d.check(); err != nil {
		return nil, err
	}
	return t.Table.Get(ctx, key)
}

func (t deadTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.d.check(); err != nil {
		return err
	}
	return t.Table.Apply(ctx, muts)
}

func (t deadTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if err := t.d.check(); err != nil {
		return nil, err
	}
	return t.Table.Scan(ctx, o)
}

func (t deadTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if err := t.d.check(); err != nil {
		return false, err
	}
	return t.Table.CheckAndSet(ctx, key, expected, value)
}

func (t deadTable) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	if err := t.d.check(); err != nil {
		return 0, err
	}
	return t.Table.Increment(ctx, key, delta)
}

// failTake is a generator.Pools whose Take takes the first entry and then the process dies:
// a crash in the middle of the take, after the intent record and the claims. Nothing the
// generator does afterwards (its abandon path) reaches the stores.
type failTake struct {
	generator.Pools
	d     *dead
	calls atomic.Int32
}

func (f *failTake) Top(ctx context.Context, user zen.ID, src zen.Source, n int) ([]zen.PoolEntry, error) {
	if err := f.d.check(); err != nil {
		return nil, err
	}
	return f.Pools.Top(ctx, user, src, n)
}

func (f *failTake) Insert(ctx context.Context, es []zen.PoolEntry) (int, error) {
	if err := f.d.check(); err != nil {
		return 0, err
	}
	return f.Pools.Insert(ctx, es)
}

func (f *failTake) Restore(ctx context.Context, es []zen.PoolEntry) (int, error) {
	if err := f.d.check(); err != nil {
		return 0, err
	}
	return f.Pools.Restore(ctx, es)
}

func (f *failTake) Expire(ctx context.Context, user zen.ID, olderThanMs int64) (int, error) {
	if err := f.d.check(); err != nil {
		return 0, err
	}
	return f.Pools.Expire(ctx, user, olderThanMs)
}

func (f *failTake) Take(ctx context.Context, user zen.ID, es []zen.PoolEntry) ([]zen.PoolEntry, error) {
	if err := f.d.check(); err != nil {
		return nil, err
	}
	f.calls.Add(1)
	if len(es) > 0 {
		if _, err := f.Pools.Take(ctx, user, es[:1]); err != nil {
			return nil, err
		}
	}
	f.d.Store(true)
	return nil, errCrash
}

// crashGeneratorTake makes a generator over the same tables die in its take, then restarts it
// (a new Generator, clock past the in-flight grace) and checks the accounting before and after
// the recovered chunk is given back.
func (e *e2e) crashGeneratorTake(user zen.ID) {
	e.t.Helper()
	state, err := e.a.stores.table(e.ctx, storeMain, tableGenState)
	e.must(err)
	gc := e.a.gen.Config()
	d := &dead{}
	ft := &failTake{Pools: e.a.pools, d: d}
	crashing, err := generator.New(generator.Params{Pools: ft, State: deadTable{state, d}, Config: &gc})
	e.must(err)
	if _, err := crashing.GenerateChunk(e.ctx, user, generator.Options{}); err == nil {
		e.t.Fatal("crash: the failing take did not fail the chunk")
	}
	if ft.calls.Load() == 0 {
		e.t.Fatal("crash: the generator never reached its take")
	}
	// Restart: the crashed record is older than the grace for the new process.
	later := func() time.Time { return time.Now().Add(time.Duration(gc.InFlightGrace) + time.Minute) }
	restarted, err := generator.New(generator.Params{Pools: e.a.pools, State: state, Config: &gc, Now: later})
	e.must(err)
	e.checkAccountingWith("after generator take crash (restarted, before settle)", restarted, user)
	pending, err := restarted.Pending(e.ctx, user)
	e.must(err)
	if len(pending) == 0 {
		e.t.Error("crash: the crashed chunk is not listed by the restarted generator (the taken pin is lost?)")
	}
	for _, c := range pending {
		e.must(restarted.Settle(e.ctx, user, c.ID, false))
	}
	e.checkAccountingWith("after generator take crash (restarted, given back)", restarted, user)
	for p, l := range e.locate(user) {
		if e.expected[user][p] && !slices.ContainsFunc(l, func(s string) bool { return len(s) > 5 && s[:5] == "pool:" }) && !slices.Contains(l, "feed") {
			e.t.Errorf("crash: %s's pin %s not back in a pool: %v", e.names[user], p, l)
		}
	}
}

// failAfter is a zen.Table whose writes fail once armed and `left` writes are spent.
type failAfter struct {
	zen.Table
	armed atomic.Bool
	left  atomic.Int32
}

func (f *failAfter) write() error {
	if f.armed.Load() && f.left.Add(-1) < 0 {
		return errCrash
	}
	return nil
}

func (f *failAfter) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := f.write(); err != nil {
		return err
	}
	return f.Table.Apply(ctx, muts)
}

func (f *failAfter) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if err := f.write(); err != nil {
		return false, err
	}
	return f.Table.CheckAndSet(ctx, key, expected, value)
}

func (f *failAfter) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	if err := f.write(); err != nil {
		return 0, err
	}
	return f.Table.Increment(ctx, key, delta)
}

// crashMaterialize serves user a first page through a service whose materialize job dies after
// its first write, checks the accounting, then replays the job in a fresh service.
func (e *e2e) crashMaterialize(user zen.ID) {
	e.t.Helper()
	fa := &failAfter{Table: e.a.feedPrimary}
	rec := &pinlatertest.Recorder{}
	// The chunk becomes a job (not materialized inline), so the test can run it and crash it.
	jobs := e.a.feed.Config()
	jobs.InlineMaterialize = 0
	crashing, err := feedsvc.New(feedsvc.Deps{Primary: fa, Standby: e.a.feedStandby, Generator: e.gen,
		Enqueuer: feedsvc.PinlaterEnqueuer{Client: rec}}, jobs)
	e.must(err)
	page, err := crashing.GetFeed(e.ctx, feedsvc.Request{User: user, PageSize: 50})
	e.must(err)
	crashing.Wait()
	if page.FreshStatus != feedsvc.FreshIncluded {
		e.t.Fatalf("crash: %s's first page: fresh status %q (%s), want included", e.names[user], page.FreshStatus, page.FreshDetail)
	}
	tasks := rec.OfType(pinlater.TypeMaterialize)
	if len(tasks) != 1 {
		e.t.Fatalf("crash: %d materialize tasks recorded, want 1", len(tasks))
	}
	var p pinlater.MaterializePayload
	e.must(json.Unmarshal(tasks[0].Payload(), &p))
	fa.left.Store(1)
	fa.armed.Store(true)
	if err := crashing.HandleMaterialize(e.ctx, p); err == nil {
		e.t.Fatal("crash: materialize with a failing table succeeded")
	}
	e.checkAccounting("after materialize crash, before restart", user)
	// Restart: a new service over the healthy tables replays the job (as pinlater's retry would).
	restarted, err := feedsvc.New(feedsvc.Deps{Primary: e.a.feedPrimary, Standby: e.a.feedStandby, Generator: localGenerator{e.a.gen},
		Enqueuer: feedsvc.PinlaterEnqueuer{Client: e.a.pinClient}}, e.a.feed.Config())
	e.must(err)
	if err := restarted.HandleMaterialize(e.ctx, p); err != nil {
		e.t.Errorf("crash: replayed materialize: %v", err)
	}
	restarted.Wait()
	e.settle()
	var fresh []zen.ID
	for _, it := range page.Items {
		if it.Fresh {
			fresh = append(fresh, it.Pin)
		}
	}
	mat := e.materialized(user)
	for _, pin := range fresh {
		if !slices.Contains(mat, pin) {
			e.t.Errorf("crash: served pin %s of %s not materialized after the replay", pin, e.names[user])
		}
	}
}

// poolRow is one pool entry as Top returns it.
type poolRow zen.PoolEntry

// snapshot is the users' pools and the whole primary feed table.
type snapshot struct {
	Pools map[zen.ID][]poolRow
	Feed  map[string]string
}

func (e *e2e) snapshot(users ...zen.ID) snapshot {
	e.t.Helper()
	s := snapshot{Pools: map[zen.ID][]poolRow{}, Feed: map[string]string{}}
	for _, u := range users {
		lists, err := readerPools(e.ctx, e.a.pools, u)
		e.must(err)
		for _, es := range lists {
			for _, pe := range es {
				s.Pools[u] = append(s.Pools[u], poolRow(pe))
			}
		}
		sort.Slice(s.Pools[u], func(i, j int) bool { return s.Pools[u][i].Pin < s.Pools[u][j].Pin })
	}
	kvs, err := e.a.feedPrimary.Scan(e.ctx, zen.ScanOptions{})
	e.must(err)
	for _, kv := range kvs {
		if kv.Key[0] == 0xff { // the replication canary (HBase mode): not part of the feed
			continue
		}
		s.Feed[fmt.Sprintf("%x", kv.Key)] = fmt.Sprintf("%x", kv.Value)
	}
	return s
}

// handlers collects handlers registered on it.
type handlers map[string]pinlater.Handler

func (h handlers) Handle(typ string, hd pinlater.Handler) { h[typ] = hd }

// checkRerun runs every task handled so far once more, through the same handlers, and checks
// that pools and feeds did not change.
func (e *e2e) checkRerun(users ...zen.ID) {
	e.t.Helper()
	e.settle()
	before := e.snapshot(users...)
	hs := handlers{}
	e.a.worker.Register(hs)
	feedsvc.RegisterHandlers(hs, e.a.feed)
	e.tasksMu.Lock()
	tasks := slices.Clone(e.tasks)
	e.tasksMu.Unlock()
	byType := map[string]int{}
	for _, task := range tasks {
		h, ok := hs[task.Type()]
		if !ok {
			continue // respace: not a feed handler
		}
		byType[task.Type()]++
		if err := h.ProcessTask(e.ctx, task); err != nil {
			e.t.Errorf("idempotent: re-run of %s %s: %v", task.Type(), task.Payload(), err)
		}
	}
	e.settle()
	e.t.Logf("idempotent: re-ran %v", byType)
	if len(byType) == 0 {
		e.t.Error("idempotent: no task recorded")
	}
	after := e.snapshot(users...)
	for _, u := range users {
		after.Pools[u] = e.withoutRederivedRelated(u, before.Pools[u], after.Pools[u])
		if diff := cmp.Diff(before.Pools[u], after.Pools[u]); diff != "" {
			e.t.Errorf("idempotent: re-running every handled task changed %s's pools: %s", e.names[u], summarizePools(before.Pools[u], after.Pools[u], e.feedPins(u)))
		}
	}
	if diff := cmp.Diff(before.Feed, after.Feed); diff != "" {
		e.t.Errorf("idempotent: re-running every handled task changed the feed table (-before +after):\n%s", diff)
	}
}

// withoutRederivedRelated returns after without the related entries a late re-run of a fanout
// derived afresh from today's graph, and logs them. The exemption, and why it is sound:
// HandleFanout puts into the saver's related pool the pins that share a board with the saved pin
// *now* (relatedForSaver reads the current board co-occurrence). Re-run after the graph grew, it
// finds pins that did not share a board at the original run; they are the candidates a save made
// today would produce, never served to the user (a served or removed pin keeps a tombstone in the
// user's pools, which Insert respects) and not in any pool of the user before: new, legitimate
// candidates, neither a duplicate nor a loss. Freezing the walk at the event's time would need a
// snapshot of the graph. So an added entry is exempt only if all of these hold: source related
// with the related-pins reason, its pin in none of the user's pools before, not in the user's
// materialized feed, not dropped by policy for the user, and sharing a board today with a pin
// the user saved. Everything else stays strict: any other entry added, any entry removed or
// changed, and any change of the feed table fail the check.
func (e *e2e) withoutRederivedRelated(u zen.ID, before, after []poolRow) []poolRow {
	e.t.Helper()
	had := map[zen.ID]bool{}
	for _, r := range before {
		had[r.Pin] = true
	}
	fed := e.feedPins(u)
	var kept []poolRow
	var exempt []zen.ID
	for _, r := range after {
		if !had[r.Pin] && r.Source == zen.SourceRelated && r.Reason == "related to a saved pin" &&
			!fed[r.Pin] && e.dropped[u][r.Pin] == "" && e.sharesBoardWithSave(u, r.Pin) {
			exempt = append(exempt, r.Pin)
			continue
		}
		kept = append(kept, r)
	}
	if len(exempt) > 0 {
		e.t.Logf("idempotent: %s got %d related pins re-derived from today's graph (exempt): %v", e.names[u], len(exempt), exempt)
	}
	return kept
}

// sharesBoardWithSave reports whether pin is on a board, today, that also holds a pin user saved.
func (e *e2e) sharesBoardWithSave(user, pin zen.ID) bool {
	e.t.Helper()
	list := func(from zen.ID, et zen.EdgeType) []zen.ID {
		es, _, err := e.a.graph.ListEdges(e.ctx, from, et, "", zen.MaxEdgePage, false)
		e.must(err)
		var out []zen.ID
		for _, ed := range es {
			out = append(out, ed.To)
		}
		return out
	}
	boards := map[zen.ID]bool{}
	for _, b := range list(pin, zen.EdgePinBoards) {
		boards[b] = true
	}
	for _, saved := range list(user, zen.EdgeUserPins) {
		if saved == pin {
			continue
		}
		for _, b := range list(saved, zen.EdgePinBoards) {
			if boards[b] {
				return true
			}
		}
	}
	return false
}

// feedPins is the set of the user's materialized pins.
func (e *e2e) feedPins(u zen.ID) map[zen.ID]bool {
	m := map[zen.ID]bool{}
	for _, p := range e.materialized(u) {
		m[p] = true
	}
	return m
}

// summarizePools says which pins a change added to or removed from a user's pools, and how
// many of the added ones are already in the materialized feed.
func summarizePools(before, after []poolRow, inFeed map[zen.ID]bool) string {
	key := func(r poolRow) string { return fmt.Sprintf("%s/%s", r.Source.String(), r.Pin) }
	b, a := map[string]bool{}, map[string]bool{}
	for _, r := range before {
		b[key(r)] = true
	}
	var added, removed []string
	fed := 0
	for _, r := range after {
		a[key(r)] = true
		if !b[key(r)] {
			added = append(added, key(r))
			if inFeed[r.Pin] {
				fed++
			}
		}
	}
	for _, r := range before {
		if !a[key(r)] {
			removed = append(removed, key(r))
		}
	}
	return fmt.Sprintf("%d entries added %v (%d of them already in the materialized feed), %d removed %v", len(added), added, fed, len(removed), removed)
}
