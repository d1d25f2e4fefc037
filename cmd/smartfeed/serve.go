package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/graphsvc/shardadmin"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/gcfloor"
	"github.com/smartfeed/smartfeed/internal/quiet"
	"github.com/smartfeed/smartfeed/internal/slowtrace"
	"github.com/smartfeed/smartfeed/pinlater"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// Roles: which services one process runs.
const (
	roleWorker    = "worker"
	roleGenerator = "generator"
	roleFeed      = "feedsvc"
	roleGraph     = "graph" // the Graph and Board API (the worker role serves it too)
	roleAll       = "all"
)

// livenessService is the health service name the liveness probe asks for: SERVING from start to
// the end of shutdown, while "" (readiness) goes NOT_SERVING as soon as draining starts.
const livenessService = "smartfeed.liveness"

// pinlaterRedis is the Redis connection option of pinlater (an Asynq one).
type pinlaterRedis = asynq.RedisConnOpt

// redisConf is where the configured Redis is and how to log in to it, in pinlater's terms. Every
// Redis client of the process is made from it (redisOpt for the queues, redisClient for the
// join cache and the rate limits), so all of them follow a Sentinel failover alike.
func redisConf(r config.Redis) pinlater.RedisConfig {
	return pinlater.RedisConfig{Mode: r.Mode, Addr: r.Addr, MasterName: r.SentinelMaster,
		SentinelAddrs: config.SplitAddrs(r.SentinelAddrs), ClusterAddrs: config.SplitAddrs(r.ClusterAddrs),
		Username: r.Username, Password: r.Password, SentinelUsername: r.SentinelUsername,
		SentinelPassword: r.SentinelPassword, DB: r.DB}
}

// redisOpt is the connection option of pinlater's queues on the configured Redis.
func redisOpt(r config.Redis) pinlaterRedis { return redisConf(r).ConnOpt() }

// redisClient is a go-redis client of the configured Redis (the join cache, the rate limits).
func redisClient(r config.Redis) goredis.UniversalClient {
	return pinlater.NewRedisClient(redisConf(r))
}

// newServeCmd is the command of a role: it resolves the configuration and serves until the
// context ends.
func newServeCmd(role, short string, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{Use: role, Short: short, Args: cobra.NoArgs}
	resolve := configFlagsFor(cmd.Flags(), config.DefaultConfig(), getenv,
		func(c config.Config) config.Uses { return storesOf(role, c) })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		return serve(cmd.Context(), role, cfg, cmd.ErrOrStderr())
	}
	return cmd
}

// serve runs role with cfg, logging to stderr: it checks the dependencies (or waits for them,
// with --wait-for-deps), builds the app and runs it.
func serve(ctx context.Context, role string, cfg config.Config, stderr io.Writer) error {
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	setMaxProcs(cfg)
	// One structured line: the effective config, secrets masked.
	log.Info("starting", zap.String("role", role), zap.String("version", buildVersion()),
		zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)),
		zap.Any("config", json.RawMessage(cfg.MaskedCompact())))
	if err := awaitDeps(ctx, startDeps(role, cfg), cfg.WaitForDeps, log, depBackoff{}); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while waiting for the dependencies
	}
	reg := newRegistry()
	defer startGCFloor(cfg, log, reg)()
	a, stopTracing, err := newTracedApp(ctx, role, cfg, log, reg)
	if err != nil {
		return err
	}
	defer stopTracing()
	return a.run(ctx)
}

// storesOf names the storage clusters role opens with cfg (what newApp opens): the main store
// for every role but a feed service with a remote generator, the feed's primary and standby
// for the feed service only.
func storesOf(role string, cfg config.Config) config.Uses {
	return config.Uses{
		Main: role != roleFeed || cfg.Generator.Addr == "",
		Feed: role == roleFeed || role == roleAll,
	}
}

