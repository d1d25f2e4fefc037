package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/bench/loadgen"
	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/worker/baseline"
	"github.com/smartfeed/smartfeed/zen"
)

// benchFlags are the bench command's own flags.
type benchFlags struct {
	users                                                                           []int // the profile's sizes, replaced (empty: the profile's)
	profile, out, docs, cpuprofile, cpuPhase, trace, memprofile, hbasePE, hbaseScan string
	// loadgen: run the read-rate phase with `smartfeed loadgen` in a process of its own (with
	// loadgenWindow windows); off, the in-process search of the earlier benches runs instead.
	loadgen       bool
	loadgenWindow time.Duration
}

// newBenchCmd is "smartfeed bench": the end-to-end benchmark (bench.Run) on an in-process
// `all` over the real Redis and store, with fsync on; it writes results.json, report.md and
// plots.
func newBenchCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "run the end-to-end benchmark with its peers; writes results.json, report.md and plots",
		Long: `Drives the real pipeline (pinlater → worker → pools; GetFeed over loopback gRPC) with a social-network
workload and measures the Redis sorted-set peer and the store's raw writes in the same run.
Takes the servers' flags too (--storage pebble|hbase, --redis-addr, ...).`,
		Args: cobra.NoArgs,
	}
	var bf benchFlags
	fs := cmd.Flags()
	fs.StringVar(&bf.profile, "profile", "quick", "quick (100,000 users, about 12 minutes here with Pebble; what make bench runs), full (1,000,000 users, followers capped at 1,000) or learn (serve, engage, train by rounds on simulated users; no server)")
	fs.StringVar(&bf.out, "out", filepath.Join("bench", "out"), "directory for results.json, report.md and the plots")
	fs.StringVar(&bf.docs, "docs", "", "also write the report as DIR/benchmarks.md with its plots under DIR/bench/")
	fs.StringVar(&bf.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run (pprof format) to FILE")
	fs.StringVar(&bf.cpuPhase, "cpuprofile-phase", "", "with --cpuprofile or --trace: profile only this phase ("+strings.Join(bench.Phases, ", ")+")")
	fs.StringVar(&bf.memprofile, "memprofile", "", "with --cpuprofile-phase: write the allocation profile at the phase's start to FILE.base and at its end to FILE (go tool pprof -sample_index alloc_space -base FILE.base FILE)")
	fs.StringVar(&bf.trace, "trace", "", "write an execution trace (go tool trace: scheduler latency, GC) of the phase --cpuprofile-phase names to FILE")
	fs.StringVar(&bf.hbasePE, "hbase-pe", filepath.Join("scripts", "hbase-pe.sh"), "with --storage hbase: the script that runs HBase's own Java client "+
		"(PerformanceEvaluation randomRead) on the pools' HBase, to compare zen's Get and Top(50) with it in the same run (empty: skip)")
	fs.StringVar(&bf.hbaseScan, "hbase-scan", filepath.Join("scripts", "hbase-scan.sh"), "with --storage hbase: the script that has HBase's own Java client "+
		"make GetFeed's reads of the feed (a Scan of each serving-phase reader's feed rows) on the primary's HBase with the fanout running, to compare GetFeed with it (empty: skip)")
	fs.IntSliceVar(&bf.users, "users", nil, "the graph sizes instead of the profile's: the first is the main graph, the others the scale curve's (e.g. 2000,1000 for a smoke run)")
	noEnv(fs, "users")
	fs.BoolVar(&bf.loadgen, "loadgen", true, "measure the read rates with the load generator in a process of its own (smartfeed loadgen); false: in process, as before")
	fs.DurationVar(&bf.loadgenWindow, "loadgen-window", 20*time.Second, "each load-generator window's length")
	base := config.DefaultConfig()
	// Admin serves /metrics to the loadgen's idle waits; the peers log nothing per page, so no impressions.
	base.GRPC.Addr, base.Admin.Addr, base.Admin.GRPCAddr, base.Feed.Faults = "127.0.0.1:0", "127.0.0.1:0", "", true
	base.Engagement.ServedImpressions = false
	resolve := configFlags(fs, base, getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		return runBenchProfile(cmd.Context(), cfg, bf, cmd.OutOrStdout())
	}
	return cmd
}

