package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/bench/loadgen"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/worker/baseline"
	"github.com/smartfeed/smartfeed/zen"
)

var (
	_ bench.RawTabler = (*benchSystem)(nil)
	_ bench.Flusher   = (*benchSystem)(nil)
)

// RawTable implements bench.RawTabler: a fresh table of the store holding the worker's pools.
func (s *benchSystem) RawTable(ctx context.Context) (zen.Table, error) {
	s.mu.Lock()
	s.raw++
	name := fmt.Sprintf("benchraw%d", s.raw)
	s.mu.Unlock()
	return s.a.stores.table(ctx, storeMain, name)
}

// Flushes implements bench.Flusher: the memtable flushes of the main Pebble store (the pools'),
// and false on a store that counts none (HBase).
func (s *benchSystem) Flushes() (float64, bool) {
	for _, m := range gatherSeries(s.a.reg, "smartfeed_pebble_flushes_total") {
		if labelValue(m, "store") == storeMain {
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// benchPeerSetup is what the fanout's equal-work peers and the lag phase's read load need.
type benchPeerSetup struct {
	opts    *bench.Options
	sys     *benchSystem
	rdb     *goredis.Client
	prefix  string // the Redis peer's key prefix on the run's Redis (the load generator reads its sets)
	out     string
	exe     string
	lg      loadgen.Options
	stdout  io.Writer
	cleanup []func()
}

// close stops what setup started.
func (b *benchPeerSetup) close() {
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		b.cleanup[i]()
	}
}

// setup fills opts with the worker's shape, the Redis peers (the run's Redis with its
// durability as it reports it, and, when redis-server is on the PATH, a second one of its own
// with appendfsync always on a free loopback port), the read load of the lag phase and the
// run's processes.
func (b *benchPeerSetup) setup(ctx context.Context, slots int) {
	wc := b.sys.a.worker.Config()
	b.opts.WorkerSlots, b.opts.ChunkSize, b.opts.TrimEvery = slots, wc.ChunkSize, wc.TrimEvery
	b.opts.RawPrefillBytes = 2 * int64(benchMemtableMB(b.sys)) << 20
	dur, synced, pid := redisDurability(ctx, b.rdb)
	if z, err := baseline.New(b.rdb, b.prefix, 800, wc.ChunkSize); err == nil {
		b.opts.RedisPeers = []bench.RedisPeer{{Base: z.TrimEvery(wc.TrimEvery), Durability: dur, Synced: synced, TrimEvery: wc.TrimEvery}}
	}
	if pid > 0 {
		b.opts.Processes = append(b.opts.Processes, bench.Process{Name: "redis-server (the run's: pinlater, the Redis peer)", PID: pid})
	}
	always, err := startRedisAlways(ctx, b.stdout)
	if err != nil {
		fmt.Fprintf(b.stdout, "smartfeed bench: no Redis of its own with appendfsync always (%v): the Redis peer runs on the run's Redis only (%s)\n", err, dur)
	} else {
		b.cleanup = append(b.cleanup, always.stop)
		z, err := baseline.New(always.rdb, "benchzset:", 800, wc.ChunkSize)
		if err == nil {
			b.opts.RedisPeers = append(b.opts.RedisPeers, bench.RedisPeer{Base: z.TrimEvery(wc.TrimEvery), Durability: "AOF appendfsync always",
				Synced: true, TrimEvery: wc.TrimEvery})
			b.opts.Processes = append(b.opts.Processes, bench.Process{Name: "redis-server (appendfsync always, the Redis peer's)", PID: always.cmd.Process.Pid})
		}
	}
	if b.exe != "" {
		b.opts.LagReadRate = 1000
		o := b.lg
		o.Kinds, o.Rates, o.ReportRates, o.Rounds = []string{loadgen.KindGetFeed}, []float64{b.opts.LagReadRate}, []float64{b.opts.LagReadRate}, 1
		// One window for the whole phase, which Stop ends; no wait for an idle server.
		o.Window, o.MetricsURL = time.Hour, ""
		b.opts.ReadLoad = func(ctx context.Context, users []uint64, rate float64) (func() (*loadgen.Report, error), error) {
			o.Rates, o.ReportRates = []float64{rate}, []float64{rate}
			r, err := loadgen.Start(ctx, b.exe, o, users, b.out, "loadgen-read-load", b.stdout)
			if err != nil {
				return nil, err
			}
			return r.Stop, nil
		}
	}
}

// benchMemtableMB is the memtable of the pools' store in MiB (the storage config's).
func benchMemtableMB(s *benchSystem) int {
	return max(s.a.cfg.Storage.PebbleMemTableMB, 64)
}

// redisDurability is how the Redis behind rdb makes writes durable, as it reports it (CONFIG
// GET), whether it acknowledges a write only once fsynced (appendfsync always), and its
// process ID (INFO server; 0 when unknown).
func redisDurability(ctx context.Context, rdb *goredis.Client) (string, bool, int) {
	pid := 0
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
	}
	conf, err := rdb.ConfigGet(ctx, "append*").Result()
	if err != nil {
		return "unknown (CONFIG GET refused)", false, pid
	}
	if conf["appendonly"] != "yes" {
		return "no AOF (snapshots at most)", false, pid
	}
	fsync := conf["appendfsync"]
	return "AOF appendfsync " + fsync, fsync == "always", pid
}

// redisAlways is a redis-server the bench started, with appendfsync always.
type redisAlways struct {
	cmd    *exec.Cmd
	dir    string
	rdb    *goredis.Client
	exited chan struct{} // closed when the server has exited
}

// startRedisAlways starts redis-server on a free loopback port with AOF appendfsync always, no
// snapshots, its data in a temporary directory, and waits until it answers PING.
func startRedisAlways(ctx context.Context, log io.Writer) (*redisAlways, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on the PATH")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "smartfeed-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = io.Discard, log
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &redisAlways{cmd: cmd, dir: dir, exited: make(chan struct{}),
		rdb: goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})}
	go func() { _ = cmd.Wait(); close(r.exited) }()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for r.rdb.Ping(wctx).Err() != nil {
		select {
		case <-r.exited:
			r.stop()
			return nil, errors.New("redis-server exited at start")
		case <-wctx.Done():
			r.stop()
			return nil, errors.New("redis-server did not answer PING in 15 s")
		case <-t.C:
		}
	}
	return r, nil
}

// stop ends the server (SIGTERM, then SIGKILL after 10 s) and removes its data.
func (r *redisAlways) stop() {
	_ = r.rdb.Close()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	_ = os.RemoveAll(r.dir)
}

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
