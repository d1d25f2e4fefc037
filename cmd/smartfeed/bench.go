package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/bench/loadgen"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/worker/baseline"
)

// benchFlags are the bench command's own flags.
type benchFlags struct {
	users                                                                                      []int // the profile's sizes, replaced (empty: the profile's)
	profile, out, docs, cpuprofile, cpuPhase, trace, memprofile, hbasePE, hbaseScan, hbaseBulk string
	// loadgen: run the read-rate phase with `smartfeed loadgen` in a process of its own (with
	// loadgenWindow windows); off, the in-process search of the earlier benches runs instead.
	loadgen       bool
	loadgenWindow time.Duration
	// pebbleIngest: on Pebble, the graph is loaded as sstables Pebble ingests.
	pebbleIngest bool
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
	fs.StringVar(&bf.profile, "profile", "quick", "quick (100,000 users, about 15 minutes here with Pebble; what make bench runs), full (1,000,000 users, followers capped at 1,000; about 40 minutes) or learn (serve, engage, train by rounds on simulated users; no server)")
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
	fs.StringVar(&bf.hbaseBulk, "hbase-bulk-load", filepath.Join("scripts", "hbase-bulkload.sh"), "with --storage hbase: the command that loads the graph as HFiles "+
		"(HBase's own bulk load), as smartfeed load --hbase-bulk-load does (empty: the store's batched writes)")
	fs.BoolVar(&bf.pebbleIngest, "pebble-ingest", true, "with --storage pebble: load the graph as sstables Pebble ingests, as smartfeed load --pebble-ingest does (false: the store's batched writes)")
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
	newSys := benchSystems(cfg, logFile, bf.hbaseBulk, bf.pebbleIngest)
	sys, closeSys, err := newSys(ctx, "")
	if err != nil {
		return err
	}
	defer closeSys()
	opts.Scale = func(ctx context.Context, users int) (bench.System, func(), error) {
		s, c, err := newSys(ctx, fmt.Sprint(users))
		return s, c, err
	}
	hp := &hbasePeers{}
	defer hp.close()
	withPE := hp.hook(&opts, sys, cfg, bf, logFile, stdout)
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
		if err := peers.loadGen(cfg, bf, zsPrefix); err != nil {
			return err
		}
	}
	peers.setup(ctx, cfg.Worker.Concurrency)
	defer clearPeerSets(ctx, zs, stdout)
	fmt.Fprintf(stdout, "smartfeed bench: profile %s, storage %s (fsync on), Redis %s; logs in %s\n",
		opts.Profile, opts.Storage, cfg.Redis.Addr, logFile.Name())
	stopProfiles, err := benchProfiles(bf, &opts, stdout)
	defer stopProfiles()
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, sys, zs, opts, stdout, benchProgress(stdout))
	if err != nil {
		return err
	}
	benchGraphReads(ctx, sys, rdb, res, stdout)
	if withPE {
		hp.javaResults(ctx, res, sys, cfg.Storage.HBase, bf.hbasePE, logFile, stdout)
	}
	if err := bench.Write(bf.out, res); err != nil {
		return err
	}
	printBenchResults(stdout, bf.out, res)
	if bf.docs != "" {
		if err := writeBenchDocs(bf.docs, bf.out, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "docs: %s\n", filepath.Join(bf.docs, "benchmarks.md"))
	}
	return nil
}

// benchSystems returns what starts a bench system of cfg (each in a Redis namespace of its own,
// on Pebble in a temporary directory, on HBase under a table prefix of its own), tag naming it.
func benchSystems(cfg config.Config, logFile *os.File, bulkLoad string, ingest bool) func(ctx context.Context, tag string) (*benchSystem, func(), error) {
	return func(ctx context.Context, tag string) (*benchSystem, func(), error) {
		c := benchSystemConfig(cfg, tag)
		var tmp string
		if c.Storage.Backend == config.BackendPebble {
			var err error
			if tmp, err = os.MkdirTemp("", "smartfeed-bench-"); err != nil {
				return nil, nil, err
			}
			c.Storage.DataDir = tmp
		} else {
			c.Storage.HBase.TablePrefix = c.Redis.Namespace + "_"
		}
		s, closeFn, err := startBenchSystem(ctx, c, logFile, tmp)
		if s != nil {
			s.ingest = ingest
			if c.Storage.Backend == config.BackendHBase {
				s.bulkLoad = bulkLoad
			}
		}
		return s, closeFn, err
	}
}