// benchOptions are the options of bf's profile, with bf's graph sizes, after checking that
// bf's profiling flags go together.
func benchOptions(bf benchFlags) (bench.Options, error) {
	var opts bench.Options
	switch bf.profile {
	case "quick":
		opts = bench.Quick()
	case "full":
		opts = bench.Full()
	default:
		return bench.Options{}, fmt.Errorf("bench: --profile %q: want quick, full or learn", bf.profile)
	}
	if len(bf.users) > 0 {
		if slices.Min(bf.users) < 2 {
			return bench.Options{}, fmt.Errorf("bench: --users %v: every size at least 2", bf.users)
		}
		opts.Users = bf.users
	}
	if bf.cpuPhase != "" && (bf.cpuprofile == "" && bf.trace == "" && bf.memprofile == "" || !slices.Contains(bench.Phases, bf.cpuPhase)) {
		return bench.Options{}, fmt.Errorf("bench: --cpuprofile-phase %q: want --cpuprofile, --memprofile or --trace and one of %s", bf.cpuPhase, strings.Join(bench.Phases, ", "))
	}
	if bf.memprofile != "" && bf.cpuPhase == "" {
		return bench.Options{}, errors.New("bench: --memprofile wants --cpuprofile-phase")
	}
	if bf.trace != "" && bf.cpuPhase == "" {
		return bench.Options{}, errors.New("bench: --trace wants --cpuprofile-phase: a trace of the whole run is too large to read")
	}
	return opts, nil
}

