package zenhbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tsuna/gohbase/zk"

	"github.com/smartfeed/smartfeed/zen"
)

// The tests of this file run against the distributed HBase of scripts/hbase-cluster.sh (a
// ZooKeeper, a master and three region servers, each a JVM), which they find through these
// variables (both printed by `scripts/hbase-cluster.sh up`); without them they skip.
const (
	clusterZKEnv  = "SMARTFEED_HBASE_CLUSTER_ZK" // the cluster's ZooKeeper
	clusterDirEnv = "SMARTFEED_HBASE_CLUSTER"    // its folder run/NAME (ports of rs1..rs3)
	longEnv       = "SMARTFEED_LONG"             // "1": longer load phases
)

// cluster is the HBase cluster under test.
type cluster struct {
	zk, dir string
}

func clusterFromEnv(t *testing.T) cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the HBase cluster, and -short is set")
	}
	c := cluster{zk: os.Getenv(clusterZKEnv), dir: os.Getenv(clusterDirEnv)}
	if c.zk == "" || c.dir == "" {
		t.Skipf("needs the HBase cluster: run `scripts/hbase-cluster.sh up` and export the %s and %s lines it prints (make test-hbase-cluster does)",
			clusterZKEnv, clusterDirEnv)
	}
	return c
}

// node returns the number N of the region server rsN listening on addr (host:port), or 0.
func (c cluster) node(t *testing.T, addr string) int {
	t.Helper()
	for n := 1; n <= 3; n++ {
		b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("rs%d", n), "port"))
		if err != nil {
			t.Fatalf("%s: %v (is scripts/hbase-cluster.sh up?)", c.dir, err)
		}
		if strings.HasSuffix(addr, ":"+strings.TrimSpace(string(b))) {
			return n
		}
	}
	return 0
}

