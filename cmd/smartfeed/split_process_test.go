package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
)

// TestSplitProcesses runs the roles the way the Helm chart deploys them: the built binary as
// four OS processes (graph, worker, generator, feedsvc) on loopback gRPC, one Redis and one HBase
// (Pebble admits one process per directory, and the worker and the generator share the main
// store, so a split deployment is an HBase one: charts/smartfeed/values.yaml). It drives users,
// boards, pins, follows, a pin delete, a user delete, an inactive user's return and a kill -9
// of the generator process (then restarted), all through the public gRPC APIs, and checks
// DESIGN §5's invariants across the processes by reading the shared tables: nothing lost (every
// fanned-out pin in exactly one place), nothing twice (concurrent first pages, paging, the
// materialized feed), order kept (each served chunk contiguous in the feed), degrade don't fail
// (the generator process dead: the materialized feed, flagged), and that each role alone has the
// features it owns (Touch and the rebuild of
// an inactive user, the deleted user's feed removal, recovery of the crashed generator's chunk).
func TestSplitProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("split processes: builds the binary and runs three processes; skipped with -short")
	}
	redis, ns := testenv.RedisNamespace(t, "split")
	zk := testenv.HBase(t)
	s := newSplit(t, redis, ns, zk)

	// --- Graph through the graph role's GraphService: A, B, C, D, E (E is the inactive one).
	A, B, C, D, E := s.user("alice"), s.user("bob"), s.user("carol"), s.user("dave"), s.user("erin")
	bA, bC := s.board(A), s.board(C)
	s.follow(B, A)
	s.follow(B, C)
	s.follow(C, A)
	s.follow(D, A)
	s.follow(E, A)
	s.drain()
	// E has not read a feed for 30 days: the fanout skips E until E comes back.
	s.must(s.worker.SetLastActive(s.ctx, E, time.Now().Add(-30*24*time.Hour).UnixMilli()))

	var aPins []zen.ID
	for range 6 {
		aPins = append(aPins, s.pin(A, bA, "a"))
	}
	for range 3 {
		s.pin(C, bC, "c")
	}
	s.drain()
	// E is inactive: A's pins were not fanned out to E.
	for _, p := range aPins {
		delete(s.expected[E], p)
	}
	if n := len(s.locate(E)); n != 0 {
		t.Errorf("inactive user: fanout reached E's pools (%d pins) though E was inactive", n)
	}
	s.deletePin(A, aPins[1])
	s.drain()
	s.checkAccounting("after events", B, C, D, E)

	// --- Nothing twice: concurrent first pages of B on feedsvc (the generator remote).
	s.concurrentFirstPages(B, 6, 3)
	s.settle(B)
	s.checkAccounting("after B's first pages", B, C, D)
	s.checkQuiet(B)
	s.checkPaging(B, 3)
	s.checkFeedUnique(B)
	s.checkOrder(B)

	// --- The inactive user returns: GetFeed on feedsvc touches E (the worker's Activity, in
	// another process), the worker rebuilds E's pools from whom E follows, and a later page
	// serves them.
	s.getFeed(E, "")
	s.waitFor("E's pools rebuilt after E's return", 30*time.Second, func() bool {
		s.drain()
		return len(s.locate(E)) > 0
	})
	for _, p := range aPins {
		if p != aPins[1] {
			s.expect(E, p)
		}
	}
	s.settle(E)
	s.checkAccounting("after E's return and rebuild", E)

	// --- kill -9 of the generator: a chunk it handed out (to a caller that never delivered it)
	// and chunks of GetFeeds in flight at the kill; the restarted generator and feedsvc's
	// recovery return or complete every one of them.
	orphan := s.takeChunk(D)
	var wg sync.WaitGroup
	var pages atomic.Int64
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.getFeedErr(C, "") // may degrade while the generator is down: never an error
			pages.Add(1)
		}
	}()
	// C's pages run before, at and after the kill: counted, not timed.
	s.waitFor("C's pages under way before the kill", 30*time.Second, func() bool { return pages.Load() >= 2 })
	s.gen.kill()
	atKill := pages.Load()
	s.waitFor("C's pages answered with the generator dead", 30*time.Second, func() bool { return pages.Load() >= atKill+3 })
	close(stop)
	wg.Wait()
	// Degrade, don't fail: with the generator process dead, B's page is B's materialized feed,
	// flagged as without fresh pins.
	s.checkDegraded(B)
	s.gen.start()
	s.waitFor("the crashed generator's chunk recovered", 60*time.Second, func() bool {
		chunks, err := s.genClient().PendingChunks(s.ctx, &generatorv1.PendingChunksRequest{User: uint64(D)})
		if err != nil {
			return false
		}
		for _, c := range chunks.GetChunks() {
			if c.GetId() == orphan {
				return false
			}
		}
		return true
	})
	s.settle(B, C, D, E)
	s.checkAccounting("after the generator's kill -9 and recovery", B, C, D, E)
	s.checkQuiet(D)
	s.checkFeedUnique(C)

	// --- D reads its feed: every pin of D's served exactly once.
	s.concurrentFirstPages(D, 3, 2)
	s.settle(D)
	s.checkAccounting("after D's first pages", D)
	s.checkFeedUnique(D)
	s.checkOrder(D)
	s.checkPaging(D, 2)

	// --- User delete: on the graph process; the worker's delete job removes B's materialized
	// feed, which only the feedsvc process holds.
	if rows := s.feedRows(B); len(rows) == 0 {
		t.Fatal("B has no materialized feed before the delete: the check tests nothing")
	}
	_, err := s.graph().DeleteUser(s.ctx, &graphv1.DeleteUserRequest{UserId: uint64(B)})
	s.must(err)
	s.waitFor("B's materialized feed removed", 30*time.Second, func() bool {
		s.drain()
		return len(s.feedRows(B)) == 0
	})
}

