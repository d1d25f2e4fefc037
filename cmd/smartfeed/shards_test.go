package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/testenv"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
)

// TestLiveShardMapFromZooKeeper: a running process applies a shard map pushed to ZooKeeper (the
// ZooKeeper of the test HBase) without a restart: users created afterwards land on the shards
// the new map opens; a bad map pushed after it is refused and changes nothing.
func TestLiveShardMapFromZooKeeper(t *testing.T) {
	quorum := testenv.HBase(t)
	cfg := testConfig(t)
	cfg.Storage.ShardMap.ZK = quorum
	cfg.Storage.ShardMap.ZKPath = fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
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
	m, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 99, Store: "default"},
		{From: 100, To: 101, Store: "default", Open: true}, {From: 102, To: 4095, Store: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := shardwatch.Publish(t.Context(), quorum, cfg.Storage.ShardMap.ZKPath, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !a.graph.Shards().Equal(m) {
		if time.Now().After(deadline) {
			t.Fatal("the published shard map was not applied within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 6 {
		o, err := a.graph.Create(t.Context(), zen.TypeUser, 0, map[string]any{"username": "u"})
		if err != nil {
			t.Fatal(err)
		}
		if s := o.ID.Shard(); s != 100 && s != 101 {
			t.Fatalf("a user created under the new map is on shard %d", s)
		}
	}
	bad, _ := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 4095, Store: "elsewhere", Open: true}})
	if err := shardwatch.Publish(t.Context(), quorum, cfg.Storage.ShardMap.ZKPath, bad); err != nil {
		t.Fatal(err)
	}
	// The watcher counts every map it is offered by its outcome: once it counted a refused one,
	// the bad map was looked at, and the one in use must be unchanged.
	refused := func() float64 {
		mfs, err := a.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				for _, l := range mt.GetLabel() {
					if mf.GetName() == "smartfeed_shardmap_updates_total" && l.GetName() == "result" && l.GetValue() == "refused" {
						n += mt.GetCounter().GetValue()
					}
				}
			}
		}
		return n
	}
	deadline = time.Now().Add(10 * time.Second)
	for refused() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the bad map was not counted refused within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !a.graph.Shards().Equal(m) {
		t.Fatalf("a map naming an unknown store replaced the one in use: %v", a.graph.Shards().Ranges())
	}
}

func TestParseShardRange(t *testing.T) {
	for _, tc := range []struct {
		in       string
		from, to uint16
		ok       bool
	}{
		{"16-31", 16, 31, true}, {"7", 7, 7, true}, {"0-65535", 0, 65535, true}, {"5-5", 5, 5, true},
		{"", 0, 0, false}, {"31-16", 0, 0, false}, {"1-65536", 0, 0, false}, {"-3", 0, 0, false}, {"3-", 0, 0, false},
		{"1-2-3", 0, 0, false}, {"a-b", 0, 0, false}, {" 1-2", 0, 0, false}, {"+1-2", 0, 0, false}, {"1..2", 0, 0, false},
	} {
		from, to, err := parseShardRange(tc.in)
		if (err == nil) != tc.ok || from != tc.from || to != tc.to {
			t.Errorf("parseShardRange(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, from, to, err, tc.from, tc.to, tc.ok)
		}
	}
}

// FuzzParseShardRange: any input either is digits, optionally a dash and digits, and parses to
// from ≤ to (as its canonical form does), or fails with an error that quotes a bounded part of
// it; never a panic.
func FuzzParseShardRange(f *testing.F) {
	for _, s := range []string{"16-31", "7", "", "31-16", "1-2-3", "65535-65535", strings.Repeat("9", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		from, to, err := parseShardRange(s)
		if err != nil {
			if len(err.Error()) > 400 {
				t.Fatalf("error of %d bytes for a %d-byte input", len(err.Error()), len(s))
			}
			return
		}
		if from > to {
			t.Fatalf("%q parsed to %d > %d", s, from, to)
		}
		if !shardRangeRe.MatchString(s) {
			t.Fatalf("%q accepted", s)
		}
		f2, t2, err := parseShardRange(fmt.Sprintf("%d-%d", from, to))
		if err != nil || f2 != from || t2 != to {
			t.Fatalf("%q parsed to %d-%d, whose canonical form parses to %d-%d, %v", s, from, to, f2, t2, err)
		}
	})
}

var shardRangeRe = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// TestShardsCheckRefusesIncompleteMaps: `shards check` accepts only maps that cover shards 0–4095
// exactly; one that ends early leaves a gap, one that ends late overflows.
func TestShardsCheckRefusesIncompleteMaps(t *testing.T) {
	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"complete", `{"ranges": [{"from": 0, "to": 4095, "store": "default", "open": true}]}`, ""},
		{"two ranges", `{"ranges": [{"from": 0, "to": 99, "store": "default"}, {"from": 100, "to": 4095, "store": "default", "open": true}]}`, ""},
		{"shards 0–100 only", `{"ranges": [{"from": 0, "to": 100, "store": "default", "open": true}]}`, "shards 101–4095 are in no range"},
		{"ends at 4094", `{"ranges": [{"from": 0, "to": 4094, "store": "default", "open": true}]}`, "shards 4095–4095 are in no range"},
		{"ends at 4096", `{"ranges": [{"from": 0, "to": 4096, "store": "default", "open": true}]}`, "shards 4096–4096 are past the last shard"},
		{"ends at 9000", `{"ranges": [{"from": 0, "to": 4095, "store": "default", "open": true}, {"from": 4096, "to": 9000, "store": "default"}]}`,
			"shards 4096–9000 are past the last shard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "shards.json")
			if err := os.WriteFile(file, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			err := run(t.Context(), []string{"shards", "check", file}, &out, &errb)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("shards check: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("shards check: %v, want an error containing %q\n%s", err, tc.wantErr, out.String())
			}
		})
	}
}

