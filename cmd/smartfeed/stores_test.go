package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
)

// TestPebbleStatsGauges: a Pebble store opened through stores exports its LSM shape, labelled
// with the store's name, and a store closed and opened again under the same name reports the
// new one (no duplicate registration).
func TestPebbleStatsGauges(t *testing.T) {
	ctx := context.Background()
	cfg := config.DefaultConfig().Storage
	cfg.DataDir = t.TempDir()
	reg := newRegistry()
	st := newStores(cfg, zap.NewNop(), reg)
	memtables := func() float64 {
		t.Helper()
		for _, m := range gatherSeries(reg, "smartfeed_pebble_memtables") {
			if labelValue(m, "store") == storeMain {
				return m.GetGauge().GetValue()
			}
		}
		t.Fatal("no smartfeed_pebble_memtables{store=main}")
		return 0
	}
	// A --stores Pebble store gets the same options and gauges, labelled with its key.
	if _, err := st.named(ctx, config.NamedStore{Name: "moved", Backend: config.BackendPebble, Addr: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	var named bool
	for _, m := range gatherSeries(reg, "smartfeed_pebble_memtables") {
		named = named || labelValue(m, "store") == "store:moved"
	}
	if !named {
		t.Error("no smartfeed_pebble_memtables{store=\"store:moved\"} for a --stores Pebble store")
	}
	for _, name := range []string{"smartfeed_pebble_flushes_total", "smartfeed_pebble_write_stalls_total", "smartfeed_pebble_write_stall_seconds_total"} {
		var found bool
		for _, m := range gatherSeries(reg, name) {
			found = found || (labelValue(m, "store") == "store:moved" && m.GetCounter() != nil)
		}
		if !found {
			t.Errorf("no counter %s{store=\"store:moved\"}", name)
		}
	}
	for round := range 2 {
		if _, err := st.get(ctx, storeMain); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := memtables(); n < 1 {
			t.Errorf("round %d: open store: %v memtables, want ≥ 1", round, n)
		}
		// The memory gauges: an open store's memtable has its arena; the block cache is a
		// gauge from the start (empty until blocks are read).
		for _, g := range []struct {
			name string
			min  float64
		}{{"smartfeed_pebble_memtable_bytes", 1}, {"smartfeed_pebble_cache_bytes", 0}} {
			var found bool
			for _, m := range gatherSeries(reg, g.name) {
				if labelValue(m, "store") == storeMain {
					found = true
					if v := m.GetGauge().GetValue(); v < g.min {
						t.Errorf("round %d: %s{store=main} = %v, want ≥ %v", round, g.name, v, g.min)
					}
				}
			}
			if !found {
				t.Errorf("round %d: no gauge %s{store=main}", round, g.name)
			}
		}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		if n := memtables(); n != 0 {
			t.Errorf("round %d: closed store: %v memtables, want 0", round, n)
		}
	}
}

// TestFeedMemTable: the feed's Pebble stores get storage.pebble_feed_memtable_mb in place of
// storage.pebble_memtable_mb: the same writes fill (and flush) a feed store's memtable and not
// the main store's.
func TestFeedMemTable(t *testing.T) {
	ctx := context.Background()
	cfg := config.DefaultConfig().Storage
	cfg.DataDir = t.TempDir()
	cfg.PebbleNoSync = true
	cfg.PebbleMemTableMB, cfg.PebbleFeedMemTableMB = 64, 1
	reg := newRegistry()
	st := newStores(cfg, zap.NewNop(), reg)
	t.Cleanup(func() { _ = st.close() })
	flushes := func(store string) float64 {
		t.Helper()
		for _, m := range gatherSeries(reg, "smartfeed_pebble_flushes_total") {
			if labelValue(m, "store") == store {
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no smartfeed_pebble_flushes_total{store=%q}", store)
		return 0
	}
	val := make([]byte, 4<<10)
	for _, store := range []string{storeMain, storePrimary} {
		tb, err := st.table(ctx, store, "memtest")
		if err != nil {
			t.Fatal(err)
		}
		for batch := range 24 { // 3 MiB: three times the feed's memtable, a twentieth of main's
			muts := make([]zen.Mutation, 32)
			for i := range muts {
				muts[i] = zen.Mutation{Key: fmt.Appendf(nil, "row-%05d", batch*32+i), Value: val}
			}
			if err := tb.Apply(ctx, muts); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for flushes(storePrimary) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := flushes(storePrimary); got < 1 {
		t.Errorf("feed-primary flushes after 3 MiB with a 1 MiB memtable = %v, want ≥ 1", got)
	}
	if got := flushes(storeMain); got != 0 {
		t.Errorf("main flushes after 3 MiB with a 64 MiB memtable = %v, want 0", got)
	}
}

// TestSharedCompactionBound: with storage.pebble_compactions the Pebble stores share one bound,
// whose gauge reads it, made again when the stores reopen after a close; without it none.
func TestSharedCompactionBound(t *testing.T) {
	ctx := context.Background()
	slots := func(reg *prometheus.Registry) []float64 {
		var v []float64
		for _, m := range gatherSeries(reg, "smartfeed_pebble_compaction_slots") {
			v = append(v, m.GetGauge().GetValue())
		}
		return v
	}
	cfg := config.DefaultConfig().Storage
	cfg.DataDir = t.TempDir()
	reg := newRegistry()
	st := newStores(cfg, zap.NewNop(), reg)
	if _, err := st.get(ctx, storeMain); err != nil {
		t.Fatal(err)
	}
	if st.compactions != nil || len(slots(reg)) != 0 {
		t.Errorf("default config: a shared compaction bound (%v, gauge %v)", st.compactions, slots(reg))
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}

	cfg.PebbleCompactions = 2
	reg = newRegistry()
	st = newStores(cfg, zap.NewNop(), reg)
	for round := range 2 {
		for _, name := range []string{storeMain, storePrimary, storeStandby} {
			if _, err := st.get(ctx, name); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		bound := st.compactions
		if bound == nil || bound.Stats().Limit != 2 {
			t.Fatalf("round %d: bound %v, want one of 2 slots", round, bound)
		}
		if diff := cmp.Diff([]float64{2}, slots(reg)); diff != "" {
			t.Errorf("round %d: smartfeed_pebble_compaction_slots (-want +got):\n%s", round, diff)
		}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		if st.compactions != nil {
			t.Fatalf("round %d: the bound outlived the stores", round)
		}
	}
}