// script runs scripts/hbase-cluster.sh ARGS... on the cluster.
func (c cluster) script(args ...string) error {
	args = append(args, filepath.Base(c.dir))
	out, err := exec.Command(filepath.Join("..", "..", "scripts", "hbase-cluster.sh"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/hbase-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func openCluster(t *testing.T, c cluster) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := Open(ctx, c.zk, Options{TablePrefix: fmt.Sprintf("zc%d_", time.Now().UnixNano()),
		FlushInterval: 2 * time.Millisecond, CreateTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// balance returns the number of open regions of the table per region server, checking that
// there are 16 (the pre-split).
func balance(t *testing.T, s *Store, name string) map[string]int {
	t.Helper()
	rs, err := s.Regions(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 16 {
		t.Fatalf("%d regions, want 16 (the pre-split)", len(rs))
	}
	return RegionsPerServer(rs)
}

// TestClusterRegionsBalanced: a table created on the cluster is pre-split into 16 regions, and
// the master spreads them over the three region servers (5, 5 and 6).
func TestClusterRegionsBalanced(t *testing.T) {
	c := clusterFromEnv(t)
	s := openCluster(t, c)
	if _, err := s.Table(t.Context(), "pools"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Drop(context.Background(), "pools") })
	per := balance(t, s, "pools")
	t.Logf("regions per server: %v", per)
	if len(per) != 3 {
		t.Fatalf("regions on %d servers (%v), want all 3", len(per), per)
	}
	for srv, n := range per {
		if n < 4 || n > 7 {
			t.Errorf("server %s holds %d of 16 regions, want 5 or 6", srv, n)
		}
	}
}

// faultLoad is the fanout-like write load and the read load of TestRegionServerKill.
type faultLoad struct {
	pools *zen.Pools
	tb    zen.Table

	mu       sync.Mutex
	acked    map[string]bool // pool rows of every Insert that returned nil
	ackedKey [][]byte        // the same, for readers to pick from
	written  map[string]bool // pool rows of every Insert attempted

	jobs, attemptsFailed, reads, readsFailed, lost, badKeys atomic.Int64
	maxJob, maxRead                                         atomic.Int64 // nanoseconds, retries included
}

const followersPerJob = 20

// attemptTimeout bounds one Insert or Get of the load (gohbase retries within it), as a
// pinlater task's or a GetFeed's deadline would.
const attemptTimeout = 5 * time.Second

// job returns the pool entries of fanout job j of writer w: one pin to followersPerJob users
// spread over every shard, so every region of the table gets writes.
func job(w, j int) []zen.PoolEntry {
	local := uint64(w)<<20 | uint64(j)
	pin, _ := zen.NewID(uint16(j*131%4096), zen.TypePin, local)
	author, _ := zen.NewID(uint16(w), zen.TypeUser, uint64(w))
	es := make([]zen.PoolEntry, followersPerJob)
	for i := range es {
		user, _ := zen.NewID(uint16((j*7919+i*4099+w*577)%4096), zen.TypeUser, uint64(i))
		es[i] = zen.PoolEntry{User: user, Source: zen.SourceFollowing, Score: float64(j%1000) / 10,
			Pin: pin, Author: author, CreatedMs: 1_700_000_000_000 + int64(j)}
	}
	return es
}

func storeMax(m *atomic.Int64, d time.Duration) {
	for {
		old := m.Load()
		if int64(d) <= old || m.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// write runs fanout jobs until stop closes; a job whose Insert fails is sent again, as
// pinlater retries a failed task, until it succeeds (or ctx ends).
func (l *faultLoad) write(ctx context.Context, w int, stop <-chan struct{}) {
	for j := 0; ; j++ {
		select {
		case <-stop:
			return
		default:
		}
		es := job(w, j)
		var keys []string
		for _, e := range es {
			k, err := zen.PoolKey(e.User, e.Source, e.Score, e.Pin)
			if err != nil {
				l.badKeys.Add(1)
				return
			}
			keys = append(keys, string(k))
		}
		t0 := time.Now()
		for {
			l.mu.Lock()
			for _, k := range keys {
				l.written[k] = true
			}
			l.mu.Unlock()
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			_, err := l.pools.Insert(actx, es)
			cancel()
			if err == nil {
				break
			}
			l.attemptsFailed.Add(1)
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond): // the job's retry delay
			}
		}
		storeMax(&l.maxJob, time.Since(t0))
		l.jobs.Add(1)
		l.mu.Lock()
		for _, k := range keys {
			l.acked[k] = true
			l.ackedKey = append(l.ackedKey, []byte(k))
		}
		l.mu.Unlock()
	}
}

// read reads acknowledged pool rows until stop closes: a read that errs is sent again until
// it is answered; an answer without the row is a lost write.
func (l *faultLoad) read(ctx context.Context, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for {
		select {
		case <-stop:
			return
		default:
		}
		l.mu.Lock()
		n := len(l.ackedKey)
		var k []byte
		if n > 0 {
			k = l.ackedKey[rng.IntN(n)]
		}
		l.mu.Unlock()
		if k == nil {
			time.Sleep(10 * time.Millisecond) // pacing: nothing acknowledged to read yet
			continue
		}
		t0 := time.Now()
		for {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			_, err := l.tb.Get(actx, k)
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, zen.ErrNotFound) {
				l.lost.Add(1)
				break
			}
			l.readsFailed.Add(1)
			if ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // pacing: the reader's retry delay
		}
		storeMax(&l.maxRead, time.Since(t0))
		l.reads.Add(1)
	}
}

var probeSuffix = []byte("\xffclusterprobe")

// probe writes and reads back a row in each region that starts at one of starts, through the
// store's clients, each bounded by d; it reports whether all succeeded.
func probe(ctx context.Context, tb zen.Table, starts [][]byte, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var muts []zen.Mutation
	var keys [][]byte
	for _, st := range starts {
		k := append(append(make([]byte, 0, 8+len(probeSuffix)), st...), probeSuffix...)
		if len(st) == 0 {
			k = append(make([]byte, 8), probeSuffix...)
		}
		keys = append(keys, k)
		muts = append(muts, zen.Mutation{Key: k, Value: []byte("p")})
	}
	if err := tb.Apply(ctx, muts); err != nil {
		return false
	}
	vs, err := tb.(zen.MultiGetter).GetMany(ctx, keys)
	if err != nil {
		return false
	}
	for _, v := range vs {
		if v == nil {
			return false
		}
	}
	return true
}

// TestRegionServerKill kills -9 one of the cluster's three region servers (one that holds
// regions of the pool table but not hbase:meta) under a fanout-like write load of pool rows
// (zen.Pools.Insert, a failed job retried as pinlater would) and a read load of acknowledged
// rows. The master notices the death when the server's ZooKeeper session expires, splits its
// write-ahead log and reopens its regions on the other two, which replay their edits. Checked:
// the regions end up open on the two live servers; every Insert that returned nil is present,
// each (user, pin) exactly once, and no row appears that no Insert wrote; every read is
// answered, possibly after retries, and none misses an acknowledged row. Logged: the recovery
// time as the master sees it (every region open elsewhere) and as the client sees it (a write
// and a read to each of the dead server's regions succeed), and the load's figures.
func TestRegionServerKill(t *testing.T) { killUnderLoad(t, false) }

// TestMetaRegionServerKill is TestRegionServerKill with the region server that holds
// hbase:meta (and regions of the pool table) killed: the master reassigns meta first, and until
// then no client can look up any region that moved, nor a region it has not cached.
func TestMetaRegionServerKill(t *testing.T) { killUnderLoad(t, true) }

// killUnderLoad is TestRegionServerKill, killing the region server of hbase:meta if killMeta.
func killUnderLoad(t *testing.T, killMeta bool) {
	c := clusterFromEnv(t)
	s := openCluster(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	tb, err := s.Table(ctx, "pools")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Drop(context.Background(), "pools") })

	// The victim: a server holding regions of the table, and hbase:meta if killMeta.
	meta, err := zk.NewClient(c.zk, 10*time.Second).LocateResource(zk.Meta.Prepend("/hbase"))
	if err != nil {
		t.Fatal(err)
	}
	regions, err := s.Regions(ctx, "pools")
	if err != nil {
		t.Fatal(err)
	}
	per := RegionsPerServer(regions)
	if len(per) != 3 {
		t.Fatalf("regions on %d servers (%v), want all 3 (is every region server up? scripts/hbase-cluster.sh status)", len(per), per)
	}
	var victim string
	for _, srv := range slices.Sorted(maps.Keys(per)) {
		if (srv == meta) == killMeta && per[srv] > 0 {
			victim = srv
			break
		}
	}
	if victim == "" {
		t.Fatalf("no region server holds regions of the table with hbase:meta=%v (meta on %s, regions %v)", killMeta, meta, per)
	}
	n := c.node(t, victim)
	if n == 0 {
		t.Fatalf("region server %s is none of %s/rs1..rs3", victim, c.dir)
	}
	var starts [][]byte
	for _, r := range regions {
		if r.Server == victim {
			starts = append(starts, r.Start)
		}
	}
	t.Logf("regions per server %v; hbase:meta on %s; killing rs%d (%s, %d regions)", per, meta, n, victim, len(starts))
	t.Cleanup(func() {
		if err := c.script("start-rs", fmt.Sprint(n)); err != nil {
			t.Errorf("restarting rs%d: %v", n, err)
		}
	})

	steady, after := 3*time.Second, 3*time.Second
	if os.Getenv(longEnv) == "1" {
		steady, after = 15*time.Second, 30*time.Second
	}
	l := &faultLoad{pools: zen.NewPools(tb, nil), tb: tb, acked: map[string]bool{}, written: map[string]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { l.write(ctx, w, stop) })
	}
	for r := range 2 {
		wg.Go(func() { l.read(ctx, uint64(r), stop) })
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()

	// sleep: the load runs on its own for the steady phase's length before the kill.
	time.Sleep(steady)
	jobsBefore := l.jobs.Load()
	if jobsBefore == 0 {
		t.Fatal("no fanout job acknowledged before the kill")
	}
	m0 := clientMetrics(t)
	killed := time.Now()
	if err := c.script("kill-rs", fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	var serverUp, clientUp time.Duration
	for serverUp == 0 || clientUp == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no recovery within the test's time (master: %s, client: %s)", serverUp, clientUp)
		}
		if serverUp == 0 {
			rctx, rcancel := context.WithTimeout(ctx, attemptTimeout)
			rs, err := s.Regions(rctx, "pools")
			rcancel()
			if err == nil && len(rs) == 16 && len(RegionsPerServer(rs)) == 2 &&
				RegionsPerServer(rs)[victim] == 0 && sum(RegionsPerServer(rs)) == 16 {
				serverUp = time.Since(killed)
				t.Logf("master: every region open on the two live servers %s after the kill (%v)", serverUp.Round(100*time.Millisecond), RegionsPerServer(rs))
			}
		}
		if clientUp == 0 && probe(ctx, tb, starts, 2*time.Second) {
			clientUp = time.Since(killed)
			t.Logf("client: a write and a read to each of rs%d's former regions succeed %s after the kill", n, clientUp.Round(100*time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the recovery watch
	}
	// sleep: the load runs on its own for the recovered phase's length after the recovery.
	time.Sleep(after)
	stopLoad()
	m1 := clientMetrics(t)
	relocated := m1["gohbase_region_relocations_total"] - m0["gohbase_region_relocations_total"]
	retried := m1["gohbase_rpc_retries_total"] - m0["gohbase_rpc_retries_total"]
	reestablished := m1["gohbase_region_reestablish_seconds"] - m0["gohbase_region_reestablish_seconds"]
	t.Logf("client metrics over the kill: %v region relocations, %v regions re-established, %v RPC retries", relocated, reestablished, retried)
	// Both of the store's clients (writes, reads) had every region of the table cached.
	if relocated < float64(len(starts)) || retried == 0 {
		t.Errorf("gohbase_region_relocations_total grew by %v (want at least the %d regions of the dead server), gohbase_rpc_retries_total by %v (want some)",
			relocated, len(starts), retried)
	}

	// Every row of the table: acknowledged ones all there, each (user, pin) once.
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	perPin := map[[2]zen.ID]int{}
	var strays []string
	for _, kv := range rows {
		if bytes.HasSuffix(kv.Key, probeSuffix) {
			continue
		}
		seen[string(kv.Key)]++
		user, _, _, pin, err := zen.ParsePoolKey(kv.Key)
		if err != nil {
			t.Fatalf("row %x: %v", kv.Key, err)
		}
		perPin[[2]zen.ID{user, pin}]++
		if !l.written[string(kv.Key)] {
			strays = append(strays, fmt.Sprintf("%x", kv.Key))
		}
	}
	var missing, dup int
	for k := range l.acked {
		if seen[k] == 0 {
			missing++
		}
	}
	for _, c := range perPin {
		if c > 1 {
			dup++
		}
	}
	t.Logf("recovery: master %s, client %s after kill -9; writes: %d fanout jobs acknowledged (%d before the kill, %d rows), %d attempts failed and were retried, slowest job %s; reads: %d answered, %d attempts failed and were retried, slowest %s",
		serverUp.Round(100*time.Millisecond), clientUp.Round(100*time.Millisecond), l.jobs.Load(), jobsBefore, len(l.acked),
		l.attemptsFailed.Load(), time.Duration(l.maxJob.Load()).Round(time.Millisecond),
		l.reads.Load(), l.readsFailed.Load(), time.Duration(l.maxRead.Load()).Round(time.Millisecond))
	if missing > 0 || dup > 0 || len(strays) > 0 || l.lost.Load() > 0 {
		t.Errorf("after recovery: %d of %d acknowledged rows missing, %d (user, pin) with more than one row, %d rows nobody wrote %v, %d reads missed an acknowledged row",
			missing, len(l.acked), dup, len(strays), strays[:min(len(strays), 5)], l.lost.Load())
	}
	if l.reads.Load() == 0 || l.badKeys.Load() > 0 {
		t.Errorf("%d reads answered (want some), %d jobs with an entry PoolKey refused", l.reads.Load(), l.badKeys.Load())
	}
	// Once the master has reopened the regions, the client finds them within about a second
	// (the capped wait between its attempts to re-establish a region; the probes' poll and
	// round trips take the rest).
	if gap := clientUp - serverUp; gap > maxClientLag {
		t.Errorf("the client found the reopened regions %s after the master had reopened them, want at most %s",
			gap.Round(100*time.Millisecond), maxClientLag)
	}
}

// maxClientLag bounds how long after the master reopens a dead server's regions the client
// may take to use them.
const maxClientLag = 3 * time.Second

// clientMetrics reads the HBase client's metrics (Collectors): each counter's total over its
// labels, and each histogram's count, by name.
func clientMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				out[mf.GetName()] += c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				out[mf.GetName()] += float64(h.GetSampleCount())
			}
		}
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
