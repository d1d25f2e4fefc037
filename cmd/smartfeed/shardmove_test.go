package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/testenv"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// TestShardsMoveCommand runs `smartfeed all` on Pebble with an extra HBase store (--stores) and a
// shard map in a file or in ZooKeeper, and drives `shards move` against its admin gRPC port: a
// dry run changes nothing, the move switches the range to HBase and rewrites the map where it
// lives (with ZooKeeper, once the process acknowledged each map), users on the moved shards read
// back from HBase, and a second run reports the move done.
func TestShardsMoveCommand(t *testing.T) {
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
		hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: prefix})
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
		if hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: prefix}); err == nil {
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
