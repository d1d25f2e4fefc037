package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
)

// TestEndToEndOnReplicatedHBase runs the end-to-end scenario's events, first pages and degrade
// checks with every store on the real HBase and the materialized feed's standby on the second
// HBase cluster, fed by HBase's own replication (scripts/hbase.sh replicate): the feed service
// writes the primary only, the primary-down checks are served by the standby, and at the end
// the two feed tables agree row by row. (The crash and re-run parts of the scenario run on
// Pebble in TestEndToEndInvariants.)
func TestEndToEndOnReplicatedHBase(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e on HBase: needs Redis and two HBase clusters; skipped with -short")
	}
	if raceEnabled {
		// gohbase (the pinned version) has a data race of its own on a region client's
		// re-establishment (region/multi.go:350 against :46); this scenario, with its many
		// fresh regions, hits it now and then, and -race fails the test for it. Our side of
		// the same scenario runs under -race on Pebble (TestEndToEndInvariants).
		t.Skip("run without -race: make test runs it in a second, race-free step")
	}
	primary, standby := testenv.HBaseStandby(t)
	prefix := fmt.Sprintf("e2e%d_", time.Now().UnixNano())
	e := newE2E(t, false, func(c *config.Config) {
		c.Storage.Backend = config.BackendHBase
		c.Storage.HBase.PoolsZK, c.Storage.HBase.PrimaryZK, c.Storage.HBase.StandbyZK = primary, primary, standby
		c.Storage.HBase.TablePrefix = prefix
		c.Storage.HBase.Replication = config.ReplicationAuto
		// This test is about replication, not latency: give the generator's many HBase round
		// trips room (the read path's latency has its own benchmarks).
		c.Feed.GeneratorDeadline = jsontime.Duration(5 * time.Second)
	})
	// Likewise the recording of a served chunk: under -race on a loaded machine a persist past
	// the default 200 ms gives the chunk's pins back, and the scenario's count of what its
	// concurrent first pages handed out no longer holds (seen in CI: 9 of 12 pins served, a
	// chunk split across two feed chunks).
	fc := e.svc.Config()
	fc.PersistTimeout = 5 * time.Second
	if err := e.svc.SetConfig(fc); err != nil {
		t.Fatal(err)
	}
	if e.a.repl != nil || e.a.canary == nil {
		t.Fatal("two HBase clusters: want HBase's replication and the canary, not the change-log replicator")
	}
	A, B, C := e.user("alice"), e.user("bob"), e.user("carol")
	bA, bC := e.board(A), e.board(C)
	e.follow(B, A)
	e.follow(B, C)
	e.drain()
	for range 6 {
		e.pin(A, bA, 0)
		e.pin(C, bC, 0)
	}
	e.drain()
	e.checkAccounting("after events", A, B, C)
	e.concurrentFirstPages(B, 4, 3)
	e.settle()
	e.checkAccounting("after first pages", A, B, C)
	e.checkFeedUnique(B)
	e.checkOrder(B)
	e.checkPaging(B, 4)
	// Primary down: B's feed comes from the standby that HBase replicated.
	e.checkDegrade(C, B)
	e.checkAccounting("after degrade", A, B, C)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e.must(e.a.standbyFlush(ctx))
	dumpFeed := func(tb zen.Table) map[string]string {
		rows, err := tb.Scan(ctx, zen.ScanOptions{})
		e.must(err)
		m := map[string]string{}
		for _, kv := range rows {
			if kv.Key[0] != 0xff { // the canary
				m[fmt.Sprintf("%x", kv.Key)] = fmt.Sprintf("%x", kv.Value)
			}
		}
		return m
	}
	p, s := dumpFeed(e.a.feedPrimary), dumpFeed(e.a.feedStandby)
	if len(p) == 0 {
		t.Fatal("the primary feed table is empty after the scenario")
	}
	if diff := cmp.Diff(p, s); diff != "" {
		t.Errorf("standby feed table differs from the primary (-primary +standby):\n%s", diff)
	}
	lag := gaugeValue(t, e.a.reg, "smartfeed_replication_lag_seconds")
	t.Logf("feed rows %d; replication lag gauge %.3fs", len(p), lag)
	if lag <= 0 || lag > 10 {
		t.Errorf("smartfeed_replication_lag_seconds = %v, want a measured lag under 10s", lag)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}