// benchSystemConfig is the configuration of one of the bench's systems: the main one (tag "")
// listens where cfg says, so that a profiler or a trace can reach it at a known address; the
// scale curve's systems (tag: their graph size) run while the main one still holds those
// addresses, so they listen on ports the kernel picks. Each gets a Redis namespace of its own.
func benchSystemConfig(cfg config.Config, tag string) config.Config {
	c := cfg
	c.Redis.Namespace = fmt.Sprintf("bench%s%d", tag, time.Now().UnixNano())
	if tag != "" {
		c.GRPC.Addr, c.Admin.Addr = "127.0.0.1:0", "127.0.0.1:0"
		if c.Admin.GRPCAddr != "" {
			c.Admin.GRPCAddr = "127.0.0.1:0"
		}
	}
	return c
}

// clearPeerSets removes the Redis peer's sets (800 pins for each of hundreds of users), which
// would otherwise stay in a Redis that outlives the run.
func clearPeerSets(ctx context.Context, zs *baseline.ZSetFeeds, stdout io.Writer) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if n, err := zs.ClearAll(cctx); err != nil {
		fmt.Fprintf(stdout, "smartfeed bench: removing the Redis peer's sets: %v (%d removed)\n", err, n)
	}
}

// hbasePeers runs HBase's own Java client beside the bench's phases: GetFeed's feed scans
// (FeedScan) right after the serving phase with its fanout still writing, and PE randomRead under
// the fanout and once more after the run.
type hbasePeers struct {
	peFanout *bench.PEResult
	scanner  *feedScanner
}

// close closes the feed scanner, if one ran.
func (h *hbasePeers) close() {
	if h.scanner != nil {
		h.scanner.Close()
	}
}

// hook sets opts' Beside and UnderFanout hooks for the Java client the flags ask for, on HBase;
// withPE says PE runs.
func (h *hbasePeers) hook(opts *bench.Options, sys *benchSystem, cfg config.Config, bf benchFlags, logFile *os.File, stdout io.Writer) (withPE bool) {
	withPE = cfg.Storage.Backend == config.BackendHBase && bf.hbasePE != ""
	withScan := cfg.Storage.Backend == config.BackendHBase && bf.hbaseScan != ""
	if withScan {
		opts.Beside = func(ctx context.Context, readers []uint64) error {
			sc, err := newFeedScanner(ctx, sys, cfg.Storage.HBase, bf.hbaseScan, readers, opts.PageSize, logFile)
			if err != nil {
				return fmt.Errorf("GetFeed's feed scans: %w", err)
			}
			if err := sc.loaded(ctx, *opts); err != nil {
				sc.Close()
				return fmt.Errorf("GetFeed's feed scans: %w", err)
			}
			h.scanner = sc
			j := sc.fs.Java.Summary()
			fmt.Fprintf(stdout, "hbase java beside GetFeed: GetFeed's feed scans by the Java client at %.0f/s p50 %.3f p99 %.3f ms (%d failed)\n",
				sc.fs.Java.Offered, j.P50, j.P99, sc.fs.Java.Failed)
			return nil
		}
	}
	if withPE || withScan {
		opts.UnderFanout = func(ctx context.Context, readers []uint64) error {
			var errs []error
			if h.scanner != nil {
				if err := h.scanner.serial(ctx); err != nil {
					errs = append(errs, fmt.Errorf("GetFeed's feed scans one at a time: %w", err))
				} else {
					js, z := h.scanner.fs.JavaSerial.Summary(), h.scanner.fs.Zen
					fmt.Fprintf(stdout, "hbase java under fanout: GetFeed's feed scans one at a time: Java p50 %.3f p99 %.3f ms, zen p50 %.3f p99 %.3f ms\n",
						js.P50, js.P99, z.P50, z.P99)
				}
			}
			if withPE {
				res, _, err := runPE(ctx, cfg.Storage.HBase, bf.hbasePE, logFile)
				if err != nil {
					errs = append(errs, fmt.Errorf("HBase's Java client: %w", err))
				} else {
					h.peFanout = &res
					fmt.Fprintf(stdout, "hbase java under fanout: PE randomRead p50 %.3f p99 %.3f ms (%d)\n", res.P50Us/1000, res.P99Us/1000, res.N)
				}
			}
			return errors.Join(errs...)
		}
	}
	return withPE
}