// split is the running deployment: four processes of one binary, and the test's own clients of
// the shared Redis and HBase for checks.
type split struct {
	*e2eModel
	bin, dir          string
	gen, work, feed   *proc
	graphP            *proc
	pools             *zen.Pools
	genState          zen.Table
	primary, standby  zen.Table
	worker            *worker.Worker
	localGen          *generator.Generator
	admin             *pinlater.Admin
	conns             map[string]*grpc.ClientConn
	connsMu           sync.Mutex
	feedAddr, genAddr string
	workAddr          string
	graphAddr         string
}

// e2eModel is the test's model of what was fanned out to whom (the e2e test's, by ID).
type e2eModel struct {
	t         *testing.T
	ctx       context.Context
	names     map[zen.ID]string
	followers map[zen.ID]map[zen.ID]bool
	savedBy   map[zen.ID][]zen.ID
	expected  map[zen.ID]map[zen.ID]bool
	dropped   map[zen.ID]map[zen.ID]string
	// chunks: the fresh pins of each first page, in the order served (the generator's).
	chunks map[zen.ID][][]zen.ID
}

func (m *e2eModel) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

func (m *e2eModel) expect(u, p zen.ID) {
	if m.dropped[u][p] != "" {
		return
	}
	if m.expected[u] == nil {
		m.expected[u] = map[zen.ID]bool{}
	}
	m.expected[u][p] = true
}

func (m *e2eModel) drop(u, p zen.ID, why string) {
	if m.dropped[u] == nil {
		m.dropped[u] = map[zen.ID]string{}
	}
	m.dropped[u][p] = why
}

// proc is one role's OS process.
type proc struct {
	t    *testing.T
	role string
	bin  string
	env  []string
	log  string
	// args follow the role on the command line; nil switches the admin listeners off.
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	args := p.args
	if args == nil {
		// Empty addresses switch the admin listeners off (an empty variable reads as unset).
		args = []string{"--admin-addr=", "--admin-grpc-addr="}
	}
	p.cmd = exec.Command(p.bin, append([]string{p.role}, args...)...)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); _ = f.Close(); close(p.done) }()
}