// runBench runs the benchmark with cfg and bf, printing progress and results to stdout.
func runBench(ctx context.Context, cfg config.Config, bf benchFlags, stdout io.Writer) error {
	opts, err := benchOptions(bf)
	if err != nil {
		return err
	}
	opts.Storage = cfg.Storage.Backend
	setMaxProcs(cfg) // before machine(), which names it
	opts.MachineString = machine()
	opts.Commit = commit()
	if err := os.MkdirAll(bf.out, 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(bf.out, "smartfeed.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cfg.Log.Level = "warn"
	if blog, err := newLogger(cfg.Log, logFile); err == nil {
		// One tuner for the process, whichever of the bench's systems runs.
		defer startGCFloor(cfg, blog, nil)()
	}
	newSys := func(ctx context.Context, tag string) (*benchSystem, func(), error) {
		c := cfg
		c.Redis.Namespace = fmt.Sprintf("bench%s%d", tag, time.Now().UnixNano())
		var tmp string
		if c.Storage.Backend == config.BackendPebble {
			if tmp, err = os.MkdirTemp("", "smartfeed-bench-"); err != nil {
				return nil, nil, err
			}
			c.Storage.DataDir = tmp
		} else {
			c.Storage.HBase.TablePrefix = c.Redis.Namespace + "_"
		}
		return startBenchSystem(ctx, c, logFile, tmp)
	}
	sys, closeSys, err := newSys(ctx, "")
	if err != nil {
		return err
	}
	defer closeSys()
	opts.Scale = func(ctx context.Context, users int) (bench.System, func(), error) {
		s, c, err := newSys(ctx, fmt.Sprint(users))
		return s, c, err
	}
	// HBase's own Java client right after the serving phase, its fanout still writing: GetFeed's
	// feed scans (FeedScan), then PE randomRead (below, PE once more after the run with nothing
	// else running).
	var peFanout *bench.PEResult
	var scanner *feedScanner
	defer func() {
		if scanner != nil {
			scanner.Close()
		}
	}()
	withPE := cfg.Storage.Backend == config.BackendHBase && bf.hbasePE != ""
	withScan := cfg.Storage.Backend == config.BackendHBase && bf.hbaseScan != ""
	if withScan {
		opts.Beside = func(ctx context.Context, readers []uint64) error {
			sc, err := newFeedScanner(ctx, sys, cfg.Storage.HBase, bf.hbaseScan, readers, opts.PageSize, logFile)
			if err != nil {
				return fmt.Errorf("GetFeed's feed scans: %w", err)
			}
			if err := sc.loaded(ctx, opts); err != nil {
				sc.Close()
				return fmt.Errorf("GetFeed's feed scans: %w", err)
			}
			scanner = sc
			j := sc.fs.Java.Summary()
			fmt.Fprintf(stdout, "hbase java beside GetFeed: GetFeed's feed scans by the Java client at %.0f/s p50 %.3f p99 %.3f ms (%d failed)\n",
				sc.fs.Java.Offered, j.P50, j.P99, sc.fs.Java.Failed)
			return nil
		}
	}
	if withPE || withScan {
		opts.UnderFanout = func(ctx context.Context, readers []uint64) error {
			var errs []error
			if scanner != nil {
				if err := scanner.serial(ctx); err != nil {
					errs = append(errs, fmt.Errorf("GetFeed's feed scans one at a time: %w", err))
				} else {
					js, z := scanner.fs.JavaSerial.Summary(), scanner.fs.Zen
					fmt.Fprintf(stdout, "hbase java under fanout: GetFeed's feed scans one at a time: Java p50 %.3f p99 %.3f ms, zen p50 %.3f p99 %.3f ms\n",
						js.P50, js.P99, z.P50, z.P99)
				}
			}
			if withPE {
				res, _, err := runPE(ctx, cfg.Storage.HBase, bf.hbasePE, logFile)
				if err != nil {
					errs = append(errs, fmt.Errorf("HBase's Java client: %w", err))
				} else {
					peFanout = &res
					fmt.Fprintf(stdout, "hbase java under fanout: PE randomRead p50 %.3f p99 %.3f ms (%d)\n", res.P50Us/1000, res.P99Us/1000, res.N)
				}
			}
			return errors.Join(errs...)
		}
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: cfg.Redis.Addr, Password: cfg.Redis.Password, DB: cfg.Redis.DB})
	defer rdb.Close()
	zsPrefix := fmt.Sprintf("benchzset%d:", time.Now().UnixNano())
	zs, err := baseline.New(rdb, zsPrefix, 800, 100)
	if err != nil {
		return err
	}
	peers := &benchPeerSetup{opts: &opts, sys: sys, rdb: rdb, prefix: zsPrefix, out: bf.out, stdout: stdout}
	defer peers.close()
	if bf.loadgen {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: the load generator's binary: %w", err)
		}
		o := loadgen.DefaultOptions()
		o.GRPCAddr, o.RedisAddr, o.RedisPass, o.RedisDB, o.RedisPrefix = sys.a.grpcAddr(), cfg.Redis.Addr, cfg.Redis.Password, cfg.Redis.DB, zsPrefix
		o.MetricsURL, o.Window, o.PageSize = "http://"+sys.a.adminAddr()+"/metrics", bf.loadgenWindow, opts.PageSize
		if len(opts.LoadGenRates) > 0 {
			o.Rates = opts.LoadGenRates
		}
		if opts.LoadGenIdleMax > 0 {
			o.IdleMax = opts.LoadGenIdleMax
		}
		opts.LoadGen = func(ctx context.Context, users []uint64) (*loadgen.Report, error) {
			return loadgen.Exec(ctx, exe, o, users, bf.out, stdout)
		}
		peers.exe, peers.lg = exe, o
	}
	peers.setup(ctx, cfg.Worker.Concurrency)
	// The peer's sets (800 pins for each of hundreds of users) would otherwise stay in a Redis
	// that outlives the run: 106 runs had left 21 million members (2.2 GB) in run/redis.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if n, err := zs.ClearAll(cctx); err != nil {
			fmt.Fprintf(stdout, "smartfeed bench: removing the Redis peer's sets: %v (%d removed)\n", err, n)
		}
	}()
	fmt.Fprintf(stdout, "smartfeed bench: profile %s, storage %s (fsync on), Redis %s; logs in %s\n",
		opts.Profile, opts.Storage, cfg.Redis.Addr, logFile.Name())
	tty := isTerminal(stdout)
	last := time.Time{}
	progress := func(phase string, done, total int) {
		if tty {
			fmt.Fprintf(stdout, "\r\033[K%s %s %d/%d", phase, bar(int64(done), int64(total), 30), done, total)
			if done >= total {
				fmt.Fprintln(stdout)
			}
		} else if time.Since(last) > 5*time.Second || done >= total {
			fmt.Fprintf(stdout, "%s: %d/%d\n", phase, done, total)
			last = time.Now()
		}
	}
	if bf.trace != "" {
		f, err := os.Create(bf.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		defer trace.Stop() // a phase a failed run left open
		opts.Phase = thenPhase(opts.Phase, onlyPhase(bf.cpuPhase, "trace", stdout, func() error { return trace.Start(f) }, trace.Stop))
	}
	if bf.memprofile != "" {
		write := func(path string) error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		}
		opts.Phase = thenPhase(opts.Phase, onlyPhase(bf.cpuPhase, "allocation profile", stdout,
			func() error { return write(bf.memprofile + ".base") }, func() { _ = write(bf.memprofile) }))
	}
	if bf.cpuprofile != "" {
		f, err := os.Create(bf.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile() // a phase a failed run left open
		if bf.cpuPhase == "" {
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
		} else {
			opts.Phase = thenPhase(opts.Phase, onlyPhase(bf.cpuPhase, "cpu profile", stdout, func() error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile))
		}
	}
	res, err := bench.Run(ctx, sys, zs, opts, stdout, progress)
	if err != nil {
		return err
	}
	main, err := sys.a.stores.get(ctx, storeMain)
	if err != nil {
		return err
	}
	if res.GraphReads, err = bench.GraphReads(ctx, main, rdb, fmt.Sprintf("benchgr%d", time.Now().UnixNano())); err != nil {
		return err
	}
	for _, r := range res.GraphReads {
		fmt.Fprintf(stdout, "graph reads: %s cache %v: p50 %.3f ms, p99 %.3f ms, %.2f store calls a read\n",
			r.Read, r.Cache, r.Latency.P50, r.Latency.P99, r.StoreCallsPer)
	}
	if withPE {
		h, err := benchHBaseJava(ctx, sys, cfg.Storage.HBase, bf.hbasePE, logFile)
		if err != nil {
			res.Notes = append(res.Notes, "zen against HBase's Java client: "+err.Error())
			fmt.Fprintf(stdout, "hbase java: not measured: %v\n", err)
		} else {
			if peFanout != nil {
				sum := peFanout.Summary()
				h.PEUnderFanout, h.JavaUnderFanout = peFanout, &sum
			}
			if scanner != nil {
				h.FeedScans = scanner.fs
			}
			res.SetHBaseJava(h)
			fmt.Fprintf(stdout, "hbase java: zen Get p50 %.3f p99 %.3f ms (%d), zen Top(50) p50 %.3f p99 %.3f ms (%d); "+
				"Java client (PE randomRead) p50 %.3f p99 %.3f ms (%d); zen Get after PE p50 %.3f p99 %.3f ms\n", h.ZenGet.P50, h.ZenGet.P99, h.ZenGet.N,
				h.ZenTop50.P50, h.ZenTop50.P99, h.ZenTop50.N, h.JavaRandomRead.P50, h.JavaRandomRead.P99, h.JavaRandomRead.N,
				h.ZenGetAfter.P50, h.ZenGetAfter.P99)
		}
	}
	if err := bench.Write(bf.out, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s\nreport:  %s\nratios:", filepath.Join(bf.out, "results.json"), filepath.Join(bf.out, "report.md"))
	for _, k := range bench.RatioKeys {
		fmt.Fprintf(stdout, " %s=%.3f", k, res.Ratios[k])
	}
	var extra []string
	for k := range res.Ratios {
		if !slices.Contains(bench.RatioKeys, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		fmt.Fprintf(stdout, " %s=%.3f", k, res.Ratios[k])
	}
	fmt.Fprintln(stdout)
	if len(res.GetFeedRateSteps) > 0 {
		fmt.Fprintf(stdout, "read rates: %s\n", res.RateStepsSummary())
	}
	if bf.docs != "" {
		if err := writeBenchDocs(bf.docs, bf.out, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "docs: %s\n", filepath.Join(bf.docs, "benchmarks.md"))
	}
	return nil
}

// benchHBaseJavaReads is how many zen Gets (and a quarter as many Top(50)s) are timed against
// PE's randomRead, each after benchHBaseJavaWarmup calls not timed.
const benchHBaseJavaReads, benchHBaseJavaWarmup = 9000, 1000

// benchHBaseJava times zen Gets of the bench's users and boards and Top(50) of their following
// pools, one at a time, then runs script (scripts/hbase-pe.sh: HBase's own Java client,
// PerformanceEvaluation randomRead) on the HBase holding them.
func benchHBaseJava(ctx context.Context, sys *benchSystem, h config.HBase, script string, logw io.Writer) (*bench.HBaseJava, error) {
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("--hbase-pe: %w", err)
	}
	zk := strings.Split(h.PoolsZK, ",")[0]
	sys.mu.Lock()
	var users, objs []zen.ID
	for u, b := range sys.boards {
		users = append(users, zen.ID(u))
		objs = append(objs, zen.ID(u), b)
	}
	sys.mu.Unlock()
	if len(users) == 0 {
		return nil, errors.New("no users to read")
	}
	slices.Sort(users)
	slices.Sort(objs)
	// A graph straight on the main store: the service's may sit behind the join cache.
	main, err := sys.a.stores.get(ctx, storeMain)
	if err != nil {
		return nil, err
	}
	g, err := zen.NewGraph(ctx, main, nil, nil)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(17, 1))
	get := func(ctx context.Context, _ int) error {
		_, err := g.Get(ctx, objs[r.IntN(len(objs))])
		return err
	}
	top := func(ctx context.Context, _ int) error {
		_, err := sys.a.pools.Top(ctx, users[r.IntN(len(users))], zen.SourceFollowing, 50)
		return err
	}
	pe := func(ctx context.Context) (bench.PEResult, string, error) { return runPE(ctx, h, script, logw) }
	return bench.HBaseJavaReads(ctx, zk, benchHBaseJavaReads, benchHBaseJavaWarmup, get, top, pe)
}

