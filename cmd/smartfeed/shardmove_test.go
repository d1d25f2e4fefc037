package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenmove"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// TestShardsMoveCommand runs `smartfeed all` on Pebble with an extra HBase store (--stores) and a
// shard map in a file or in ZooKeeper, and drives `shards move` against its admin gRPC port: a
// dry run changes nothing, the move switches the range to HBase and rewrites the map where it
// lives (with ZooKeeper, once the process acknowledged each map), users on the moved shards read
// back from HBase, and a second run reports the move done.
func TestShardsMoveCommand(t *testing.T) {
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	t.Run("file", func(t *testing.T) { testShardsMove(t, false) })
	t.Run("zookeeper", func(t *testing.T) { testShardsMove(t, true) })
}

func testShardsMove(t *testing.T, useZK bool) {
	zk := testenv.HBase(t)
	cfg := testConfig(t)
	prefix := fmt.Sprintf("cmdmv%d_", time.Now().UnixNano())
	cfg.Storage.HBase.TablePrefix = prefix
	cfg.Storage.Stores = "cold=hbase:" + zk
	initial := []byte(`{"ranges": [{"from": 0, "to": 7, "store": "default", "open": true},
		{"from": 8, "to": 4095, "store": "default", "open": false}]}`)
	mapFile := filepath.Join(t.TempDir(), "shards.json")
	readMap := func() []byte {
		b, err := os.ReadFile(mapFile)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if useZK {
		cfg.Storage.ShardMap.ZK = zk
		cfg.Storage.ShardMap.ZKPath = fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
		m0, err := zen.ParseShardMap(initial)
		if err != nil {
			t.Fatal(err)
		}
		if err := shardwatch.Publish(t.Context(), zk, cfg.Storage.ShardMap.ZKPath, m0); err != nil {
			t.Fatal(err)
		}
		readMap = func() []byte {
			conn, _, err := gozk.Connect([]string{zk}, 5*time.Second, gozk.WithLogger(nopPrintf{}))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			b, _, err := conn.Get(cfg.Storage.ShardMap.ZKPath)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	} else {
		if err := os.WriteFile(mapFile, initial, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.Storage.ShardMap.File = mapFile
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: namedStorePrefix(prefix, "cold")})
		if err != nil {
			t.Logf("drop tables: %v", err)
			return
		}
		defer hb.Close()
		for _, name := range zenroute.ShardedTables() {
			_ = hb.Drop(ctx, name)
		}
	})
	a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var users []zen.ID
	for i := range 40 {
		o, err := a.graph.Create(t.Context(), zen.TypeUser, 0, map[string]any{"username": fmt.Sprint("u", i)})
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, o.ID)
	}
	adm := cfg.Admin
	adm.GRPCAddr = a.adminGRPCAddr()
	run := func(req *shardv1.MoveShardsRequest) string {
		t.Helper()
		var out bytes.Buffer
		if err := shardsMove(t.Context(), adm, req, &out); err != nil {
			t.Fatalf("shards move %v: %v\n%s", req, err, out.String())
		}
		return out.String()
	}
	out := run(&shardv1.MoveShardsRequest{From: 4, To: 7, Target: "cold", DryRun: true})
	t.Logf("dry run:\n%s", out)
	if !strings.Contains(out, "dry run: would copy") || !strings.Contains(out, "from default to cold") {
		t.Errorf("dry run output:\n%s", out)
	}
	if r, _ := a.router.Shards().RangeFor(5); r.Store != "default" {
		t.Fatalf("the dry run moved shard 5: %+v", r)
	}
	out = run(&shardv1.MoveShardsRequest{From: 4, To: 7, Target: "cold"})
	t.Logf("move:\n%s", out)
	if !strings.Contains(out, "moved shards 4–7 from default to cold") || !strings.Contains(out, "fenced for") {
		t.Errorf("move output:\n%s", out)
	}
	b := readMap()
	m, err := zen.ParseShardMap(b)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := m.RangeFor(6); r.Store != "cold" || r.Fenced || !r.Open {
		t.Errorf("published map after the move: %s", b)
	}
	if !a.router.Shards().Equal(m) || !a.graph.Shards().Equal(m) {
		t.Errorf("maps in use after the move: router %v, graph %v", a.router.Shards().Ranges(), a.graph.Shards().Ranges())
	}
	// Users on the moved shards read back, from HBase.
	cold, _ := a.router.Backend("cold")
	objs, err := cold.Table(t.Context(), zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, u := range users {
		if _, err := a.graph.Get(t.Context(), u); err != nil {
			t.Errorf("user %v (shard %d) after the move: %v", u, u.Shard(), err)
		}
		if u.Shard() >= 4 && u.Shard() <= 7 {
			moved++
			k := []byte{byte(u >> 56), byte(u >> 48), byte(u >> 40), byte(u >> 32), byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}
			if _, err := objs.Get(t.Context(), k); err != nil {
				t.Errorf("user %v is not on HBase: %v", u, err)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no user on the moved shards")
	}
	// New users still land on shards 4–7, now on HBase.
	if _, err := a.graph.Create(t.Context(), zen.TypeUser, users[5], map[string]any{"username": "late"}); err != nil {
		t.Errorf("create after the move: %v", err)
	}
	out = run(&shardv1.MoveShardsRequest{From: 4, To: 7, Target: "cold"})
	if !strings.Contains(out, "already on cold") {
		t.Errorf("second move output:\n%s", out)
	}
	var bad bytes.Buffer
	if err := shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: 0, To: 9, Target: "cold"}, &bad); err == nil ||
		!strings.Contains(err.Error(), "several stores") {
		t.Errorf("move of a range over two stores: %v", err)
	}
}

