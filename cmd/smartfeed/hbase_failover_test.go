package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
)

// failoverEnv gates TestHBasePrimaryKill: it starts and kills HBase JVMs of its own (two more
// instances beside the test HBase), so it runs on demand: `make test-failover`.
const failoverEnv = "SMARTFEED_HBASE_FAILOVER"

// TestHBasePrimaryKill kills -9 the JVM of the primary HBase that holds the materialized feed,
// under a read load and a write load, then restarts it with its data. The standby is a second
// HBase fed by HBase's own replication. Checked: every GetFeed succeeds (served by the standby,
// flagged, while the primary is dead); after the restart the pending materializations land and
// the standby's feed table equals the primary's row by row. The graph and pools stay on the
// test HBase (SMARTFEED_HBASE_ZK), as in the seeds' layout where the feed clusters are their own.
func TestHBasePrimaryKill(t *testing.T) {
	if os.Getenv(failoverEnv) != "1" {
		t.Skipf("set %s=1 (make test-failover): kills and restarts HBase JVMs of its own", failoverEnv)
	}
	pools := testenv.HBase(t)
	root := repoRoot(t)
	hb := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", "hbase.sh"), args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/hbase.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	hb("up", "hbase-failp")
	t.Cleanup(func() { _ = exec.Command(filepath.Join(root, "scripts", "hbase.sh"), "down", "hbase-failp").Run() })
	hb("up", "hbase-fails")
	t.Cleanup(func() { _ = exec.Command(filepath.Join(root, "scripts", "hbase.sh"), "down", "hbase-fails").Run() })
	hb("replicate", "hbase-failp", "hbase-fails")
	zkOf := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "run", name, "port"))
		if err != nil {
			t.Fatal(err)
		}
		return "127.0.0.1:" + strings.TrimSpace(string(b))
	}
	primaryZK, standbyZK := zkOf("hbase-failp"), zkOf("hbase-fails")
	prefix := fmt.Sprintf("fo%d_", time.Now().UnixNano())
	e := newE2E(t, false, func(c *config.Config) {
		c.Storage.Backend = config.BackendHBase
		c.Storage.HBase.PoolsZK, c.Storage.HBase.PrimaryZK, c.Storage.HBase.StandbyZK = pools, primaryZK, standbyZK
		c.Storage.HBase.TablePrefix = prefix
		c.Feed.GeneratorDeadline = config.Duration(5 * time.Second)
		// SMARTFEED_FAILOVER_REPLICATION=app runs the same experiment with the change-log
		// replicator between the two clusters instead of HBase's own replication.
		if m := os.Getenv("SMARTFEED_FAILOVER_REPLICATION"); m != "" {
			c.Storage.HBase.Replication = m
		}
	})
	t.Logf("replication: %s", map[bool]string{true: "HBase's own (canary)", false: "change log (feedsvc.Replicator)"}[e.a.canary != nil])

	// Seed: B and C follow A; A pins; first pages give both a materialized feed.
	A, B, C := e.user("alice"), e.user("bob"), e.user("carol")
	bA := e.board(A)
	e.follow(B, A)
	e.follow(C, A)
	e.drain()
	for range 10 {
		e.pin(A, bA, 0)
	}
	e.drain()
	e.concurrentFirstPages(B, 2, 2)
	e.concurrentFirstPages(C, 2, 2)
	e.settle()

	// Load: 4 readers of B's and C's feeds; a writer that pins and serves C first pages (each
	// materialization writes the primary).
	type sample struct {
		at      time.Duration
		took    time.Duration
		err     error
		standby bool
	}
	var (
		mu      sync.Mutex
		samples []sample
		writes  atomic.Int64
	)
	start := time.Now()
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := []zen.ID{B, C}[r%2]
			for ctx.Err() == nil {
				t0 := time.Now()
				page, err := e.svc.GetFeed(ctx, feedsvc.Request{User: user, PageSize: 20})
				if ctx.Err() != nil {
					return
				}
				s := sample{at: t0.Sub(start), took: time.Since(t0), err: err}
				if err == nil {
					s.standby = page.From == hedge.Standby
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := e.svc.GetFeed(ctx, feedsvc.Request{User: C, PageSize: 5}); err == nil {
				writes.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()

	phase := func(name string, d time.Duration) time.Duration {
		t.Logf("%s for %v", name, d)
		time.Sleep(d)
		return time.Since(start)
	}
	kill := func(name string) {
		t.Helper()
		pid, err := os.ReadFile(filepath.Join(root, "run", name, "hbase.pid"))
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("kill", "-9", strings.TrimSpace(string(pid))).CombinedOutput(); err != nil {
			t.Fatalf("kill -9 %s: %v %s", name, err, out)
		}
	}
	// catchUp measures, in the background, how long after a restart the standby holds a write
	// made after it (the canary's or the change log's Flush): replication has caught up.
	catchUp := func() <-chan time.Duration {
		ch := make(chan time.Duration, 1)
		t0 := time.Now()
		go func() {
			fctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
			defer cancel()
			if err := e.a.standbyFlush(fctx); err != nil {
				ch <- -1
				return
			}
			ch <- time.Since(t0)
		}()
		return ch
	}
	tKill := phase("steady", 5*time.Second)
	kill("hbase-failp")
	tRestart := phase("primary killed", 15*time.Second)
	hb("restart", "hbase-failp")
	tBack := time.Since(start)
	primaryCaughtUp := catchUp()
	tStandbyKill := phase("primary back", 10*time.Second)
	warmErrs := gaugeOrCounter(t, e.a.reg, "smartfeed_hedge_warmup_errors_total")
	kill("hbase-fails")
	tStandbyRestart := phase("standby killed", 8*time.Second)
	warmErrs = gaugeOrCounter(t, e.a.reg, "smartfeed_hedge_warmup_errors_total") - warmErrs
	hb("restart", "hbase-fails")
	tStandbyBack := time.Since(start)
	standbyCaughtUp := catchUp()
	phase("standby back", 5*time.Second)
	stop()
	wg.Wait()

	// The pending materializations land; then the standby must equal the primary.
	e.settle()
	fctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	e.must(e.a.standbyFlush(fctx))
	dump := func(tb zen.Table) map[string]string {
		rows, err := tb.Scan(fctx, zen.ScanOptions{})
		e.must(err)
		m := map[string]string{}
		for _, kv := range rows {
			if kv.Key[0] != 0xff {
				m[fmt.Sprintf("%x", kv.Key)] = fmt.Sprintf("%x", kv.Value)
			}
		}
		return m
	}
	p, s := dump(e.a.feedPrimary), dump(e.a.feedStandby)
	if diff := cmp.Diff(p, s); diff != "" {
		t.Errorf("after the restart the standby's feed table differs from the primary's (-primary +standby):\n%s", diff)
	}
	e.checkFeedUnique(B)
	e.checkFeedUnique(C)

	// The figures, per phase.
	report := func(name string, from, to time.Duration) {
		var lat []time.Duration
		errs, standby := 0, 0
		for _, s := range samples {
			if s.at < from || s.at >= to {
				continue
			}
			lat = append(lat, s.took)
			if s.err != nil {
				errs++
				if errs <= 3 {
					t.Errorf("%s: GetFeed failed: %v", name, s.err)
				}
			}
			if s.standby {
				standby++
			}
		}
		if len(lat) == 0 {
			t.Errorf("%s: no reads", name)
			return
		}
		slices.Sort(lat)
		q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
		t.Logf("%-14s reads %4d, failed %d (success %.2f%%), from standby %4d; p50 %v p99 %v p99.9 %v max %v",
			name, len(lat), errs, 100*float64(len(lat)-errs)/float64(len(lat)), standby,
			q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(0.999).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	}
	mu.Lock()
	defer mu.Unlock()
	report("steady", 0, tKill)
	report("primary dead", tKill, tRestart)
	report("restarting", tRestart, tBack)
	report("primary back", tBack, tStandbyKill)
	report("standby killed", tStandbyKill, tStandbyRestart)
	report("standby restart", tStandbyRestart, tStandbyBack)
	report("standby back", tStandbyBack, time.Hour)
	t.Logf("warm-up reads that failed while the standby was dead: %v", warmErrs)
	t.Logf("replication caught up %v after the primary's restart returned, %v after the standby's (-1: not within 2 min)",
		(<-primaryCaughtUp).Round(time.Millisecond), (<-standbyCaughtUp).Round(time.Millisecond))
	if e.a.canary != nil {
		lags, _, _ := e.a.canary.Lags().Since(0)
		st := bench.Summarize(lags)
		t.Logf("canary lag over the run: %d measurements, p50 %.0f ms, p99 %.0f ms, max %.0f ms", st.N, st.P50, st.P99, st.Max)
	}
	for _, s := range samples {
		if s.at >= tStandbyKill && s.at < tStandbyBack && s.standby {
			t.Errorf("a read at %v was served by the standby while it was dead", s.at)
			break
		}
	}
	t.Logf("feed rows %d on both; writer first pages %d", len(p), writes.Load())
}

// gaugeOrCounter sums the samples of a counter or gauge of g (0 when absent).
func gaugeOrCounter(t *testing.T, g interface {
	Gather() ([]*dto.MetricFamily, error)
}, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

// repoRoot is the module root (where go.mod is), from the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