// runPE runs script (scripts/hbase-pe.sh: PerformanceEvaluation randomRead, HBase's own Java
// client) against the pools' HBase, on a table of its own, and returns its result and command.
func runPE(ctx context.Context, h config.HBase, script string, logw io.Writer) (bench.PEResult, string, error) {
	zk := strings.Split(h.PoolsZK, ",")[0]
	args := []string{"--zk", zk, "--rows", fmt.Sprint(benchHBaseJavaReads + benchHBaseJavaWarmup), "--warmup", fmt.Sprint(benchHBaseJavaWarmup),
		"--table", fmt.Sprintf("benchpe%d", time.Now().UnixNano())}
	return runJavaScript(ctx, h, script, args, logw)
}

// runJavaScript runs script (one of HBase's own Java client's: scripts/hbase-pe.sh,
// scripts/hbase-scan.sh) with args and the HBase's znode, its log lines to logw, and returns the
// JSON line it printed and its command line.
func runJavaScript(ctx context.Context, h config.HBase, script string, args []string, logw io.Writer) (bench.PEResult, string, error) {
	if h.ZookeeperRoot != "" {
		args = append(args, "--znode", h.ZookeeperRoot)
	}
	cmdline := script + " " + strings.Join(args, " ")
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Stderr = logw
	out, err := cmd.Output()
	if err != nil {
		return bench.PEResult{}, cmdline, fmt.Errorf("%s: %w (its log lines are in smartfeed.log)", cmdline, err)
	}
	res, err := bench.ParsePE(out)
	if err != nil {
		return bench.PEResult{}, cmdline, fmt.Errorf("%s: %w", cmdline, err)
	}
	return res, cmdline, nil
}