// TestShardsPublishChecksTheRunningProcesses: `shards publish` refuses a map that a process
// watching the znode would refuse (a store it does not know, though the publisher's own --stores
// has it), and leaves the znode as it was.
func TestShardsPublishChecksTheRunningProcesses(t *testing.T) {
	quorum := testenv.HBase(t)
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
	m0 := zen.DefaultShardMap()
	if err := shardwatch.Publish(t.Context(), quorum, zpath, m0); err != nil {
		t.Fatal(err)
	}
	// A running process that knows only the default store, acknowledging the map.
	w, err := shardwatch.New(func(*zen.ShardMap) {}, shardwatch.Options{KnownStores: []string{"default"}, AckID: "proc0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = w.WatchZK(ctx, quorum, zpath); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, err := shardwatch.WaitAcks(t.Context(), quorum, zpath, 0); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not acknowledge the map within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	file := filepath.Join(t.TempDir(), "shards.json")
	if err := os.WriteFile(file, []byte(`{"ranges": [{"from": 0, "to": 2047, "store": "default"},
		{"from": 2048, "to": 4095, "store": "cold", "open": true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err = run(t.Context(), []string{"shards", "publish", file, "--stores", "cold=hbase:" + quorum,
		"--shard-map-zk", quorum, "--shard-map-zk-path", zpath}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "process proc0 would refuse it") || !strings.Contains(err.Error(), `unknown store "cold"`) {
		t.Fatalf("shards publish of a map a process would refuse: %v\n%s", err, out.String())
	}
	conn, _, err := gozk.Connect([]string{quorum}, 5*time.Second, gozk.WithLogger(nopPrintf{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _, err := conn.Get(zpath)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := zen.ParseShardMap(b); err != nil || !got.Equal(m0) {
		t.Errorf("the znode changed after a refused publish: %s", b)
	}
}

// TestShardsMoveWithoutStores: `shards move` against a process started without --stores fails
// with FailedPrecondition naming --stores, not as an unknown service.
func TestShardsMoveWithoutStores(t *testing.T) {
	cfg := testConfig(t)
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
	adm := cfg.Admin
	adm.GRPCAddr = a.adminGRPCAddr()
	var out bytes.Buffer
	err = shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: 8, To: 15, Target: "cold"}, &out)
	if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "--stores") ||
		strings.Contains(err.Error(), "unknown service") {
		t.Fatalf("shards move without --stores: %v", err)
	}
}
