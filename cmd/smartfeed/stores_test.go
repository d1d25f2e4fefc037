package main

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/config"
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
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
		if n := memtables(); n != 0 {
			t.Errorf("round %d: closed store: %v memtables, want 0", round, n)
		}
	}
}