// javaResults measures zen against HBase's Java client after the run and puts it in res, with
// what the hooks measured during it.
func (h *hbasePeers) javaResults(ctx context.Context, res *bench.Results, sys *benchSystem, hc config.HBase, pe string, logFile *os.File, stdout io.Writer) {
	j, err := benchHBaseJava(ctx, sys, hc, pe, logFile)
	if err != nil {
		res.Notes = append(res.Notes, "zen against HBase's Java client: "+err.Error())
		fmt.Fprintf(stdout, "hbase java: not measured: %v\n", err)
		return
	}
	if h.peFanout != nil {
		sum := h.peFanout.Summary()
		j.PEUnderFanout, j.JavaUnderFanout = h.peFanout, &sum
	}
	if h.scanner != nil {
		j.FeedScans = h.scanner.fs
	}
	res.SetHBaseJava(j)
	fmt.Fprintf(stdout, "hbase java: zen Get p50 %.3f p99 %.3f ms (%d), zen Top(50) p50 %.3f p99 %.3f ms (%d); "+
		"Java client (PE randomRead) p50 %.3f p99 %.3f ms (%d); zen Get after PE p50 %.3f p99 %.3f ms\n", j.ZenGet.P50, j.ZenGet.P99, j.ZenGet.N,
		j.ZenTop50.P50, j.ZenTop50.P99, j.ZenTop50.N, j.JavaRandomRead.P50, j.JavaRandomRead.P99, j.JavaRandomRead.N,
		j.ZenGetAfter.P50, j.ZenGetAfter.P99)
}

// loadGen makes the run's reads come from the load generator, this binary's loadgen command in
// a process of its own, against the bench system and the Redis peer's sets under zsPrefix.
func (p *benchPeerSetup) loadGen(cfg config.Config, bf benchFlags, zsPrefix string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: the load generator's binary: %w", err)
	}
	opts, sys, stdout := p.opts, p.sys, p.stdout
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
	p.exe, p.lg = exe, o
	return nil
}

// benchProgress prints a phase's progress: a bar on a terminal, a line every 5 s otherwise.
func benchProgress(stdout io.Writer) bench.Progress {
	tty := isTerminal(stdout)
	last := time.Time{}
	return func(phase string, done, total int) {
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
}

// benchProfiles starts the execution trace, allocation and CPU profiles the flags ask for (over
// the whole run, or one phase: --cpu-phase); stop ends them and closes their files.
func benchProfiles(bf benchFlags, opts *bench.Options, stdout io.Writer) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	if bf.trace != "" {
		f, err := os.Create(bf.trace)
		if err != nil {
			return stop, err
		}
		stops = append(stops, func() { _ = f.Close() }, trace.Stop) // a phase a failed run left open
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
			return stop, err
		}
		stops = append(stops, func() { _ = f.Close() }, pprof.StopCPUProfile) // a phase a failed run left open
		if bf.cpuPhase == "" {
			if err := pprof.StartCPUProfile(f); err != nil {
				return stop, err
			}
		} else {
			opts.Phase = thenPhase(opts.Phase, onlyPhase(bf.cpuPhase, "cpu profile", stdout, func() error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile))
		}
	}
	return stop, nil
}

// benchGraphReads measures the graph's reads (objects and edge pages, with and without the
// cache) on the bench system's main store and prints them. A failure is noted in res, as a
// failed phase of bench.Run is, and the rest of the results are kept.
func benchGraphReads(ctx context.Context, sys *benchSystem, rdb *goredis.Client, res *bench.Results, stdout io.Writer) {
	main, err := sys.a.stores.get(ctx, storeMain)
	if err == nil {
		res.GraphReads, err = bench.GraphReads(ctx, main, rdb, fmt.Sprintf("benchgr%d", time.Now().UnixNano()))
	}
	if err != nil {
		res.GraphReads = nil
		res.Notes = append(res.Notes, "graph reads: "+err.Error())
		fmt.Fprintf(stdout, "graph reads: %v\n", err)
		return
	}
	for _, r := range res.GraphReads {
		fmt.Fprintf(stdout, "graph reads: %s cache %v: p50 %.3f ms, p99 %.3f ms, %.2f store calls a read\n",
			r.Read, r.Cache, r.Latency.P50, r.Latency.P99, r.StoreCallsPer)
	}
}

// printBenchResults prints where the results are and every ratio (the RatioKeys first).
func printBenchResults(stdout io.Writer, out string, res *bench.Results) {
	fmt.Fprintf(stdout, "\nresults: %s\nreport:  %s\nratios:", filepath.Join(out, "results.json"), filepath.Join(out, "report.md"))
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
}

// benchHBaseJavaReads is how many zen Gets (and a quarter as many Top(50)s) are timed against
// PE's randomRead, each after benchHBaseJavaWarmup calls not timed.
const benchHBaseJavaReads, benchHBaseJavaWarmup = 9000, 1000

var (
	_ bench.Replication     = (*benchSystem)(nil)
	_ bench.Pinger          = (*benchSystem)(nil)
	_ bench.FreshCounter    = (*benchSystem)(nil)
	_ bench.PreparedCounter = (*benchSystem)(nil)
)

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