type nopPrintf struct{}

func (nopPrintf) Printf(string, ...any) {}

// TestShardsMoveRecoversFromACrashWhileFenced starts a process on the state a crash while fenced
// leaves (the map file with the range fenced, the progress row in the meta table): once serving,
// it lifts the fence, so the shards take writes again, and the rerun of the move finishes it.
func TestShardsMoveRecoversFromACrashWhileFenced(t *testing.T) {
	zk := testenv.HBase(t)
	cfg := testConfig(t)
	prefix := fmt.Sprintf("cmdmvr%d_", time.Now().UnixNano())
	cfg.Storage.HBase.TablePrefix = prefix
	cfg.Storage.Stores = "cold=hbase:" + zk
	mapFile := filepath.Join(t.TempDir(), "shards.json")
	if err := os.WriteFile(mapFile, []byte(`{"ranges": [{"from": 0, "to": 3, "store": "default", "open": true},
		{"from": 4, "to": 7, "store": "default", "open": true, "fenced": true},
		{"from": 8, "to": 4095, "store": "default", "open": false}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Storage.ShardMap.File = mapFile
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: namedStorePrefix(prefix, "cold")}); err == nil {
			for _, name := range zenroute.ShardedTables() {
				_ = hb.Drop(ctx, name)
			}
			hb.Close()
		}
	})
	a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	meta, err := a.stores.table(t.Context(), storeMain, tableMeta)
	if err != nil {
		t.Fatal(err)
	}
	if err := meta.Apply(t.Context(), []zen.Mutation{{Key: []byte("shardmove"),
		Value: []byte(`{"plan":{"From":4,"To":7,"Target":"cold"},"source":"default","phase":"fenced","pass":2}`)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, _ := a.router.Shards().RangeFor(5); !r.Fenced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stale fence was not lifted within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := os.ReadFile(mapFile); strings.Contains(string(b), "fenced") {
		t.Errorf("map file still fenced: %s", b)
	}
	u, err := a.graph.Create(t.Context(), zen.TypeUser, 0, map[string]any{"username": "after"})
	if err != nil {
		t.Fatalf("create after the fence was lifted: %v", err)
	}
	adm := cfg.Admin
	adm.GRPCAddr = a.adminGRPCAddr()
	var out bytes.Buffer
	if err := shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: 4, To: 7, Target: "cold"}, &out); err != nil {
		t.Fatalf("rerun: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "(resumed an unfinished move)") {
		t.Errorf("rerun output:\n%s", out.String())
	}
	if _, err := a.graph.Get(t.Context(), u.ID); err != nil {
		t.Errorf("user after the move: %v", err)
	}
}

// TestDemoWhileShardsMove is issue #23's acceptance on the real demo: `smartfeed demo` runs on
// Pebble (graph on shards 0–15) with an extra HBase store, and `shards move --shards 8-15 --to
// cold` runs while its events write and its GetFeed calls read. Afterwards every row Pebble held
// for shards 8–15 is on HBase, the rows written after the switch are on HBase only, the demo
// logged no failed write and kept serving feeds, and the fence's duration is reported.
func TestDemoWhileShardsMove(t *testing.T) {
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	zk := testenv.HBase(t)
	redis, ns := testenv.RedisNamespace(t, "demomv")
	dir := t.TempDir()
	prefix := fmt.Sprintf("demomv%d_", time.Now().UnixNano())
	mapFile := filepath.Join(t.TempDir(), "shards.json")
	if err := os.WriteFile(mapFile, []byte(`{"ranges": [{"from": 0, "to": 15, "store": "default", "open": true},
		{"from": 16, "to": 4095, "store": "default"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: namedStorePrefix(prefix, "cold")}); err == nil {
			for _, name := range zenroute.ShardedTables() {
				_ = hb.Drop(ctx, name)
			}
			hb.Close()
		}
	})
	// The demo runs until the move is over and 5 s more (writes after the switch), as if
	// stopped with Ctrl-C: a fixed duration ended it mid-move on a loaded CI machine.
	args := []string{"demo", "--duration", "10m", "--data-dir", dir, "--redis-addr", redis,
		"--redis-namespace", ns,
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-grpc-addr", "127.0.0.1:0",
		"--demo-users", "120", "--demo-follows", "10", "--demo-events-per-sec", "40", "--demo-reads-per-sec", "40",
		"--stores", "cold=hbase:" + zk, "--hbase-table-prefix", prefix, "--shard-map-file", mapFile}
	out := &lockedBuffer{}
	done := make(chan error, 1)
	demoCtx, stopDemo := context.WithCancel(t.Context())
	defer stopDemo()
	go func() { done <- run(demoCtx, args, out, io.Discard) }()
	admRe := regexp.MustCompile(`--admin-grpc-addr (\S+)`)
	var admAddr string
	deadline := time.Now().Add(60 * time.Second)
	for admAddr == "" {
		if m := admRe.FindStringSubmatch(out.String()); m != nil && strings.Contains(out.String(), "Ctrl-C stops") {
			admAddr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("demo ended before serving: %v\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo not serving within 60s:\n%s", out.String())
		}
	}
	metricsURL := regexp.MustCompile(`metrics: (http://\S+/metrics)`).FindStringSubmatch(out.String())
	if metricsURL == nil {
		t.Fatalf("no metrics address in the demo's output:\n%s", out.String())
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the demo's events fanned out and its GetFeed calls answered", func() bool {
		s := metricSums(t, metricsURL[1], "smartfeed_worker_pool_inserts_total", "smartfeed_feed_requests_total")
		return s[0] > 0 && s[1] > 0
	})
	adm := config.DefaultConfig().Admin
	adm.GRPCAddr = admAddr
	moveInPieces(t, adm, 8, 15, "cold")
	// Writes after the switch: the demo's new pins on shards 8–15 reach HBase, a few seconds'
	// worth of them.
	waitNewObjects(t, zk, namedStorePrefix(prefix, "cold"), 8, 15, 50)
	stopDemo()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("demo: %s", lastLines(out.String(), 2))
	sum := summaryNumbers(t, out.String())
	if sum["events"] == 0 || sum["GetFeed"] == 0 {
		t.Errorf("demo summary %v", sum)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "smartfeed.log")); bytes.Contains(b, []byte("\tERROR\t")) {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "\tERROR\t") {
				t.Errorf("demo log: %s", l)
			}
		}
	}
	// Pebble (frozen for shards 8–15 since the fence) against HBase.
	peb, err := zenpebble.Open(filepath.Join(dir, storeMain))
	if err != nil {
		t.Fatal(err)
	}
	defer peb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: namedStorePrefix(prefix, "cold")})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	start, stop := zen.ShardKeyRange(8, 15)
	var moved, after int
	for _, name := range zenroute.ShardedTables() {
		scan := func(s zen.Store) map[string]string {
			tb, err := s.Table(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			kvs, err := tb.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, kv := range kvs {
				m[string(kv.Key)] = string(kv.Value)
			}
			return m
		}
		src, dst := scan(peb), scan(hb)
		missing, gone := 0, map[string]int{}
		for k := range src {
			if _, ok := dst[k]; ok {
				continue
			}
			if name == tablePools {
				if why := poolRowGone(k, src, dst); why != "" {
					gone[why]++
					continue
				}
			}
			missing++
		}
		if missing > 0 {
			t.Errorf("%s: %d of %d Pebble rows of shards 8–15 missing on HBase", name, missing, len(src))
		}
		if len(gone) > 0 {
			t.Logf("%s: Pebble rows deleted on HBase after the switch, as the pools allow: %v", name, gone)
		}
		for k := range dst {
			if _, ok := src[k]; !ok {
				after++
			}
		}
		moved += len(src)
	}
	if moved == 0 {
		t.Fatal("no rows on shards 8–15")
	}
	if after == 0 {
		t.Error("no row written to shards 8–15 after the switch reached HBase")
	}
	t.Logf("%d rows moved; %d rows written to the moved shards after the switch, on HBase only", moved, after)
}

// waitNewObjects waits until the objects table of the HBase store at zk with tablePrefix holds n
// more rows of shards from–to than when it is called.
func waitNewObjects(t *testing.T, zk, tablePrefix string, from, to uint16, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*testenv.WaitTimeout)
	defer cancel()
	hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: tablePrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	tb, err := hb.Table(ctx, zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	start, stop := zen.ShardKeyRange(from, to)
	rows := func() int {
		kvs, err := tb.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop})
		if err != nil {
			t.Fatalf("scan objects of shards %d–%d: %v", from, to, err)
		}
		return len(kvs)
	}
	before := rows()
	testenv.WaitFor(t, testenv.WaitTimeout, fmt.Sprintf("%d objects written to shards %d–%d after the switch", n, from, to), func() bool {
		return rows() >= before+n
	})
}

