package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// memSample is one sample of the server process's memory, in bytes unless named otherwise.
type memSample struct {
	at                      time.Duration // since the load started
	rss                     int64         // VmRSS of /proc/PID/status
	heapInuse, heapLive     float64       // go_memstats_heap_inuse_bytes, go_gc_heap_live_bytes
	goSys                   float64       // go_memstats_sys_bytes less go_memstats_heap_released_bytes: what the Go runtime holds from the OS
	cacheMain, cacheFeed    float64       // smartfeed_pebble_cache_bytes of main, of the two feed stores
	memtables               float64       // smartfeed_pebble_memtable_bytes, summed over the stores
	goroutines, fds         float64
	pins, pinErrs           int64 // CreatePin answered OK, failed, so far
	reads, readErrs         int64 // GetFeed answered OK, failed, so far
	readP99                 time.Duration
	other                   int64 // rss − block caches − memtables − Go's own memory: what nothing here accounts for
	cacheTotal, memAndCache float64
}

// memoryRunLength is how long TestMemoryPlateau's load runs: SMARTFEED_MEMORY_RUN (a Go
// duration) if set, else 30 minutes under SMARTFEED_LONG=1, else 0 (skipped).
func memoryRunLength(t *testing.T) time.Duration {
	if v := os.Getenv("SMARTFEED_MEMORY_RUN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("SMARTFEED_MEMORY_RUN=%q: want a duration of at least 1m", v)
		}
		return d
	}
	if os.Getenv("SMARTFEED_LONG") == "1" {
		return 30 * time.Minute
	}
	return 0
}

// envMB is the integer SMARTFEED_<name> if set, else def.
func envMB(t *testing.T, name string, def int) int {
	v := os.Getenv("SMARTFEED_" + name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("SMARTFEED_%s=%q: %v", name, v, err)
	}
	return n
}

