package main

import (
	"context"
	"encoding/binary"
	"errors"
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
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// failoverEnv gates TestHBasePrimaryKill: it starts and kills HBase JVMs of its own (two more
// instances beside the test HBase), so it runs on demand: `make test-failover`.
const failoverEnv = "SMARTFEED_HBASE_FAILOVER"

// TestHBasePrimaryKill kills -9 the JVM of the primary HBase that holds the materialized feed,
// under a read load and a write load (first pages that materialize chunks, and one new pin a
// second fanned out to the readers), then restarts it with its data. The standby is a second
// HBase fed by HBase's own replication. Rows written on the primary just before the kill and
// deleted after its restart model a pending chunk whose materialization failed during the
// outage and was retried. Checked: every GetFeed and every pin succeeds (reads served by the
// standby, flagged, while the primary is dead); the replication lag gauge grows through the
// outage instead of keeping its last value; after the restart the pending materializations
// land and the standby's feed table comes to equal the primary's row by row, deletes included.
// The graph and pools stay on the test HBase (SMARTFEED_HBASE_ZK), as in the seeds' layout
// where the feed clusters are their own.
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
		c.Feed.GeneratorDeadline = jsontime.Duration(5 * time.Second)
		// SMARTFEED_FAILOVER_REPLICATION=app runs the same experiment with the change-log
		// replicator between the two clusters instead of HBase's own replication.
		if m := os.Getenv("SMARTFEED_FAILOVER_REPLICATION"); m != "" {
			c.Storage.HBase.Replication = m
		}
	})
	t.Logf("replication: %s", map[bool]string{true: "HBase's own (canary)", false: "change log (feedsvc.Replicator)"}[e.a.canary != nil])
	// The seed's first pages must record their chunks: on a loaded machine three JVMs' HBase
	// writes can pass the default 200 ms persist bound, and a chunk not recorded gives its pins
	// back (the seed would then serve nothing fresh). Not what this test is about.
	fc := e.svc.Config()
	fc.PersistTimeout = 5 * time.Second
	e.must(e.svc.SetConfig(fc))

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

	// One pin a second by A, fanned out to B and C, through the whole run: the graph and the
	// pools are on the test HBase, which stays up, so every one must succeed.
	var pins, pinErrs atomic.Int64
	var pinErr atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := e.tryPin(A, bA); err != nil {
				if ctx.Err() != nil {
					return
				}
				pinErrs.Add(1)
				pinErr.Store(err)
				continue
			}
			pins.Add(1)
		}
	}()

	phase := func(name string, d time.Duration) time.Duration {
		t.Logf("%s for %v", name, d)
		// sleep: each phase of the run lasts d of real time under the reads and pins above.
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
	// Rows acknowledged by the primary an instant before the kill (so still in its WAL's
	// replication queue), deleted once it is back: the standby must end without them.
	probe := e.user("probe")
	var probes []zen.Mutation
	for i := range 32 {
		k := binary.BigEndian.AppendUint64(nil, uint64(probe))
		probes = append(probes, zen.Mutation{Key: append(k, 'x', byte(i)), Value: []byte("written before the kill")})
	}
	e.must(e.a.feedPrimary.Apply(e.ctx, probes))
	kill("hbase-failp")
	lagAtKill := gaugeValue(t, e.a.reg, "smartfeed_replication_lag_seconds")
	tRestart := phase("primary killed", 30*time.Second)
	lagDead := gaugeValue(t, e.a.reg, "smartfeed_replication_lag_seconds")
	hb("restart", "hbase-failp")
	tBack := time.Since(start)
	primaryCaughtUp := catchUp()
	for i := range probes {
		probes[i] = zen.Mutation{Key: probes[i].Key, Delete: true}
	}
	e.must(e.a.feedPrimary.Apply(e.ctx, probes))
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

	// The pending materializations land; then the standby must come to equal the primary. The
	// comparison is repeated until the tables agree, for up to convergeBound: replication may
	// still be shipping the restarted primary's old log; a row it never carries (or a delete
	// it never applies) stays a difference.
	e.settle()
	if n, err := pinErrs.Load(), pinErr.Load(); n > 0 {
		t.Errorf("%d of %d pins failed during the run; last: %v", n, n+pins.Load(), err)
	}
	const convergeBound = 3 * time.Minute
	fctx, cancel := context.WithTimeout(e.ctx, convergeBound+time.Minute)
	defer cancel()
	e.must(e.a.standbyFlush(fctx))
	dump := func(tb zen.Table) (map[string]string, error) {
		rows, err := tb.Scan(fctx, zen.ScanOptions{})
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, kv := range rows {
			if kv.Key[0] != 0xff {
				m[fmt.Sprintf("%x", kv.Key)] = fmt.Sprintf("%x", kv.Value)
			}
		}
		return m, nil
	}
	var p map[string]string
	var diff string
	t0 := time.Now()
	equal := pollUntil(convergeBound, 500*time.Millisecond, func() bool {
		var s map[string]string
		var errP, errS error
		if p, errP = dump(e.a.feedPrimary); errP == nil {
			s, errS = dump(e.a.feedStandby)
		}
		if err := errors.Join(errP, errS); err != nil {
			diff = err.Error()
			return false
		}
		diff = cmp.Diff(p, s)
		return diff == ""
	})
	if !equal {
		t.Errorf("%v after the load the standby's feed table still differs from the primary's (-primary +standby):\n%s", convergeBound, diff)
	} else {
		t.Logf("primary and standby feed tables equal %v after the load", time.Since(t0).Round(time.Millisecond))
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
		// The canary cannot reach the standby through a dead primary: the lag it reports is
		// the time since its last round trip, so it grows through the outage.
		t.Logf("replication lag gauge: %.3fs at the kill, %.3fs after %v of outage", lagAtKill, lagDead, tRestart-tKill)
		if want := (tRestart - tKill - 5*time.Second).Seconds(); lagDead < want {
			t.Errorf("smartfeed_replication_lag_seconds = %.3fs after %v of primary outage, want at least %.0fs: the gauge must grow while the canary cannot round-trip",
				lagDead, tRestart-tKill, want)
		}
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
	t.Logf("feed rows %d on both; writer first pages %d; pins %d", len(p), writes.Load(), pins.Load())
}

// pollUntil checks cond every poll until it holds or bound has passed, and reports whether it held.
func pollUntil(bound, poll time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
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

// tryPin creates a pin by author on board and publishes it for fanout, as e.pin does, but
// returns its error instead of failing the test (for a load goroutine) and keeps no
// expectations.
func (e *e2e) tryPin(author, board zen.ID) error {
	now := time.Now()
	p, err := e.a.graph.Create(e.ctx, zen.TypePin, board, map[string]any{"author": author.String(), "board": board.String(), "title": "failover"})
	if err != nil {
		return err
	}
	for _, ed := range []zen.Edge{{From: author, Type: zen.EdgeUserPins, To: p.ID}, {From: board, Type: zen.EdgeBoardPins, To: p.ID}} {
		if err := addBoth(e.ctx, e.a.graph, ed); err != nil {
			return err
		}
	}
	_, err = e.pub.PinSaved(e.ctx, worker.PinSaved{Pin: p.ID, User: author, Board: board, CreatedMs: now.UnixMilli()})
	return err
}