// metricSums scrapes the /metrics at url once and returns the sum of each named family's series
// (0 for a family with none).
func metricSums(t *testing.T, url string, names ...string) []float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(fetchOK(t, url)))
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	sums := make([]float64, len(names))
	for i, name := range names {
		for _, m := range fams[name].GetMetric() {
			sums[i] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return sums
}

// moveInPieces runs `shards move` for from–to and, when the server refuses to fence because a
// catch-up pass over the range takes longer than its limit (a loaded machine with the demo's
// pools churning), does what the refusal says: moves the two halves, down to single shards.
func moveInPieces(t *testing.T, adm config.Admin, from, to uint32, target string) {
	t.Helper()
	var mv bytes.Buffer
	err := shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: from, To: to, Target: target}, &mv)
	switch {
	case err == nil:
		t.Logf("shards move %d–%d during the demo:\n%s", from, to, lastLines(mv.String(), 1))
	case from < to && strings.Contains(err.Error(), zenmove.ErrFenceTooLong.Error()):
		t.Logf("shards move %d–%d refused (%v): moving its halves", from, to, err)
		mid := from + (to-from)/2
		moveInPieces(t, adm, from, mid, target)
		moveInPieces(t, adm, mid+1, to, target)
	default:
		t.Fatalf("shards move %d–%d: %v\n%s", from, to, err, mv.String())
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// poolRowGone says why the pools row k, frozen on Pebble (src) at the fence and absent
// from HBase (dst), was deleted by the generator or a reader after the switch, as the pools'
// rules allow (zen.Pools), or returns "" if nothing may have deleted it:
//
//   - a gone row (user|0x00|pin) holding a taken tombstone or a restoring mark: a chunk not
//     delivered was given back (Restore lifts them). A forgotten tombstone is never lifted
//     (only expired, after a TTL the demo does not reach), so its absence is a lost row.
//   - a pool row (user|source|^score|pin) whose pin has a tombstone on HBase (Take deletes the
//     row it claims; readers delete rows under a forgotten one) or had a forgotten one on Pebble,
//     or whose pin has another row for the user on HBase (upkeep deletes a pin's worse rows).
func poolRowGone(k string, src, dst map[string]string) string {
	const goneLen, poolLen = 8 + 1 + 8, 8 + 1 + 8 + 8
	const taken, forgotten, restoring = 1, 2, 3
	switch {
	case len(k) == goneLen && k[8] == 0:
		if v := src[k]; len(v) >= 2 && v[0] == 0 && (v[1] == taken || v[1] == restoring) {
			return "tombstone lifted by a give-back"
		}
	case len(k) == poolLen && k[8] != 0:
		user, pin := k[:8], k[17:]
		gone := user + "\x00" + pin
		if v, ok := dst[gone]; ok && len(v) > 0 && v[0] == 0 {
			return "row under a tombstone on HBase"
		}
		if v := src[gone]; len(v) >= 2 && v[0] == 0 && v[1] == forgotten {
			return "row under a forgotten tombstone"
		}
		for o := range dst {
			if len(o) == poolLen && o[:8] == user && o[17:] == pin && o[8] != 0 {
				return "another row of the pin"
			}
		}
	}
	return ""
}

// TestShardsMoveAcrossProcesses runs two processes on HBase that share the shard map through
// ZooKeeper (a graph process writing users, and an `all` process the move runs in): the fence
// and the switch wait for both processes' acknowledgements, every user the writer was told was
// created reads back afterwards from both processes, and both route shards 4–7 to the new store.
func TestShardsMoveAcrossProcesses(t *testing.T) {
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	zk := testenv.HBase(t)
	prefix := fmt.Sprintf("cmdmvp%d_", time.Now().UnixNano())
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
	m0, err := zen.ParseShardMap([]byte(`{"ranges": [{"from": 0, "to": 7, "store": "default", "open": true},
		{"from": 8, "to": 4095, "store": "default"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := shardwatch.Publish(t.Context(), zk, zpath, m0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, p := range []string{prefix, namedStorePrefix(prefix, "cold")} {
			if hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: p}); err == nil {
				for _, name := range append(zenroute.ShardedTables(), tableMeta, tableGenState, tableFeed, zen.OutboxTable) {
					_ = hb.Drop(ctx, name)
				}
				hb.Close()
			}
		}
	})
	_, ns := testenv.RedisNamespace(t, "cmdmvp")
	start := func(role string) *app {
		cfg := testConfig(t)
		cfg.Redis.Namespace = ns
		cfg.Storage.Backend = config.BackendHBase
		cfg.Storage.HBase.PoolsZK, cfg.Storage.HBase.PrimaryZK, cfg.Storage.HBase.StandbyZK = zk, zk, zk
		cfg.Storage.HBase.TablePrefix = prefix
		cfg.Storage.Stores = "cold=hbase:" + zk
		cfg.Storage.ShardMap.ZK, cfg.Storage.ShardMap.ZKPath = zk, zpath
		a, err := newApp(t.Context(), role, cfg, zap.NewNop(), newRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- a.run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run %s: %v", role, err)
			}
		})
		return a
	}
	mover, writer := start(roleAll), start(roleGraph)

	// The writer process creates users on shards 0–7 and updates them, the whole time.
	wctx, stop := context.WithCancel(t.Context())
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    []zen.ID
		refused  int
		writeErr error
	)
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			o, err := writer.graph.Create(wctx, zen.TypeUser, 0, map[string]any{"username": fmt.Sprint("w", i)})
			mu.Lock()
			switch {
			case err == nil:
				acked = append(acked, o.ID)
			case errors.Is(err, zen.ErrUnavailable): // fenced, or the map not confirmed current
				refused++
			case wctx.Err() == nil:
				writeErr = err
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, zen.ErrUnavailable) {
				return
			}
		}
	})
	// A write on the moved shards acknowledged before the move, and one after it (below).
	onMoved := func(id zen.ID) bool { return id.Shard() >= 4 && id.Shard() <= 7 }
	ackedOnMoved := func(from int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return writeErr != nil || slices.ContainsFunc(acked[from:], onMoved)
		}
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the writer's first user on shards 4–7", ackedOnMoved(0))
	adm := mover.cfg.Admin
	adm.GRPCAddr = mover.adminGRPCAddr()
	var out bytes.Buffer
	if err := shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: 4, To: 7, Target: "cold"}, &out); err != nil {
		t.Fatalf("shards move: %v\n%s", err, out.String())
	}
	t.Logf("move: %s", lastLines(out.String(), 1))
	mu.Lock()
	atSwitch := len(acked)
	mu.Unlock()
	testenv.WaitFor(t, testenv.WaitTimeout, "a user on shards 4–7 written after the switch", ackedOnMoved(atSwitch))
	stop()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer process: %v", writeErr)
	}
	// Both processes acknowledged the last version of the map, and route by it.
	conn, _, err := gozk.Connect([]string{zk}, 5*time.Second, gozk.WithLogger(nopPrintf{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, st, err := conn.Get(zpath)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := conn.Children(shardwatch.AckPath(zpath))
	if err != nil || len(ids) != 2 {
		t.Fatalf("acknowledging processes: %v, %v; want 2", ids, err)
	}
	for _, id := range ids {
		b, _, err := conn.Get(shardwatch.AckPath(zpath) + "/" + id)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf(`"version":%d,`, st.Version)) {
			t.Errorf("acknowledgement of %s: %s, %v; want version %d", id, b, err, st.Version)
		}
	}
	for name, a := range map[string]*app{"mover": mover, "writer": writer} {
		if r, _ := a.router.Shards().RangeFor(5); r.Store != "cold" || r.Fenced {
			t.Errorf("%s routes shard 5 by %+v", name, r)
		}
	}
	// Every acknowledged user reads back from both processes; those on 4–7 are on the new store.
	mu.Lock()
	defer mu.Unlock()
	cold, _ := mover.router.Backend("cold")
	objs, err := cold.Table(t.Context(), zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, id := range acked {
		for name, a := range map[string]*app{"mover": mover, "writer": writer} {
			if _, err := a.graph.Get(t.Context(), id); err != nil {
				t.Fatalf("%s: acknowledged user %v (shard %d): %v", name, id, id.Shard(), err)
			}
		}
		if id.Shard() >= 4 && id.Shard() <= 7 {
			moved++
			if _, err := objs.Get(t.Context(), binary.BigEndian.AppendUint64(nil, uint64(id))); err != nil {
				t.Fatalf("user %v (shard %d) is not on the new store: %v", id, id.Shard(), err)
			}
		}
	}
	t.Logf("%d users acknowledged (%d on the moved shards), %d writes refused as fenced", len(acked), moved, refused)
	if moved == 0 {
		t.Error("no user on the moved shards")
	}
}