// setMaxProcs sets GOMAXPROCS from cfg.MaxProcs (config.Config.MaxProcs): that many, or with 0
// twice the runtime's default unless the GOMAXPROCS environment variable chose it. It returns
// the value in force. It is idempotent: twice the default is computed from the runtime's
// default, not from the value in force, so a process that starts a server more than once (the
// tests do) does not double it again.
func setMaxProcs(cfg config.Config) int {
	switch {
	case cfg.MaxProcs > 0:
		runtime.GOMAXPROCS(cfg.MaxProcs)
	case os.Getenv("GOMAXPROCS") == "":
		runtime.SetDefaultGOMAXPROCS()
		runtime.GOMAXPROCS(2 * runtime.GOMAXPROCS(0))
	}
	return runtime.GOMAXPROCS(0)
}

// startGCFloor keeps the collector's heap goal at cfg.GCHeapFloorMB or more for the process
// (package gcfloor; off at 0, with GOGC=off, or while another runs in the process) and returns
// what stops it.
func startGCFloor(cfg config.Config, log *zap.Logger, reg prometheus.Registerer) (stop func()) {
	if cfg.GCHeapFloorMB == 0 {
		return func() {}
	}
	t, err := gcfloor.Start(gcfloor.Options{Floor: uint64(cfg.GCHeapFloorMB) << 20, Registerer: reg})
	if err != nil {
		log.Info("gc heap floor off", zap.Error(err))
		return func() {}
	}
	log.Info("gc heap floor", zap.Uint64("floor_mib", t.Floor()>>20), zap.Int("gogc", t.Current()))
	return t.Stop
}

// newRegistry returns a fresh registry with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// go_memstats_heap_inuse_bytes rises and falls with each collection (up to the heap floor,
	// gc_heap_floor_mb); go_gc_heap_live_bytes, the heap the last collection found live, is
	// the one that shows a leak.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// app is one process: the services of its role over shared stores, a gRPC listener and an
// admin HTTP listener.
type app struct {
	role string
	cfg  config.Config
	log  *zap.Logger
	reg  *prometheus.Registry
	// slow writes the execution trace around slow public calls (nil when
	// admin.slow_trace_dir is empty).
	slow    *slowtrace.Recorder
	tracing *traceProvider // spans of calls, tasks and stages (nil or disabled: off)
	// quiet counts the public port's unary calls in flight, for the feed's background work to
	// wait for a gap (nil without a feed role, or with feed.background_gap_wait 0).
	quiet *quiet.Gate
	// lanes bound the background work of a process that serves pages: the feed's and, in the
	// same process, the worker's fanout deliveries (nil until sharedLanes makes them).
	lanes *quiet.Lanes

	stores *stores
	// router routes the shard-keyed tables over the stores of --stores (nil without any);
	// shardAdmin serves ShardAdmin over it on the admin gRPC port (nil when that is off).
	router     *zenroute.Store
	shardAdmin *shardadmin.Server
	graph      *zen.Graph
	delLog     *zen.Graph // the graph past the join cache: the feed reads the deletion log through it
	// deleted answers liveness for the generator and the feed from the deletion log's set: a
	// pin is live unless its deletion was logged (one point read of the log per check, not a
	// read of every pin). Nil in a process without the graph.
	deleted *setLiveness
	pools   *zen.Pools
	gen     *generator.Generator
	worker  *worker.Worker
	boards  *graphsvc.BoardService
	feed    *feedsvc.Service
	// inflight is the generator as the feed's crash recovery sees it: in this process or over
	// gRPC (nil without a feed role).
	inflight feedsvc.InFlight
	// objects answers GetFeed's include_objects: this process's graph, or the GraphService of
	// the generator process at --generator-addr (set with the feed's generator).
	objects feedsvc.ObjectLookup
	repl    *feedsvc.Replicator // the feed's change-log replication (Pebble, or HBase without its own)
	canary  *feedsvc.Canary     // the lag probe of HBase's own replication
	// shardWatch keeps the graph's shard map live (file, ZooKeeper); nil with the default map.
	shardWatch *shardwatch.Watcher
	// shardLease is the router's lease on the ZooKeeper shard map (nil without one): the
	// watcher extends it, the router refuses shard-keyed writes while it has lapsed.
	shardLease *zenroute.Lease
	// feedPrimary and feedStandby are the tables feedsvc was built on (writes to the primary
	// reach the standby through repl or HBase); standbyFlush waits for them to agree.
	feedPrimary, feedStandby zen.Table
	standbyFlush             func(context.Context) error
	faults                   [2]*faults.Table // primary, standby of the feed

	pinClient *pinlater.Client
	pinServer *pinlater.Server
	pinAdmin  *pinlater.Admin
	outbox    *zen.Outbox // the worker role's (main store)
	// deployment is this deployment's ID (main store); claimPending: the Redis namespace claim
	// waits for Redis (deployment.Claim.Loop).
	deployment   string
	claimPending bool
	hedger       *hedge.Hedger           // the feed role's
	certs        *certReloader           // the listeners' certificate (nil: plaintext)
	tlsCfg       *tls.Config             // the listeners' TLS config, once built (serverTLS)
	durable      *pinlater.DurableClient // enqueues through outbox

	grpc    *grpc.Server
	health  *health.Server
	grpcLis net.Listener
	// adminGRPC serves FeedAdmin on the admin gRPC listener (nil when off or no feed role).
	adminGRPC  *grpc.Server
	admGRPCLis net.Listener
	admin      *http.Server
	admLis     net.Listener
	ready      atomic.Bool
	readyMu    sync.Mutex
	serving    bool   // lifecycle: between start and the first shutdown step
	depsErr    string // why a dependency is unreachable ("" when all answer)

	// workerWired is set once the worker's handlers are registered (the demo then fans out
	// through pinlater).
	workerWired bool

	// cleanup of what newApp built, in order, when run never starts.
	conns []io.Closer
}