// writeBenchDocs writes docs/benchmarks.md from a run's report, keeping its HBase section, and copies its plots.
func writeBenchDocs(dir, out string, res *bench.Results) error {
	pd := filepath.Join(dir, "bench")
	if err := os.MkdirAll(pd, 0o755); err != nil {
		return err
	}
	for _, f := range bench.PlotFiles() {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pd, f), b, 0o644); err != nil {
			return err
		}
	}
	md := "<!-- Generated by `smartfeed bench --docs docs` (make bench-docs); do not edit by hand above the HBase section. -->\n\n" + bench.Markdown(res, "bench") + keptHBaseDocs(dir)
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(md), 0o644)
}

func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS %d, %s (%s)", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), host)
}

// commit names the commit the running binary was built from (Go's VCS stamp: `go build` in a
// checkout), with "-dirty" when the tree had changes; a binary without the stamp falls back to
// the checkout in the working directory, as before, and then to "unknown". A results.json of a
// binary built elsewhere used to name the working directory's commit.
func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if c := stampedCommit(bi.Settings); c != "" {
			return c
		}
	}
	b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// stampedCommit is the short VCS revision in a binary's build settings ("" without one).
func stampedCommit(settings []debug.BuildSetting) string {
	var rev string
	dirty := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	rev = rev[:min(len(rev), 7)]
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// benchSystem is bench.System over an in-process `all`.
type benchSystem struct {
	a      *app
	feed   feedv1.FeedServiceClient
	health healthpb.HealthClient // on feed's connection: bench.Pinger
	pub    *worker.Publisher
	// lazyPins: a pin's event goes through an outbox row in the graph's log, written durably
	// after the pin's writes, so those wait for no fsync (as graphsvc.WithEventTable does for
	// CreatePin, and the demo's makers).
	lazyPins bool
	mu       sync.Mutex
	boards   map[uint64]zen.ID
	raw      int
	// arrivals are the watched (user, pin) pairs: arrivalKey → *atomic.Int64, the Unix time
	// in ns the worker wrote the pin to the user's pools (0: not yet).
	arrivals sync.Map
	made     sync.Map // pin → creation ms, of the pins MakePin made and PublishPin has not published
}

var (
	_ bench.Replication     = (*benchSystem)(nil)
	_ bench.Pinger          = (*benchSystem)(nil)
	_ bench.FreshCounter    = (*benchSystem)(nil)
	_ bench.PreparedCounter = (*benchSystem)(nil)
)

// ReplicationLags implements bench.Replication: the canary's measurements with HBase's own
// replication, the change-log replicator's otherwise.
func (s *benchSystem) ReplicationLags(from uint64) (bench.ReplicationInfo, []time.Duration, uint64) {
	switch {
	case s.a.canary != nil:
		lags, next, _ := s.a.canary.Lags().Since(from)
		return bench.ReplicationInfo{Mechanism: "hbase", Measured: "a canary row written on the primary every 1 s " +
			"and polled on the standby every 10 ms (feedsvc.Canary), from the write to its first sight on the standby"}, lags, next
	case s.a.repl != nil:
		lags, next, _ := s.a.repl.Lags().Since(from)
		return bench.ReplicationInfo{Mechanism: "app", Measured: "one change-log entry (a feed write), from the write " +
			"on the primary to its application on the standby (feedsvc.Replicator)"}, lags, next
	}
	return bench.ReplicationInfo{Mechanism: "none"}, nil, 0
}

func (s *benchSystem) CreateUsers(ctx context.Context, n int) ([]uint64, error) {
	ids := make([]uint64, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o, err := s.a.graph.Create(ctx, zen.TypeUser, 0, map[string]any{"username": fmt.Sprintf("bench%d", i)})
			if err == nil {
				var b zen.Object
				b, err = s.a.graph.Create(ctx, zen.TypeBoard, o.ID, map[string]any{"name": "pins", "owner": o.ID.String()})
				if err == nil {
					err = addBoth(ctx, s.a.graph, zen.Edge{From: o.ID, Type: zen.EdgeUserBoards, To: b.ID})
				}
				mu.Lock()
				s.mu.Lock()
				s.boards[uint64(o.ID)] = b.ID
				s.mu.Unlock()
				ids[i] = uint64(o.ID)
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids, firstErr
}

func (s *benchSystem) Follow(ctx context.Context, follower, followee uint64) error {
	return addBoth(ctx, s.a.graph, zen.Edge{From: zen.ID(follower), Type: zen.EdgeFollowsUser, To: zen.ID(followee)})
}

func (s *benchSystem) Pin(ctx context.Context, author uint64, watch []uint64) (uint64, error) {
	pin, board, created, err := s.makePin(ctx, author)
	if err != nil {
		return 0, err
	}
	for _, u := range watch {
		s.arrivals.Store(arrivalKey{u, uint64(pin)}, new(atomic.Int64))
	}
	if _, err := s.pub.PinSaved(ctx, worker.PinSaved{Pin: pin, User: zen.ID(author), Board: board, CreatedMs: created}); err != nil {
		return 0, err
	}
	return uint64(pin), nil
}

// makePin creates a pin by author on the author's board: the object and its edges (lazily on
// Pebble, where the synced outbox row of the pin's event, written after them to the same log,
// makes them durable). It returns the pin, its board and its creation time in Unix
// milliseconds.
func (s *benchSystem) makePin(ctx context.Context, author uint64) (zen.ID, zen.ID, int64, error) {
	s.mu.Lock()
	board := s.boards[author]
	s.mu.Unlock()
	now := time.Now()
	wctx := ctx
	if s.lazyPins {
		wctx = zen.Lazily(ctx)
	}
	p, err := s.a.graph.Create(wctx, zen.TypePin, board, map[string]any{"author": zen.ID(author).String(), "board": board.String(), "title": "bench"})
	if err != nil {
		return 0, 0, 0, err
	}
	for _, e := range []zen.Edge{{From: zen.ID(author), Type: zen.EdgeUserPins, To: p.ID}, {From: board, Type: zen.EdgeBoardPins, To: p.ID}} {
		if err := addBoth(wctx, s.a.graph, e); err != nil {
			return 0, 0, 0, err
		}
	}
	return p.ID, board, now.UnixMilli(), nil
}

// MakePin implements bench.Prepinner: the pin as Pin makes it, its event not published.
func (s *benchSystem) MakePin(ctx context.Context, author uint64) (uint64, error) {
	pin, _, created, err := s.makePin(ctx, author)
	if err != nil {
		return 0, err
	}
	s.made.Store(uint64(pin), created)
	return uint64(pin), nil
}

// PublishPin implements bench.Prepinner: the event of a pin MakePin made, as Pin publishes it.
func (s *benchSystem) PublishPin(ctx context.Context, author, pin uint64) error {
	v, ok := s.made.LoadAndDelete(pin)
	if !ok {
		return fmt.Errorf("pin %d was not made by MakePin", pin)
	}
	s.mu.Lock()
	board := s.boards[author]
	s.mu.Unlock()
	_, err := s.pub.PinSaved(ctx, worker.PinSaved{Pin: zen.ID(pin), User: zen.ID(author), Board: board, CreatedMs: v.(int64)})
	return err
}

// Arrived reports the worker's own time of writing pin to user's pools (benchSystem.inserted,
// the worker's insert hook): exact, and free for the system under test. Reading the pools for
// it instead (a scan per poll per sampled follower) once took two thirds of the run's CPU.
func (s *benchSystem) Arrived(_ context.Context, user, pin uint64) (time.Time, bool, error) {
	k := arrivalKey{user, pin}
	v, ok := s.arrivals.Load(k)
	if !ok {
		return time.Time{}, false, fmt.Errorf("pin %d for user %d: not watched", pin, user)
	}
	at := v.(*atomic.Int64).Load()
	if at == 0 {
		return time.Time{}, false, nil
	}
	s.arrivals.Delete(k)
	return time.Unix(0, at), true, nil
}

// inserted is the worker's insert hook: it stamps the watched (user, pin) pairs of es.
func (s *benchSystem) inserted(es []zen.PoolEntry) {
	now := time.Now().UnixNano()
	for _, e := range es {
		if v, ok := s.arrivals.Load(arrivalKey{uint64(e.User), uint64(e.Pin)}); ok {
			v.(*atomic.Int64).CompareAndSwap(0, now)
		}
	}
}

// arrivalKey is a watched (user, pin) pair.
type arrivalKey struct{ user, pin uint64 }

func (s *benchSystem) PoolInserts() float64 {
	return float64(gatherSum(s.a.reg, "smartfeed_worker_pool_inserts_total"))
}

func (s *benchSystem) FanoutPending(ctx context.Context) (int, error) {
	n := 0
	for _, q := range []string{pinlater.QueueFanout, pinlater.QueueBulk, pinlater.QueueCritical, pinlater.QueueDefault} {
		st, err := s.a.pinAdmin.Queue(ctx, q)
		if err != nil {
			return 0, err
		}
		n += st.Pending + st.Active + st.Scheduled + st.Retry
	}
	return n, nil
}

func (s *benchSystem) GetFeed(ctx context.Context, user uint64, n int) error {
	_, err := s.feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: user, PageSize: int32(n)})
	return err
}

// Ping is the gRPC health check of the whole server on GetFeed's connection (bench.Pinger).
func (s *benchSystem) Ping(ctx context.Context) error {
	_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func (s *benchSystem) SlowPrimary(_ context.Context, fraction float64, extra time.Duration) error {
	if s.a.faults[0] == nil {
		return errors.New("no fault injection on the primary")
	}
	return s.a.faults[0].Set(faults.Config{SlowFraction: fraction, Slow: extra})
}

func (s *benchSystem) Hedging(_ context.Context, on bool) error {
	p := s.a.feed.Hedger().Policy()
	p.Mode = hedge.ModeOff
	if on {
		p.Mode = hedge.DefaultPolicy().Mode
	}
	return s.a.feed.Hedger().SetPolicy(p)
}

func (s *benchSystem) Hedges() (float64, float64) {
	standby := gatherSum(s.a.reg, "smartfeed_hedge_issued_total") + gatherSum(s.a.reg, "smartfeed_hedge_warmup_reads_total")
	return float64(standby), float64(gatherSum(s.a.reg, "smartfeed_hedge_calls_total"))
}

func (s *benchSystem) Cutoff(context.Context) (time.Duration, error) {
	d, _ := s.a.feed.Hedger().Cutoff()
	return d, nil
}

func (s *benchSystem) StandbyP999() time.Duration {
	_, standby := hedge.ReadLatency(&dto.MetricFamily{Metric: gatherSeries(s.a.reg, hedge.ReadLatencyMetric)})
	return standby.Quantile(0.999)
}

// GeneratorTime reads the generator stage of smartfeed_feed_stage_seconds.
func (s *benchSystem) GeneratorTime() (float64, time.Duration) {
	for _, m := range gatherSeries(s.a.reg, "smartfeed_feed_stage_seconds") {
		if labelValue(m, "stage") == "generator" {
			h := m.GetHistogram()
			return float64(h.GetSampleCount()), time.Duration(h.GetSampleSum() * float64(time.Second))
		}
	}
	return 0, 0
}

// FreshCounts is the feed service's GetFeed calls by fresh status so far
// (smartfeed_feed_requests_total, summed over outcomes).
func (s *benchSystem) FreshCounts() map[string]uint64 {
	return countsBy(s.a.reg, "smartfeed_feed_requests_total", "fresh")
}

// PreparedCounts is the feed service's preparations and prepared chunks by outcome so far
// (smartfeed_feed_prepared_total).
func (s *benchSystem) PreparedCounts() map[string]uint64 {
	return countsBy(s.a.reg, "smartfeed_feed_prepared_total", "outcome")
}

// countsBy sums the counter family name of reg by the value of its label (series without it
// left out).
func countsBy(reg prometheus.Gatherer, name, label string) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range gatherSeries(reg, name) {
		if v := labelValue(m, label); v != "" {
			out[v] += uint64(m.GetCounter().GetValue())
		}
	}
	return out
}

// Stages snapshots GetFeed's and the generator's stage histograms, and GetFeed's whole time as
// the service saw it (stage "all": what is not in it was spent in gRPC or the client)
// (bench.StageTimer).
func (s *benchSystem) Stages() []bench.StageHist {
	var out []bench.StageHist
	for _, name := range []string{"smartfeed_feed_request_seconds", "smartfeed_feed_stage_seconds", "smartfeed_generator_stage_seconds"} {
		for _, m := range gatherSeries(s.a.reg, name) {
			h := m.GetHistogram()
			stage := labelValue(m, "stage")
			if stage == "" {
				stage = "all"
			}
			sh := bench.StageHist{Metric: name, Stage: stage, Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
			for _, b := range h.GetBucket() {
				sh.Upper = append(sh.Upper, b.GetUpperBound())
				sh.Counts = append(sh.Counts, b.GetCumulativeCount())
			}
			out = append(out, sh)
		}
	}
	return out
}

// onlyPhase is a phase hook (bench.Options.Phase) that calls start when phase begins and stop
// when it ends; a start that fails is reported as what (a trace, a CPU profile) and skipped.
func onlyPhase(phase, what string, stdout io.Writer, start func() error, stop func()) func(string) func() {
	return func(name string) func() {
		if name != phase {
			return func() {}
		}
		if err := start(); err != nil {
			fmt.Fprintf(stdout, "%s of %s: %v\n", what, name, err)
			return func() {}
		}
		return stop
	}
}

// thenPhase chains two phase hooks (bench.Options.Phase): a, when set, then b at each phase's
// start, and their ends in the reverse order.
func thenPhase(a, b func(string) func()) func(string) func() {
	if a == nil {
		return b
	}
	return func(name string) func() {
		endA := a(name)
		endB := b(name)
		return func() { endB(); endA() }
	}
}