// TestMemoryPlateau runs the built binary (smartfeed all, on Pebble and a real Redis) under a
// sustained load from this process, CreatePin 10/s by authors of 50 followers each and GetFeed
// 100/s, and samples the server's memory: RSS (/proc/PID/status), the Go heap (in use, and
// live after the last collection), the Pebble block caches and memtables (/metrics). It writes
// the samples as CSV (SMARTFEED_MEMORY_OUT, else run/memory-plateau/ under the repository) with
// heap profiles at a third, two thirds and the end of the run, and checks that memory has a
// ceiling:
//
//   - RSS stays under the bound the configuration gives (docs/operations.md, "Sizing memory"):
//     three block caches, the memtables (the main store's and the two feed stores', each up to
//     memtableFactor memtables in memory), the Go heap's goal (the heap floor, or twice the live
//     heap past it) and a fixed allowance for the runtime, stacks and binary;
//   - in the last third of the run, what is not Pebble's cache grows by less than plateauGrowth
//     (plus plateauSlack): RSS less the block caches (on runs of settleRun or more), and the
//     live heap. A block cache filling towards its configured size is a plateau still being
//     reached; anything else growing is a leak.
//
// The run lasts 30 minutes under SMARTFEED_LONG=1 (make test-long); SMARTFEED_MEMORY_RUN=3m
// gives a shortened run (make test-memory). Without either it is skipped: make test does not
// run it. The cache and memtable sizes come from SMARTFEED_PEBBLE_CACHE_MB,
// SMARTFEED_PEBBLE_MEMTABLE_MB and SMARTFEED_PEBBLE_FEED_MEMTABLE_MB, else the defaults.
func TestMemoryPlateau(t *testing.T) {
	run := memoryRunLength(t)
	if run == 0 {
		t.Skip("set SMARTFEED_LONG=1 (30 minutes) or SMARTFEED_MEMORY_RUN=3m")
	}
	const (
		pinRate, readRate = 10, 100 // a second
		authors           = 10
		followersEach     = 50
		readers           = 100
		memtableFactor    = 3        // the mutable memtable, one being flushed, one recycled
		runtimeAllowance  = 96 << 20 // stacks, the binary's text and data, the allocator's slack
		plateauGrowth     = 0.10
		plateauSlack      = 8 << 20
		settleRun         = 10 * time.Minute
	)
	def := config.DefaultConfig()
	cacheMB := envMB(t, "PEBBLE_CACHE_MB", def.Storage.PebbleCacheMB)
	memMB := envMB(t, "PEBBLE_MEMTABLE_MB", def.Storage.PebbleMemTableMB)
	feedMemMB := envMB(t, "PEBBLE_FEED_MEMTABLE_MB", def.Storage.PebbleFeedMemTableMB)
	floorMB := envMB(t, "GC_HEAP_FLOOR_MB", def.GCHeapFloorMB)

	out := os.Getenv("SMARTFEED_MEMORY_OUT")
	if out == "" {
		out = filepath.Join(repoRoot(t), "run", "memory-plateau")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	redis := testenv.Redis(t)
	dir := t.TempDir()
	bin := buildBinary(t)
	addrs := freeAddrs(t, 2)
	grpcAddr, adminAddr := addrs[0], addrs[1]
	env := append(os.Environ(), "SMARTFEED_STORAGE=pebble", "SMARTFEED_DATA_DIR="+filepath.Join(dir, "data"),
		"SMARTFEED_REDIS_ADDR="+redis, fmt.Sprintf("SMARTFEED_REDIS_NAMESPACE=mem_%d", time.Now().UnixNano()),
		"SMARTFEED_GRPC_ADDR="+grpcAddr, "SMARTFEED_ADMIN_ADDR="+adminAddr, "SMARTFEED_PPROF=true",
		"SMARTFEED_LOG_FORMAT=json", "SMARTFEED_LOG_LEVEL=warn",
		fmt.Sprintf("SMARTFEED_PEBBLE_CACHE_MB=%d", cacheMB), fmt.Sprintf("SMARTFEED_PEBBLE_MEMTABLE_MB=%d", memMB),
		fmt.Sprintf("SMARTFEED_PEBBLE_FEED_MEMTABLE_MB=%d", feedMemMB), fmt.Sprintf("SMARTFEED_GC_HEAP_FLOOR_MB=%d", floorMB))
	p := &proc{t: t, role: roleAll, bin: bin, env: env, log: filepath.Join(out, "server.log"),
		args: []string{"--admin-grpc-addr="}}
	_ = os.Remove(p.log)
	p.start()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- server log (tail):\n%s", p.tail())
		}
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := t.Context()
	waitHealthy(t, p, healthpb.NewHealthClient(conn))
	g, f := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn)

	// The graph: authors each followed by followersEach of the readers (picked at random).
	mk := func(name string) uint64 {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatalf("CreateUser %s: %v", name, err)
		}
		return u.GetId()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var readerIDs []uint64
	for i := range readers {
		readerIDs = append(readerIDs, mk(fmt.Sprintf("reader%d", i)))
	}
	type author struct{ id, board uint64 }
	var as []author
	for i := range authors {
		id := mk(fmt.Sprintf("author%d", i))
		b, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: id, Name: "stream"})
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, author{id, b.GetId()})
		for _, k := range rng.Perm(readers)[:followersEach] {
			if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: readerIDs[k], TargetId: id}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The load, paced by tickers; each call runs in its own goroutine (bounded), so a slow
	// answer does not lower the offered rate.
	var pins, pinErrs, reads, readErrs atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration // GetFeed latencies since the last sample
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	pace := func(rate, inFlight int, call func(i int)) {
		load.Go(func() {
			sem := make(chan struct{}, inFlight)
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			var calls sync.WaitGroup
			defer calls.Wait()
			for i := 0; ; i++ {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				select {
				case sem <- struct{}{}:
				default:
					continue // inFlight calls outstanding: this tick is dropped (the achieved rate, checked below, shows it)
				}
				calls.Go(func() {
					defer func() { <-sem }()
					call(i)
				})
			}
		})
	}
	pace(pinRate, 16, func(i int) {
		a := as[i%len(as)]
		cctx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
		defer cancel()
		_, err := g.CreatePin(cctx, &graphv1.CreatePinRequest{AuthorId: a.id, BoardId: a.board,
			ImageUrl: fmt.Sprintf("https://i.example.com/mem/%d.jpg", i), RequestId: fmt.Sprintf("mem-%d", i)})
		if err != nil {
			if loadCtx.Err() == nil {
				pinErrs.Add(1)
			}
			return
		}
		pins.Add(1)
	})
	var cursors sync.Map // reader → its last next-page cursor: one read in four pages on
	pace(readRate, 64, func(i int) {
		u := readerIDs[rand.IntN(len(readerIDs))]
		req := &feedv1.GetFeedRequest{UserId: u, PageSize: 10}
		if c, ok := cursors.Load(u); ok && i%4 == 0 {
			req.Cursor = c.(string)
		}
		cctx, cancel := context.WithTimeout(loadCtx, 10*time.Second)
		defer cancel()
		t0 := time.Now()
		r, err := f.GetFeed(cctx, req)
		if err != nil {
			if loadCtx.Err() == nil {
				readErrs.Add(1)
			}
			return
		}
		latMu.Lock()
		lat = append(lat, time.Since(t0))
		latMu.Unlock()
		reads.Add(1)
		if r.GetNextCursor() != "" {
			cursors.Store(u, r.GetNextCursor())
		} else {
			cursors.Delete(u)
		}
	})

	// Sampling: about 180 samples over the run, at least every 2 s.
	every := max(2*time.Second, run/180)
	start := time.Now()
	var samples []memSample
	profiles := map[int]bool{}
	for {
		elapsed := time.Since(start)
		smp := sampleMemory(t, p.cmd.Process.Pid, adminAddr)
		smp.at = elapsed
		smp.pins, smp.pinErrs, smp.reads, smp.readErrs = pins.Load(), pinErrs.Load(), reads.Load(), readErrs.Load()
		latMu.Lock()
		if len(lat) > 0 {
			slices.Sort(lat)
			smp.readP99 = lat[len(lat)*99/100]
		}
		lat = lat[:0]
		latMu.Unlock()
		samples = append(samples, smp)
		writeMemoryCSV(t, filepath.Join(out, "samples.csv"), samples) // each time: a run cut short keeps its samples
		if len(samples)%10 == 1 {
			t.Logf("%6s rss %4d MiB, heap in use %4.0f live %4.0f, caches %4.0f, memtables %4.0f, other %4d MiB; %d pins, %d reads (p99 %v), %d+%d errors",
				elapsed.Round(time.Second), smp.rss>>20, smp.heapInuse/(1<<20), smp.heapLive/(1<<20), smp.cacheTotal/(1<<20),
				smp.memtables/(1<<20), smp.other>>20, smp.pins, smp.reads, smp.readP99.Round(time.Millisecond), smp.pinErrs, smp.readErrs)
		}
		// Heap profiles (inuse after a collection) at a third, two thirds and the end: their
		// difference names whatever grows.
		for third := 1; third <= 3; third++ {
			if !profiles[third] && elapsed >= run*time.Duration(third)/3 {
				profiles[third] = true
				saveHeapProfile(t, adminAddr, filepath.Join(out, fmt.Sprintf("heap-%d.pb.gz", third)))
			}
		}
		if elapsed >= run {
			break
		}
		if p.exited() {
			t.Fatalf("the server exited during the run:\n%s", p.tail())
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(every):
		}
	}
	stopLoad()
	load.Wait()

	// The load happened: most of what was offered was sent and answered.
	last := samples[len(samples)-1]
	secs := last.at.Seconds()
	t.Logf("load: %d pins (%.1f/s), %d reads (%.1f/s), %d pin errors, %d read errors; samples in %s",
		last.pins, float64(last.pins)/secs, last.reads, float64(last.reads)/secs, last.pinErrs, last.readErrs, out)
	if float64(last.pins) < 0.5*pinRate*secs || float64(last.reads) < 0.5*readRate*secs {
		t.Errorf("the load fell under half its rate (%d pins, %d reads in %v): the server did not keep up", last.pins, last.reads, last.at.Round(time.Second))
	}
	if e := last.pinErrs + last.readErrs; float64(e) > 0.01*float64(last.pins+last.reads) {
		t.Errorf("%d calls failed (over 1%%)", e)
	}

	// The bound: what the configuration allows each part to hold.
	const mib = 1 << 20
	heapGoal := max(int64(floorMB)*mib, 2*int64(maxOf(samples, func(s memSample) float64 { return s.heapLive })))
	bound := 3*int64(cacheMB)*mib + memtableFactor*int64(memMB+2*feedMemMB)*mib + heapGoal + runtimeAllowance
	peak := int64(maxOf(samples, func(s memSample) float64 { return float64(s.rss) }))
	t.Logf("RSS peak %d MiB; bound %d MiB = 3 caches × %d + %d × (%d + 2 × %d) memtables + heap goal %d + runtime %d",
		peak/mib, bound/mib, cacheMB, memtableFactor, memMB, feedMemMB, heapGoal/mib, runtimeAllowance/mib)
	if peak > bound {
		t.Errorf("RSS peaked at %d MiB, over the configured bound of %d MiB", peak/mib, bound/mib)
	}

	// The plateau: over the last third, RSS less the block caches, and the live heap, grow
	// by less than plateauGrowth plus plateauSlack (each compared at the peaks of the middle
	// and last thirds, so one collection's timing does not decide; the slack, because a live
	// heap of 12 MiB moves by a few MiB with what is in flight at the collection). RSS is
	// checked on runs of settleRun or more only: before that the memtables and the heap are
	// still growing to their sizes (the first 5 to 10 minutes under this load).
	mid, end := thirds(samples)
	for _, c := range []struct {
		name string
		v    func(memSample) float64
		skip bool
	}{
		{"RSS less the block caches", func(s memSample) float64 { return float64(s.rss) - s.cacheTotal }, run < settleRun},
		{"live heap", func(s memSample) float64 { return s.heapLive }, false},
	} {
		a, b := maxOf(mid, c.v), maxOf(end, c.v)
		t.Logf("%s: peak %.0f MiB in the middle third, %.0f MiB in the last", c.name, a/mib, b/mib)
		if b > a*(1+plateauGrowth)+plateauSlack {
			if c.skip {
				t.Logf("%s grew %.0f%% over the last third: not checked on a run under %v", c.name, 100*(b/a-1), settleRun)
				continue
			}
			t.Errorf("%s grew %.0f%% over the last third (%.0f → %.0f MiB): no plateau", c.name, 100*(b/a-1), a/mib, b/mib)
		}
	}
	cacheCap := 3 * float64(cacheMB) * mib
	t.Logf("block caches: %.0f MiB of %.0f MiB at the end (%.0f%%)", last.cacheTotal/mib, cacheCap/mib, 100*last.cacheTotal/cacheCap)
}