// kill is a crash: SIGKILL, nothing flushed or shut down.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop is a graceful shutdown (SIGTERM), bounded.
func (p *proc) stop() {
	if p.cmd == nil || p.cmd.Process == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("%s did not stop within 30s; killing it", p.role)
		p.kill()
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// freeAddrs returns n distinct free loopback addresses. It holds every listener open until all n
// are chosen: closing each before asking for the next let the kernel hand the same port out twice
// (a CI run gave the generator and the worker one port, and the worker exited on bind).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// builtBinary is cmd/smartfeed built once for the tests of this process (buildBinary), in a
// directory TestMain removes.
var builtBinary struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildBinary returns cmd/smartfeed built from this package's source. It is built once per
// test process: every test that runs the binary runs the same source, and each build would
// link it again (seconds of CPU each under make test).
func buildBinary(t *testing.T) string {
	t.Helper()
	b := &builtBinary
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "smartfeed-test-bin-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "smartfeed")
		// -trimpath as TestDocsCommandsRun's builds: they then share the compiled packages.
		if out, err := exec.Command("go", "build", "-trimpath", "-o", b.bin, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// removeBuiltBinary removes what buildBinary built (called by TestMain).
func removeBuiltBinary() {
	if builtBinary.dir != "" {
		_ = os.RemoveAll(builtBinary.dir)
	}
}

// newSplit starts the four role processes in the Redis namespace ns; extraEnv is added to (and
// overrides) their common environment.
func newSplit(t *testing.T, redis, ns, zk string, extraEnv ...string) *split {
	dir := t.TempDir()
	s := &split{e2eModel: &e2eModel{t: t, ctx: t.Context(), names: map[zen.ID]string{},
		followers: map[zen.ID]map[zen.ID]bool{}, savedBy: map[zen.ID][]zen.ID{},
		expected: map[zen.ID]map[zen.ID]bool{}, dropped: map[zen.ID]map[zen.ID]string{},
		chunks: map[zen.ID][][]zen.ID{}},
		dir: dir, conns: map[string]*grpc.ClientConn{}}
	s.bin = buildBinary(t)
	stamp := time.Now().UnixNano()
	prefix := fmt.Sprintf("split%d_", stamp)
	base := append(os.Environ(),
		"SMARTFEED_STORAGE=hbase", "SMARTFEED_HBASE_POOLS_ZK="+zk, "SMARTFEED_HBASE_PRIMARY_ZK="+zk,
		"SMARTFEED_HBASE_STANDBY_ZK="+zk, "SMARTFEED_HBASE_TABLE_PREFIX="+prefix, "SMARTFEED_HBASE_REPLICATION=app",
		"SMARTFEED_REDIS_ADDR="+redis, "SMARTFEED_REDIS_NAMESPACE="+ns,
		"SMARTFEED_LOG_FORMAT=json",
		"SMARTFEED_SHUTDOWN_TIMEOUT=20s", "SMARTFEED_FEED_GENERATOR_DEADLINE=2s", "SMARTFEED_FEED_PERSIST_TIMEOUT=5s",
		// Recovery looks at chunks older than a second, every second: the test waits seconds,
		// not minutes.
		"SMARTFEED_FEED_RECOVER_AFTER=1s", "SMARTFEED_FEED_RECOVER_EVERY=1s",
		// The second pass of a user delete: soon, so that the drains after it do not wait 11m.
		"SMARTFEED_WORKER_USER_DELETE_RECHECK=1s",
		"SMARTFEED_GENERATOR_CONFIG="+writeGenConfig(t, dir))
	base = append(base, extraEnv...)
	addrs := freeAddrs(t, 4)
	s.genAddr, s.workAddr, s.feedAddr, s.graphAddr = addrs[0], addrs[1], addrs[2], addrs[3]
	mk := func(role, addr string, extra ...string) *proc {
		env := append(append(append([]string{}, base...), "SMARTFEED_GRPC_ADDR="+addr), extra...)
		return &proc{t: t, role: role, bin: s.bin, env: env, log: filepath.Join(dir, role+".log")}
	}
	s.gen = mk(roleGenerator, s.genAddr)
	s.work = mk(roleWorker, s.workAddr)
	s.feed = mk(roleFeed, s.feedAddr, "SMARTFEED_GENERATOR_ADDR="+s.genAddr)
	s.graphP = mk(roleGraph, s.graphAddr)
	t.Cleanup(func() {
		s.stopAll()
		if t.Failed() {
			for _, p := range []*proc{s.gen, s.work, s.feed, s.graphP} {
				t.Logf("--- %s log (tail):\n%s", p.role, p.tail())
			}
		}
		s.connsMu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.connsMu.Unlock()
	})
	for _, p := range []*proc{s.gen, s.work, s.feed, s.graphP} {
		p.start()
		s.waitServing(p)
	}

	// The test's own clients of the shared stores, for checks.
	main, err := zenhbase.Open(s.ctx, zk, zenhbase.Options{TablePrefix: prefix})
	s.must(err)
	t.Cleanup(func() { _ = main.Close() })
	// Drop this run's tables once the processes stopped (cleanups run last-registered first):
	// each is pre-split on shard boundaries, and a test HBase runs out of heap on many runs'.
	t.Cleanup(func() {
		s.stopAll() // before the drops: the processes write until they stop
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard,
			tablePools, tableGenState, tableFeed, tableMeta, worker.StateTable, zen.OutboxTable} {
			if err := main.Drop(ctx, name); err != nil {
				t.Logf("drop %s: %v", name, err)
			}
		}
	})
	feedP, err := zenhbase.Open(s.ctx, zk, zenhbase.Options{TablePrefix: prefix})
	s.must(err)
	t.Cleanup(func() { _ = feedP.Close() })
	feedS, err := zenhbase.Open(s.ctx, zk, zenhbase.Options{TablePrefix: prefix + "standby_"})
	s.must(err)
	t.Cleanup(func() { _ = feedS.Close() })
	t.Cleanup(func() {
		s.stopAll()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := feedS.Drop(ctx, tableFeed); err != nil {
			t.Logf("drop standby feed: %v", err)
		}
	})
	poolsT, err := main.Table(s.ctx, tablePools)
	s.must(err)
	s.pools = zen.NewPools(poolsT, nil)
	s.genState, err = main.Table(s.ctx, tableGenState)
	s.must(err)
	s.localGen, err = generator.New(generator.Params{Pools: s.pools, State: s.genState})
	s.must(err)
	s.primary, err = feedP.Table(s.ctx, tableFeed)
	s.must(err)
	s.standby, err = feedS.Table(s.ctx, tableFeed)
	s.must(err)
	graph, err := zen.NewGraph(s.ctx, main, nil, nil)
	s.must(err)
	stateT, err := main.Table(s.ctx, worker.StateTable)
	s.must(err)
	s.admin, err = pinlater.NewAdmin(pinlater.RedisAddr(redis), pinlater.WithNamespace(ns))
	s.must(err)
	t.Cleanup(func() { _ = s.admin.Close() })
	s.worker, err = worker.New(graph, poolsT, stateT, nopEnqueuer{}, worker.Config{}, worker.Options{Logger: zap.NewNop()})
	s.must(err)
	return s
}

// stopAll stops the role processes gracefully (a stopped one is skipped).
func (s *split) stopAll() {
	for _, p := range []*proc{s.graphP, s.feed, s.work, s.gen} {
		p.stop()
	}
}

// nopEnqueuer: the test's worker only writes last-active times; it never enqueues.
type nopEnqueuer struct{}

func (nopEnqueuer) Enqueue(context.Context, *pinlater.Task, ...pinlater.Option) (*pinlater.Info, error) {
	return nil, fmt.Errorf("the test's worker enqueues nothing")
}

// writeGenConfig writes a generator config with small chunks, so concurrent first pages compete
// for the same pools.
func writeGenConfig(t *testing.T, dir string) string {
	t.Helper()
	gc := generator.DefaultConfig()
	gc.MinChunk, gc.MaxChunk, gc.BaseChunk = 2, 3, 3
	b, err := json.Marshal(gc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "generator.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *split) conn(addr string) *grpc.ClientConn {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	s.must(err)
	s.conns[addr] = c
	return c
}

func (s *split) graph() graphv1.GraphServiceClient {
	return graphv1.NewGraphServiceClient(s.conn(s.workAddr))
}
func (s *split) feedClient() feedv1.FeedServiceClient {
	return feedv1.NewFeedServiceClient(s.conn(s.feedAddr))
}
func (s *split) genClient() generatorv1.GeneratorServiceClient {
	return generatorv1.NewGeneratorServiceClient(s.conn(s.genAddr))
}

// waitServing waits until p answers health SERVING, or fails with its log.
func (s *split) waitServing(p *proc) {
	s.t.Helper()
	var addr string
	for _, kv := range p.env {
		if v, ok := strings.CutPrefix(kv, "SMARTFEED_GRPC_ADDR="); ok {
			addr = v
		}
	}
	hc := healthpb.NewHealthClient(s.conn(addr))
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			s.t.Fatalf("%s exited at start:\n%s", p.role, p.tail())
		}
		ctx, cancel := context.WithTimeout(s.ctx, time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("%s not serving within 90s:\n%s", p.role, p.tail())
}

func (s *split) waitFor(what string, d time.Duration, ok func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			s.t.Errorf("%s: not within %s", what, d) // go on: the later checks still say something
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *split) user(name string) zen.ID {
	uname := fmt.Sprintf("%s%d", name, time.Now().UnixNano()%1e9)
	u, err := s.graph().CreateUser(s.ctx, &graphv1.CreateUserRequest{Username: uname, Email: uname + "@example.com"})
	s.must(err)
	s.names[zen.ID(u.GetId())] = name
	return zen.ID(u.GetId())
}

func (s *split) board(owner zen.ID) zen.ID {
	b, err := s.graph().CreateBoard(s.ctx, &graphv1.CreateBoardRequest{OwnerId: uint64(owner), Name: "board of " + s.names[owner]})
	s.must(err)
	return zen.ID(b.GetId())
}

func (s *split) follow(user, target zen.ID) {
	_, err := s.graph().Follow(s.ctx, &graphv1.FollowRequest{UserId: uint64(user), TargetId: uint64(target)})
	s.must(err)
	if s.followers[target] == nil {
		s.followers[target] = map[zen.ID]bool{}
	}
	s.followers[target][user] = true
	for _, p := range s.savedBy[target] {
		s.expect(user, p)
	}
}

func (s *split) pin(author, board zen.ID, details string) zen.ID {
	p, err := s.graph().CreatePin(s.ctx, &graphv1.CreatePinRequest{AuthorId: uint64(author), BoardId: uint64(board), Details: details,
		ImageUrl: "https://example.com/" + details + ".jpg"})
	s.must(err)
	pin := zen.ID(p.GetId())
	s.savedBy[author] = append(s.savedBy[author], pin)
	for u := range s.followers[author] {
		s.expect(u, pin)
	}
	return pin
}

func (s *split) deletePin(author, pin zen.ID) {
	_, err := s.graph().DeletePin(s.ctx, &graphv1.DeletePinRequest{UserId: uint64(author), PinId: uint64(pin)})
	s.must(err)
	for u := range s.expected {
		if s.expected[u][pin] {
			delete(s.expected[u], pin)
			s.drop(u, pin, "deleted")
		}
	}
}

// takeChunk takes a chunk of user's straight from the generator process, as a feed service that
// then crashes would: the chunk stays in flight until recovery settles it.
func (s *split) takeChunk(user zen.ID) string {
	r, err := s.genClient().GenerateChunk(s.ctx, &generatorv1.GenerateChunkRequest{User: uint64(user)})
	s.must(err)
	if len(r.GetChunk().GetItems()) == 0 {
		s.t.Fatalf("no pins in %s's chunk: the crash tests nothing", s.names[user])
	}
	return r.GetChunk().GetId()
}

func (s *split) getFeed(user zen.ID, cursor string) *feedv1.GetFeedResponse {
	s.t.Helper()
	r, err := s.getFeedErr(user, cursor)
	s.must(err)
	return r
}

func (s *split) getFeedErr(user zen.ID, cursor string) (*feedv1.GetFeedResponse, error) {
	r, err := s.feedClient().GetFeed(s.ctx, &feedv1.GetFeedRequest{UserId: uint64(user), Cursor: cursor, PageSize: 50})
	if err != nil {
		s.t.Errorf("degrade, don't fail: GetFeed of %s: %v", s.names[user], err)
	}
	return r, err
}

// drain waits until every pinlater queue is empty; no task may be dead.
func (s *split) drain() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	for range 2 {
		for q := range pinlater.DefaultQueueWeights() {
			if err := s.admin.WaitDrained(ctx, q, 20*time.Millisecond); err != nil {
				s.t.Fatalf("queue %s not drained: %v", q, err)
			}
		}
	}
	for q := range pinlater.DefaultQueueWeights() {
		st, err := s.admin.Queue(ctx, q)
		s.must(err)
		if st.Dead != 0 {
			s.t.Errorf("queue %s holds %d dead tasks", q, st.Dead)
		}
	}
}

// settle waits until the queues are drained and every chunk served to users is materialized
// and settled (no pending feed row but the prepared ones, which wait for a page by design; no
// pin both in the feed and in a chunk in flight), within a bound;
// the checks after it report what is left. feedsvc records and enqueues a served chunk after the
// page is answered, in another process the test cannot wait on, so drained queues alone may
// come before that enqueue.
func (s *split) settle(users ...zen.ID) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s.drain()
		busy := false
		for _, u := range users {
			for _, r := range s.feedRows(u) {
				busy = busy || r.Pending && !r.Prepared
			}
			// A materialized chunk the generator has not settled yet (its materialize task
			// retrying a settle): its pins are in the feed and in flight for a moment.
			for _, l := range s.locate(u) {
				busy = busy || slices.Contains(l, "feed") && slices.Contains(l, "inflight")
			}
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling another process's state: no event to wait on
	}
}

func (s *split) feedRows(user zen.ID) []feedRow {
	rows, err := scanFeed(s.ctx, s.primary, user)
	s.must(err)
	return rows
}

// locate is the e2e test's: every place each of user's pins is found.
func (s *split) locate(user zen.ID) map[zen.ID][]string {
	s.t.Helper()
	inflight := map[zen.ID]bool{}
	chunks, err := s.localGen.Pending(s.ctx, user)
	s.must(err)
	for _, c := range chunks {
		for _, it := range c.Items {
			inflight[it.Pin] = true
		}
	}
	// A chunk whose GenerateChunk was killed stays unfinished, and out of Pending, until the
	// generator's in-flight grace has passed (a minute): its claimed pins are in flight too, or
	// still in the pools if the kill came before the take. Counting them only from Pending would
	// make a kill inside C's GenerateChunk look like lost pins.
	unfinished, err := s.localGen.Unfinished(s.ctx, user)
	s.must(err)
	loc := map[zen.ID][]string{}
	lists, err := readerPools(s.ctx, s.pools, user)
	s.must(err)
	for i, es := range lists {
		for _, pe := range es {
			loc[pe.Pin] = append(loc[pe.Pin], "pool:"+allSources[i].String())
		}
	}
	for _, p := range unfinished {
		if len(loc[p]) == 0 {
			inflight[p] = true
		}
	}
	for _, r := range s.feedRows(user) {
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

// checkAccounting: nothing lost: every expected pin of each user is in exactly one place; a
// dropped pin is in no pool.
func (s *split) checkAccounting(when string, users ...zen.ID) {
	s.t.Helper()
	for _, u := range users {
		loc := s.locate(u)
		for p := range s.expected[u] {
			if l := loc[p]; len(l) != 1 {
				s.t.Errorf("%s: nothing lost: %s's pin %s is in %v, want exactly one place", when, s.names[u], p, l)
			}
		}
		for p, why := range s.dropped[u] {
			for _, where := range loc[p] {
				if where != "feed" {
					s.t.Errorf("%s: %s's pin %s was dropped (%s) but is in %s", when, s.names[u], p, why, where)
				}
			}
		}
		for p, l := range loc {
			if !s.expected[u][p] && s.dropped[u][p] == "" && len(l) != 1 {
				s.t.Errorf("%s: %s's extra pin %s is in %d places %v", when, s.names[u], p, len(l), l)
			}
		}
	}
}

// checkQuiet: once everything settled, nothing of user is in flight. feedsvc records and
// enqueues a chunk after the page is answered, in another process the test cannot wait on, so
// "settled" is: the queues drained and nothing in flight, within a bound.
func (s *split) checkQuiet(user zen.ID) {
	s.t.Helper()
	var stuck []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		stuck = stuck[:0]
		for p, l := range s.locate(user) {
			if slices.Contains(l, "inflight") {
				stuck = append(stuck, fmt.Sprintf("%s in %v", p, l))
			}
		}
		if len(stuck) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
		s.drain()
	}
	for _, st := range stuck {
		s.t.Errorf("%s's pin %s still in flight 15s after the queues drained", s.names[user], st)
	}
}

// TestSplitRolesPebbleRefused: with the embedded store, a second role process on the main store
// is refused at start, and the error says why and what to run instead.
func TestSplitRolesPebbleRefused(t *testing.T) {
	cfg := testConfig(t)
	first, err := newApp(t.Context(), roleGenerator, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.closeAll)
	second, err := newApp(t.Context(), roleWorker, cfg, zap.NewNop(), newRegistry())
	if err == nil {
		second.closeAll()
		t.Fatal("a worker on the generator's pebble directory started")
	}
	for _, want := range []string{"another process holds it", "smartfeed all", "storage=hbase"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// concurrentFirstPages: n goroutines × rounds first pages; a fresh pin is handed out once.
func (s *split) concurrentFirstPages(user zen.ID, n, rounds int) {
	s.t.Helper()
	var mu sync.Mutex
	fresh := map[zen.ID]int{}
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				r, err := s.getFeedErr(user, "")
				if err != nil {
					return
				}
				seen := map[zen.ID]bool{}
				var chunk []zen.ID
				mu.Lock()
				statuses[r.GetFreshStatus().String()+" "+r.GetFreshDetail()]++
				for _, it := range r.GetItems() {
					p := zen.ID(it.GetPinId())
					if seen[p] {
						s.t.Errorf("nothing twice: a first page of %s repeats pin %s", s.names[user], p)
					}
					seen[p] = true
					if it.GetFresh() {
						fresh[p]++
						chunk = append(chunk, p)
					}
				}
				if len(chunk) > 0 {
					s.chunks[user] = append(s.chunks[user], chunk)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for p, c := range fresh {
		if c != 1 {
			s.t.Errorf("nothing twice: pin %s handed out fresh %d times to %s", p, c, s.names[user])
		}
	}
	// On a loaded machine every concurrent page may have degraded (a chunk not recorded within
	// feed's persist timeout is given back to the pools, PERSIST_FAILED): the pages after them
	// then serve what the scenario needs, one at a time.
	deadline := time.Now().Add(30 * time.Second)
	for len(fresh) == 0 && time.Now().Before(deadline) {
		r, err := s.getFeedErr(user, "")
		if err != nil {
			break
		}
		statuses[r.GetFreshStatus().String()+" "+r.GetFreshDetail()]++
		var chunk []zen.ID
		for _, it := range r.GetItems() {
			if it.GetFresh() {
				fresh[zen.ID(it.GetPinId())]++
				chunk = append(chunk, zen.ID(it.GetPinId()))
			}
		}
		if len(chunk) > 0 {
			s.chunks[user] = append(s.chunks[user], chunk)
			break
		}
		time.Sleep(200 * time.Millisecond) // the next page after feed.min_chunk_interval: polling
	}
	if len(fresh) == 0 {
		s.t.Errorf("no fresh pin served to %s: the scenario tests nothing (fresh statuses %v, %s's pins %v)",
			s.names[user], statuses, s.names[user], s.locate(user))
	}
}

// checkPaging: small pages never repeat an item, and they are the materialized feed in order.
func (s *split) checkPaging(user zen.ID, size int) {
	s.t.Helper()
	var got []zen.ID
	seen := map[zen.ID]bool{}
	cursor := ""
	for i := 0; ; i++ {
		r, err := s.feedClient().GetFeed(s.ctx, &feedv1.GetFeedRequest{UserId: uint64(user), Cursor: cursor, PageSize: int32(size)})
		s.must(err)
		for _, it := range r.GetItems() {
			p := zen.ID(it.GetPinId())
			if seen[p] {
				s.t.Errorf("nothing twice: paging %s repeats pin %s on page %d", s.names[user], p, i)
			}
			seen[p] = true
			got = append(got, p)
		}
		if r.GetNextCursor() == "" || i > 1000 {
			break
		}
		cursor = r.GetNextCursor()
	}
	s.settle(user)
	var want []zen.ID
	for _, r := range s.feedRows(user) {
		if !r.Pending {
			want = append(want, r.Pins...)
		}
	}
	// The first page may have added a fresh chunk in front; the rest must be the feed.
	if len(got) < len(want) || !equalIDs(got[len(got)-len(want):], want) && !equalIDs(got, want[:min(len(got), len(want))]) {
		s.t.Errorf("paging %s: pages %v differ from the materialized feed %v", s.names[user], got, want)
	}
}

func equalIDs(a, b []zen.ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkFeedUnique: a pin appears at most once in the user's materialized feed (primary and
// standby).
func (s *split) checkFeedUnique(user zen.ID) {
	s.t.Helper()
	for name, tb := range map[string]zen.Table{"primary": s.primary, "standby": s.standby} {
		rows, err := scanFeed(s.ctx, tb, user)
		s.must(err)
		count := map[zen.ID]int{}
		for _, r := range rows {
			if !r.Pending {
				count[r.Pins[0]]++
			}
		}
		for p, c := range count {
			if c > 1 {
				s.t.Errorf("nothing twice: pin %s is %d times in %s's materialized feed (%s)", p, c, s.names[user], name)
			}
		}
	}
}

// TestGraphRole: the graph role serves the Graph, Board and Ingest APIs over the main store and
// enqueues through the outbox; it runs no jobs, composes no chunks and serves no feed.
func TestGraphRole(t *testing.T) {
	a, err := newApp(t.Context(), roleGraph, testConfig(t), zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.closeAll)
	if a.pinServer != nil || a.gen != nil || a.feed != nil || a.durable == nil {
		t.Errorf("graph role: pinlater server %v, generator %v, feed %v, outbox client %v; want only the outbox client",
			a.pinServer != nil, a.gen != nil, a.feed != nil, a.durable != nil)
	}
	var got []string
	for name := range a.grpc.GetServiceInfo() {
		if strings.HasPrefix(name, "smartfeed.") {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	// EngagementService: Report writes through this process's outbox, as the graph's writes do.
	want := []string{"smartfeed.board.v1.BoardService", "smartfeed.engagement.v1.EngagementService",
		"smartfeed.graph.v1.GraphService", "smartfeed.ingest.v1.IngestService"}
	if !slices.Equal(got, want) {
		t.Errorf("graph role serves %v, want %v", got, want)
	}
}

// materialized is the user's materialized feed, in order, from the primary.
func (s *split) materialized(user zen.ID) []zen.ID {
	var pins []zen.ID
	for _, r := range s.feedRows(user) {
		if !r.Pending {
			pins = append(pins, r.Pins...)
		}
	}
	return pins
}

// checkOrder: order kept: the fresh pins of each first page (the generator's order) are in the
// materialized feed contiguous and in that order.
func (s *split) checkOrder(user zen.ID) {
	s.t.Helper()
	feed := s.materialized(user)
	index := map[zen.ID]int{}
	for i, p := range feed {
		index[p] = i
	}
	checked := 0
	for _, chunk := range s.chunks[user] {
		first, ok := index[chunk[0]]
		if !ok {
			continue // given back (late) or not yet materialized: the accounting covers it
		}
		checked++
		got := feed[first:min(first+len(chunk), len(feed))]
		if !equalIDs(chunk, got) {
			s.t.Errorf("order kept: %s's chunk %v is in the feed as %v", s.names[user], chunk, got)
		}
	}
	if checked == 0 {
		s.t.Errorf("order: no chunk of %s in the materialized feed", s.names[user])
	}
}

// checkDegraded: with the generator down, a first page is the materialized feed, flagged, with
// no fresh pins. A chunk prepared for the user before (feed.prepare_after) is held back too: this
// feed process checks a prepared chunk against the removals through the generator's process
// (CheckPins), and a check that cannot be made holds the chunk back (fail closed) rather than
// risk a removed pin; the chunk stays prepared, for a later page or the recovery pass.
func (s *split) checkDegraded(user zen.ID) {
	s.t.Helper()
	prepared := func() []zen.ID {
		var out []zen.ID
		for _, r := range s.feedRows(user) {
			if r.Prepared {
				out = append(out, r.Pins...)
			}
		}
		return out
	}
	before := prepared()
	want := s.materialized(user)
	r, err := s.getFeedErr(user, "")
	if err != nil {
		return
	}
	var fresh, got []zen.ID
	for _, it := range r.GetItems() {
		got = append(got, zen.ID(it.GetPinId()))
		if it.GetFresh() {
			fresh = append(fresh, zen.ID(it.GetPinId()))
		}
	}
	switch st := r.GetFreshStatus(); st {
	case feedv1.FreshStatus_FRESH_STATUS_GENERATOR_ERROR, feedv1.FreshStatus_FRESH_STATUS_GENERATOR_TIMEOUT, feedv1.FreshStatus_FRESH_STATUS_RECENT:
	default:
		s.t.Errorf("degrade: generator down: fresh status %v (%s), %d pins prepared", st, r.GetFreshDetail(), len(before))
	}
	if len(fresh) > 0 {
		s.t.Errorf("degrade: generator down: %s's page has fresh pins %v (prepared %v)", s.names[user], fresh, before)
	}
	if !equalIDs(want[:min(len(want), 50)], got) {
		s.t.Errorf("degrade: generator down: %s's page %v is not the materialized feed %v", s.names[user], got, want)
	}
	s.t.Logf("degrade: generator down: %s's page: status %v, %d items, %d prepared pins held back", s.names[user], r.GetFreshStatus(), len(got), len(before))
	if after := prepared(); !equalIDs(before, after) {
		s.t.Errorf("degrade: generator down: %s's prepared chunk %v became %v: held back, it must stay prepared", s.names[user], before, after)
	}
}