func (a *app) has(roles ...string) bool {
	for _, r := range roles {
		if a.role == r || a.role == roleAll {
			return true
		}
	}
	return false
}

// newApp opens the stores and builds the services of role, and binds the listeners. Nothing
// runs until run.
func newApp(ctx context.Context, role string, cfg config.Config, log *zap.Logger, reg *prometheus.Registry, opts ...appOption) (_ *app, err error) {
	a := newAppState(role, cfg, log, reg, opts)
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()
	redis := redisOpt(cfg.Redis)
	nsOpt := []pinlater.ClientOption{pinlater.WithTracerProvider(a.tracerProvider())}
	if cfg.Redis.Namespace != "" {
		nsOpt = append(nsOpt, pinlater.WithNamespace(cfg.Redis.Namespace))
	}
	if a.has(roleWorker, roleFeed, roleGraph) {
		if a.pinClient, err = pinlater.NewClient(redis, log.Named("pinlater"), reg, nsOpt...); err != nil {
			return nil, fmt.Errorf("pinlater client: %w", err)
		}
		a.conns = append(a.conns, a.pinClient)
		if a.pinAdmin, err = pinlater.NewAdmin(redis, nsOpt...); err != nil {
			return nil, fmt.Errorf("pinlater admin: %w", err)
		}
		a.conns = append(a.conns, a.pinAdmin)
		reg.MustRegister(a.pinAdmin.Collector())
	}
	uses := storesOf(role, cfg)
	if uses.Main {
		if err := a.buildMain(ctx); err != nil {
			return nil, err
		}
	}
	if uses.Feed {
		if err := a.buildFeed(ctx); err != nil {
			return nil, err
		}
	}
	if a.has(roleWorker, roleFeed) {
		if err := a.buildPinlaterServer(redis); err != nil {
			return nil, err
		}
	}
	if a.graph != nil && a.pinAdmin != nil {
		// The roles with the main store claim the Redis namespace for the deployment it
		// belongs to, so two deployments never run each other's tasks.
		if a.deployment, err = a.deploymentID(ctx); err != nil {
			return nil, err
		}
		if a.claimPending, err = a.namespaceClaim().Try(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.buildGRPC(); err != nil {
		return nil, err
	}
	if err := a.buildAdminGRPC(); err != nil {
		return nil, err
	}
	a.registerQueueAdmin() // console.go
	if a.grpcLis, err = listen(cfg.GRPC.Addr, "grpc", "grpc-addr"); err != nil {
		return nil, err
	}
	a.conns = append(a.conns, a.grpcLis)
	if cfg.Admin.Addr != "" {
		a.buildAdmin()
		if a.admLis, err = listen(cfg.Admin.Addr, "admin (metrics, console)", "admin-addr"); err != nil {
			return nil, err
		}
		a.conns = append(a.conns, a.admLis)
	}
	return a, nil
}

// buildMain opens the main store (routed by the shard map with extra stores) and builds what
// lives on it: the pools, the graph, the shard watch, and the worker and generator roles.
func (a *app) buildMain(ctx context.Context) error {
	main, err := a.stores.get(ctx, storeMain)
	if err != nil {
		return err
	}
	// With extra stores (--stores) the shard-keyed tables are routed by the shard map.
	var zstore zen.Store = main
	if a.router, err = a.buildRouter(ctx, main); err != nil {
		return err
	}
	if a.router != nil {
		zstore = a.router
	}
	poolsT, err := a.shardTable(ctx, tablePools)
	if err != nil {
		return err
	}
	a.pools = zen.NewPools(poolsT, nil)
	if err := a.buildGraph(ctx, zstore); err != nil {
		return err
	}
	if err := a.buildShardWatch(ctx); err != nil {
		return err
	}
	// The read path asks whether every candidate pin is live on every chunk; the answers
	// are kept a moment. Deletes through this process are seen at once, those of a graph
	// service in another process within liveCacheTTL.
	a.graph.CacheLiveness(liveCacheTTL, liveCacheEntries)
	if a.has(roleWorker, roleGraph) {
		if err := a.buildWorker(ctx); err != nil {
			return err
		}
	}
	if a.role != roleGraph {
		if err := a.buildGenerator(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) buildPinlaterServer(redis pinlaterRedis) error {
	queues := map[string]int{}
	for q, w := range pinlater.DefaultQueueWeights() {
		critical := q == pinlater.QueueCritical
		// The critical queue (materialize) is run by the process that owns the feed service;
		// the other queues by the worker.
		if a.role == roleAll || (a.role == roleFeed && critical) || (a.role == roleWorker && !critical) {
			queues[q] = w
		}
	}
	var err error
	a.pinServer, err = pinlater.NewServer(pinlater.Config{Redis: redis, Namespace: a.cfg.Redis.Namespace,
		Queues: queues, StrictPriority: a.cfg.Worker.StrictPriority, Concurrency: a.cfg.Worker.Concurrency,
		Dequeuers: a.cfg.Worker.Dequeuers, ShutdownTimeout: a.cfg.Worker.ShutdownTimeout.D(), ReclaimAfter: a.cfg.Worker.ReclaimAfter.D(),
		Outbox: a.outboxStore(), TracerProvider: a.tracerProvider()}, a.log.Named("pinlater"), a.reg)
	if err != nil {
		return fmt.Errorf("pinlater server: %w", err)
	}
	if a.feed != nil {
		feedsvc.RegisterHandlers(a.pinServer, a.feed)
	}
	if a.has(roleWorker) {
		if err := a.registerWorker(); err != nil {
			return err
		}
	}
	return nil
}

// outboxStore is the outbox the pinlater server clears finished tasks from (nil without one: a
// nil *zen.Outbox must not become a non-nil interface).
func (a *app) outboxStore() pinlater.OutboxStore {
	if a.outbox == nil {
		return nil
	}
	return a.outbox
}

// streamWorkers is how many goroutines the public gRPC server keeps to run calls on: 8 per
// GOMAXPROCS, as calls wait on the stores more than they compute.
func streamWorkers() uint32 { return uint32(8 * runtime.GOMAXPROCS(0)) }

func (a *app) buildGRPC() error {
	units, streams, err := a.publicInterceptors()
	if err != nil {
		return err
	}
	tlsCfg, err := a.serverTLS()
	if err != nil {
		return err
	}
	if dir := a.cfg.Admin.SlowTraceDir; dir != "" {
		// Outermost: a slow call is timed whole, its authentication included.
		if a.slow, err = slowtrace.Start(slowtrace.Options{Dir: dir, Over: a.cfg.Admin.SlowTraceOver.D(),
			Logger: a.log.Named("slowtrace"), Registerer: a.reg}); err != nil {
			return err
		}
		units = append([]grpc.UnaryServerInterceptor{a.slow.UnaryInterceptor()}, units...)
	}
	// Authentication first: nothing of an unauthenticated call is looked at.
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(append(units, boundUnary)...),
		grpc.ChainStreamInterceptor(append(streams, boundStream)...),
		// Calls run on reused goroutines, whose stacks have already grown to what a GetFeed
		// needs (a Pebble scan is deep), instead of a new goroutine per call that grows and
		// copies its stack each time: runtime.newstack was 10.7% of the bench's CPU in its
		// read-rate phase with a goroutine per call. A call that finds no idle worker gets
		// its own goroutine.
		grpc.NumStreamWorkers(streamWorkers())}
	opts = append(opts, a.statsHandlers()...)
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	a.grpc = grpc.NewServer(opts...)
	a.health = health.NewServer()
	healthpb.RegisterHealthServer(a.grpc, a.health)
	reflection.Register(a.grpc)
	if a.gen != nil && a.has(roleGenerator) {
		generatorv1.RegisterGeneratorServiceServer(a.grpc, generator.NewServer(a.gen))
		if !a.has(roleWorker, roleGraph) {
			// The graph's reads, for the include_objects of the feed processes that call this
			// one; its writes are the graph role's.
			graphsvc.NewReadOnly(a.graph, a.log.Named("graphsvc")).Register(a.grpc)
		}
	}
	if a.feed != nil {
		// FeedAdmin is on the admin port only (buildAdminGRPC).
		if err := a.registerFeed(); err != nil { // wire_impressions.go
			return err
		}
	}
	if a.has(roleWorker, roleGraph) {
		a.registerGraphService()
	}
	for name := range a.grpc.GetServiceInfo() {
		a.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	a.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	a.health.SetServingStatus(livenessService, healthpb.HealthCheckResponse_SERVING)
	return nil
}

func (a *app) faultsIfEnabled(i int) *faults.Table {
	if !a.cfg.Feed.Faults {
		return nil
	}
	return a.faults[i]
}

func (a *app) buildAdmin() {
	mux := http.NewServeMux()
	// A collector that fails leaves out its own series, never the whole scrape: the moment a
	// dependency is down is the moment the other series are needed.
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		Registry: a.reg, ErrorHandling: promhttp.ContinueOnError, ErrorLog: scrapeErrorLog{a.log}, EnableOpenMetrics: true,
	}))
	if a.cfg.Admin.Pprof {
		// Opt-in, and only on the admin listener (loopback by default). cmdline is left out:
		// it would show the process's arguments to whoever reaches the port.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	a.mountConsole(mux) // the web console, /console/ (console.go)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	a.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// The certificate was loaded with the gRPC listeners (serverTLS); an error there stopped
	// newApp already.
	if tlsCfg, err := a.serverTLS(); err == nil && tlsCfg != nil {
		a.admin.TLSConfig = tlsCfg
	}
}

// listen binds addr for one of the process's listeners (what), and when it cannot, says which
// flag and environment variable set the address, so the message names its fix.
func listen(addr, what, flag string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err == nil {
		return lis, nil
	}
	hint := "pass another address"
	if errors.Is(err, syscall.EADDRINUSE) {
		hint = "another process listens there: stop it, or pass another address"
	}
	return nil, fmt.Errorf("%s listener: %w; %s with --%s (or %s)", what, err, hint, flag, config.EnvName(flag))
}

// grpcAddr is the bound gRPC address (useful with port 0).
func (a *app) grpcAddr() string { return a.grpcLis.Addr().String() }

// adminAddr is the bound admin address, or "" when disabled.
func (a *app) adminAddr() string {
	if a.admLis == nil {
		return ""
	}
	return a.admLis.Addr().String()
}

// adminGRPCAddr is the admin gRPC listener's address ("" when off).
func (a *app) adminGRPCAddr() string {
	if a.admGRPCLis == nil {
		return ""
	}
	return a.admGRPCLis.Addr().String()
}

// scrapeErrorLog logs, at warn level, what a collector reports when it fails in a scrape.
type scrapeErrorLog struct{ log *zap.Logger }

func (l scrapeErrorLog) Println(v ...any) {
	l.log.Warn("metrics scrape: a collector failed; its series are left out", zap.String("error", fmt.Sprint(v...)))
}