// waitHealthy waits until p answers health SERVING, or fails with its log.
func waitHealthy(t *testing.T, p *proc, hc healthpb.HealthClient) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			t.Fatalf("%s exited at start:\n%s", p.role, p.tail())
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling a process in another address space: no event to wait on
	}
	t.Fatalf("%s not serving within 90s:\n%s", p.role, p.tail())
}

// thirds returns the middle and the last third of s.
func thirds(s []memSample) (mid, end []memSample) {
	n := len(s)
	return s[n/3 : 2*n/3], s[2*n/3:]
}

func maxOf(s []memSample, v func(memSample) float64) float64 {
	m := 0.0
	for _, x := range s {
		m = max(m, v(x))
	}
	return m
}

// sampleMemory reads pid's RSS and the memory series of its /metrics.
func sampleMemory(t *testing.T, pid int, admin string) memSample {
	t.Helper()
	var s memSample
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			s.rss = kb << 10
		}
	}
	body := fetchOK(t, "http://"+admin+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	one := func(name string) float64 {
		fam := fams[name]
		if fam == nil || len(fam.GetMetric()) == 0 {
			t.Fatalf("/metrics has no %s", name)
		}
		m := fam.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetUntyped().GetValue()
	}
	byStore := func(name string, stores ...string) float64 {
		fam := fams[name]
		if fam == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		sum := 0.0
		for _, m := range fam.GetMetric() {
			if len(stores) == 0 || slices.Contains(stores, labelValue(m, "store")) {
				sum += m.GetGauge().GetValue()
			}
		}
		return sum
	}
	s.heapInuse, s.heapLive, s.goSys = one("go_memstats_heap_inuse_bytes"), one("go_gc_heap_live_bytes"), one("go_memstats_sys_bytes")-one("go_memstats_heap_released_bytes")
	s.goroutines, s.fds = one("go_goroutines"), one("process_open_fds")
	s.cacheMain = byStore("smartfeed_pebble_cache_bytes", storeMain)
	s.cacheFeed = byStore("smartfeed_pebble_cache_bytes", storePrimary, storeStandby)
	s.cacheTotal = byStore("smartfeed_pebble_cache_bytes")
	s.memtables = byStore("smartfeed_pebble_memtable_bytes")
	s.memAndCache = s.cacheTotal + s.memtables
	s.other = s.rss - int64(s.memAndCache) - int64(s.goSys)
	return s
}

