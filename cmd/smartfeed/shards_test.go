package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/testenv"
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
	time.Sleep(300 * time.Millisecond)
	if !a.graph.Shards().Equal(m) {
		t.Fatalf("a map naming an unknown store replaced the one in use: %v", a.graph.Shards().Ranges())
	}
	if got := gaugeOrCounter(t, a.reg, "smartfeed_shardmap_updates_total"); got < 2 {
		t.Errorf("shard map updates counted %v, want the applied and the refused", got)
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