// fetchOK is the body of a GET of url, which must answer 200.
func fetchOK(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s", url, err, resp.Status)
	}
	return body
}

// saveHeapProfile writes the server's heap profile, taken after a collection, to path.
func saveHeapProfile(t *testing.T, admin, path string) {
	t.Helper()
	if err := os.WriteFile(path, fetchOK(t, "http://"+admin+"/debug/pprof/heap?gc=1"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeMemoryCSV writes the samples, in MiB, with a header.
func writeMemoryCSV(t *testing.T, path string, samples []memSample) {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	fmt.Fprintln(w, "seconds,rss_mib,go_heap_inuse_mib,go_heap_live_mib,go_sys_mib,cache_main_mib,cache_feed_mib,memtables_mib,other_mib,goroutines,open_fds,pins,pin_errors,reads,read_errors,read_p99_ms")
	const mib = 1 << 20
	for _, s := range samples {
		fmt.Fprintf(w, "%.0f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.0f,%.0f,%d,%d,%d,%d,%.1f\n",
			s.at.Seconds(), float64(s.rss)/mib, s.heapInuse/mib, s.heapLive/mib, s.goSys/mib, s.cacheMain/mib, s.cacheFeed/mib,
			s.memtables/mib, float64(s.other)/mib, s.goroutines, s.fds, s.pins, s.pinErrs, s.reads, s.readErrs,
			float64(s.readP99.Microseconds())/1000)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRegistryHasLiveHeap: the process's registry exports the live heap (what the last
// collection kept), the series that tells a leak from the heap filling up to its goal.
func TestRegistryHasLiveHeap(t *testing.T) {
	runtime.GC() // the live heap is that of the last collection: zero before the first
	ms := gatherSeries(newRegistry(), "go_gc_heap_live_bytes")
	if len(ms) != 1 || ms[0].GetGauge().GetValue() <= 0 {
		t.Fatalf("go_gc_heap_live_bytes: %v, want one positive gauge", ms)
	}
}
