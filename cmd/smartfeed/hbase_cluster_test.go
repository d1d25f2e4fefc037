package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsuna/gohbase/zk"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// transitDeadline is the deadline of each GetFeed of TestGetFeedDuringRegionTransit, as a
// client's: twice the hedging policy's primary timeout, so a read the primary cannot answer
// is given up on the primary within the call and answered by the standby. (A caller whose
// deadline is not longer than the primary timeout gives up first: the read fails, and records
// no verdict against the primary, so the breaker does not open.)
const transitDeadline = 2 * time.Second

// primaryAgainBound bounds how long after the primary's regions have reopened the feed service
// may keep serving the readers from the standby.
const primaryAgainBound = 15 * time.Second

// transitPolicy is the hedging policy of TestGetFeedDuringRegionTransit's feed service.
func transitPolicy() hedge.Policy { return hedge.DefaultPolicy() }

// TestGetFeedDuringRegionTransit kills -9 the region server of the HBase cluster of
// scripts/hbase-cluster.sh (SMARTFEED_HBASE_CLUSTER_ZK, SMARTFEED_HBASE_CLUSTER) that carries
// the readers' materialized feeds, while four readers page through those feeds at a steady
// rate, each GetFeed with a deadline of transitDeadline, under the default hedging policy. The
// primary feed table is on the cluster; the standby is a Pebble copy of it (the readers' rows,
// copied after they were written; each read made to take standbyRTT, as across a network),
// which stays up whatever the cluster does. Until the master has reassigned the dead server's
// regions and the client has found them, the primary cannot answer for those users. Checked:
// every GetFeed is answered, with the page the primary would give; pages are served by the
// standby while the regions are in transit; the primary serves again within
// primaryAgainBound of their reopening. Logged: how long the readers' regions were
// unavailable on the primary, the counts, and the page latencies of each phase. make
// test-hbase-cluster runs it.
func TestGetFeedDuringRegionTransit(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the HBase cluster, and -short is set")
	}
	zkAddr, dir := os.Getenv("SMARTFEED_HBASE_CLUSTER_ZK"), os.Getenv("SMARTFEED_HBASE_CLUSTER")
	if zkAddr == "" || dir == "" {
		t.Skip("needs the HBase cluster: run `scripts/hbase-cluster.sh up` and export the SMARTFEED_HBASE_CLUSTER_ZK and SMARTFEED_HBASE_CLUSTER lines it prints (make test-hbase-cluster does)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	hb, primary := spreadFeedTable(t, ctx, zkAddr)
	pb, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pb.Close() })
	local, err := pb.Table(ctx, tableFeed)
	if err != nil {
		t.Fatal(err)
	}
	standby := distantTable{Table: local, rtt: standbyRTT}

	victim, node, readers := transitVictim(t, ctx, hb, zkAddr, dir)
	t.Logf("killing rs%d (%s), which carries the feed rows of readers %v", node, victim, readers)

	// Seed: three chunks materialized per reader on the primary, then copied to the standby.
	var pins []zen.ID
	for i := range 200 {
		p, _ := zen.NewID(uint16(i%4096), zen.TypePin, uint64(i+1))
		pins = append(pins, p)
	}
	gen := &benchGen{pins: pins, per: map[zen.ID]int{}}
	fc := feedsvc.DefaultConfig()
	fc.PersistTimeout, fc.GeneratorDeadline = 5*time.Second, 5*time.Second
	fc.MinChunkInterval, fc.PrepareAfter = 0, 0
	seed, err := feedsvc.New(feedsvc.Deps{Primary: primary, Standby: standby, Generator: gen, Enqueuer: &benchQueue{}, HeadCacheBytes: -1}, fc)
	if err != nil {
		t.Fatal(err)
	}
	cursors := map[zen.ID]string{}
	for _, u := range readers {
		for range 3 {
			page, err := seed.GetFeed(ctx, feedsvc.Request{User: u, PageSize: 5})
			if err != nil {
				t.Fatal(err)
			}
			cursors[u] = page.NextCursor
		}
	}
	seed.Close()
	want := map[zen.ID][]zen.ID{} // each reader's page after its cursor, as the primary serves it
	for _, u := range readers {
		start, stop := feedsvc.FeedRange(u)
		rows, err := primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop})
		if err != nil {
			t.Fatal(err)
		}
		var muts []zen.Mutation
		for _, kv := range rows {
			muts = append(muts, zen.Mutation{Key: kv.Key, Value: kv.Value})
		}
		if err := standby.Apply(ctx, muts); err != nil {
			t.Fatal(err)
		}
	}

	h, err := hedge.New(transitPolicy(), hedge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := feedsvc.New(feedsvc.Deps{Primary: primary, Standby: standby, Generator: gen, Enqueuer: &benchQueue{},
		Hedger: h, HeadCacheBytes: -1}, fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	for _, u := range readers {
		page, err := svc.GetFeed(ctx, feedsvc.Request{User: u, Cursor: cursors[u], PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) == 0 {
			t.Fatalf("reader %v: empty page after the seed's cursor", u)
		}
		for _, it := range page.Items {
			want[u] = append(want[u], it.Pin)
		}
	}

	// Readers: each pages from its cursor every 80 ms (about 50 GetFeed/s in all).
	type sample struct {
		at, took time.Duration
		err      error
		from     hedge.Store
	}
	var (
		mu      sync.Mutex
		samples []sample
		wrong   []string
	)
	start := time.Now()
	rctx, stopReaders := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, u := range readers {
		wg.Go(func() {
			tick := time.NewTicker(80 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-tick.C:
				}
				t0 := time.Now()
				gctx, gcancel := context.WithTimeout(rctx, transitDeadline)
				page, err := svc.GetFeed(gctx, feedsvc.Request{User: u, Cursor: cursors[u], PageSize: 10})
				gcancel()
				if rctx.Err() != nil {
					return
				}
				s := sample{at: t0.Sub(start), took: time.Since(t0), err: err, from: page.From}
				var got []zen.ID
				for _, it := range page.Items {
					got = append(got, it.Pin)
				}
				mu.Lock()
				samples = append(samples, s)
				if err == nil && !slices.Equal(got, want[u]) && len(wrong) < 3 {
					wrong = append(wrong, fmt.Sprintf("reader %v at %v from %v: %v, want %v", u, s.at, s.from, got, want[u]))
				}
				mu.Unlock()
			}
		})
	}
	defer func() { stopReaders(); wg.Wait() }()

	// Steady phase, on the primary; then kill -9 and watch the readers' rows on the primary.
	runFor(t, ctx, 3*time.Second)
	root := repoRoot(t)
	script := func(args ...string) error {
		args = append(args, filepath.Base(dir))
		out, err := exec.Command(filepath.Join(root, "scripts", "hbase-cluster.sh"), args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("scripts/hbase-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := script("start-rs", fmt.Sprint(node)); err != nil {
			t.Errorf("restarting rs%d: %v", node, err)
		}
	})
	tKill := time.Since(start)
	if err := script("kill-rs", fmt.Sprint(node)); err != nil {
		t.Fatal(err)
	}
	unavailable := primaryBack(t, ctx, primary, readers, 45*time.Second)
	tBack := tKill + unavailable
	// Then until a page comes from the primary again (the breaker's probes find it answering),
	// for at most primaryAgainBound, and a second more.
	servedByPrimary := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range slices.Backward(samples) {
			if s.at < tBack {
				break
			}
			if s.err == nil && s.from == hedge.Primary {
				return true
			}
		}
		return false
	}
	again := pollUntil(primaryAgainBound, 100*time.Millisecond, servedByPrimary)
	tAgain := time.Since(start)
	runFor(t, ctx, time.Second)
	stopReaders()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	phases := []struct {
		name     string
		from, to time.Duration
	}{{"steady", 0, tKill}, {"in transit", tKill, tBack}, {"reopened", tBack, time.Hour}}
	standbyInTransit, primaryAfter := 0, 0
	for _, ph := range phases {
		var lat []time.Duration
		failed, fromStandby := 0, 0
		for _, s := range samples {
			if s.at < ph.from || s.at >= ph.to {
				continue
			}
			lat = append(lat, s.took)
			switch {
			case s.err != nil:
				failed++
				if failed <= 3 {
					t.Errorf("%s: GetFeed at %v failed after %v: %v", ph.name, s.at.Round(time.Millisecond), s.took.Round(time.Millisecond), s.err)
				}
			case s.from == hedge.Standby:
				fromStandby++
			}
		}
		if len(lat) == 0 {
			t.Errorf("%s: no GetFeed", ph.name)
			continue
		}
		slices.Sort(lat)
		q := func(f float64) time.Duration {
			return lat[min(len(lat)-1, int(f*float64(len(lat))))].Round(time.Millisecond)
		}
		t.Logf("%-10s %4d GetFeed, %d failed, %4d served by the standby; p50 %v p99 %v max %v",
			ph.name, len(lat), failed, fromStandby, q(0.5), q(0.99), lat[len(lat)-1].Round(time.Millisecond))
		switch ph.name {
		case "in transit":
			standbyInTransit = fromStandby
		case "reopened":
			primaryAfter = len(lat) - failed - fromStandby
		}
	}
	t.Logf("the readers' regions were unavailable on the primary for %v after kill -9 of rs%d; pages came from the primary again %v after they reopened",
		unavailable.Round(100*time.Millisecond), node, (tAgain - tBack).Round(100*time.Millisecond))
	if standbyInTransit == 0 {
		t.Errorf("no page served by the standby while the primary's regions were in transit")
	}
	if !again || primaryAfter == 0 {
		t.Errorf("no page served by the primary within %v after its regions reopened", primaryAgainBound)
	}
	for _, w := range wrong {
		t.Errorf("wrong page: %s", w)
	}
}

// transitVictim picks the region server to kill: one of the three that does not hold
// hbase:meta, carrying the feed rows of the most candidate users (one per 64 shards); it
// returns its address, its number N (rsN under dir) and up to four of its users.
func transitVictim(t *testing.T, ctx context.Context, hb *zenhbase.Store, zkAddr, dir string) (string, int, []zen.ID) {
	t.Helper()
	meta, err := zk.NewClient(zkAddr, 10*time.Second).LocateResource(zk.Meta.Prepend("/hbase"))
	if err != nil {
		t.Fatal(err)
	}
	regions, err := hb.Regions(ctx, tableFeed)
	if err != nil {
		t.Fatal(err)
	}
	if per := zenhbase.RegionsPerServer(regions); len(per) != 3 {
		t.Fatalf("feed regions on %d servers (%v), want all 3 (is every region server up? scripts/hbase-cluster.sh status)", len(per), per)
	}
	users := map[string][]zen.ID{}
	for shard := 0; shard < 4096; shard += 64 {
		u, _ := zen.NewID(uint16(shard), zen.TypeUser, uint64(shard+1))
		key, _ := feedsvc.FeedRange(u)
		i := len(regions) - 1
		for i > 0 && bytes.Compare(regions[i].Start, key) > 0 {
			i--
		}
		if srv := regions[i].Server; srv != meta {
			users[srv] = append(users[srv], u)
		}
	}
	var victim string
	for _, srv := range slices.Sorted(maps.Keys(users)) {
		if victim == "" || len(users[srv]) > len(users[victim]) {
			victim = srv
		}
	}
	if victim == "" {
		t.Fatalf("no region server other than hbase:meta's (%s) carries feed rows of the candidate users", meta)
	}
	for n := 1; n <= 3; n++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rs%d", n), "port"))
		if err != nil {
			t.Fatalf("%s: %v (is scripts/hbase-cluster.sh up?)", dir, err)
		}
		if strings.HasSuffix(victim, ":"+strings.TrimSpace(string(b))) {
			return victim, n, users[victim][:min(4, len(users[victim]))]
		}
	}
	t.Fatalf("region server %s is none of %s/rs1..rs3", victim, dir)
	return "", 0, nil
}

// primaryBack polls the primary, every 100 ms, with one scan of each reader's feed rows (each
// bounded by a second) until, after one of them has failed, all succeed again, and returns how
// long after its call that was; past bound it fails the test.
func primaryBack(t *testing.T, ctx context.Context, primary zen.Table, readers []zen.ID, bound time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	failed := false
	for {
		ok := true
		for _, u := range readers {
			start, stop := feedsvc.FeedRange(u)
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := primary.Scan(sctx, zen.ScanOptions{Start: start, Stop: stop, Limit: 1})
			cancel()
			ok = ok && err == nil
		}
		failed = failed || !ok
		if ok && failed {
			return time.Since(t0)
		}
		if time.Since(t0) > bound {
			t.Fatalf("%v after the kill, the readers' rows on the primary: unavailable=%v, readable=%v (want unavailable, then readable)", bound, failed, ok)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
	}
}

// standbyRTT is the least time a read of TestGetFeedDuringRegionTransit's standby takes: its
// Pebble table stands for a second cluster across the network, which answers no faster than
// the primary. (A standby answering in microseconds would beat every read of the primary that
// the hedge sends to it, so the breaker's probes would never find the primary healthy.)
const standbyRTT = 10 * time.Millisecond

// distantTable is a zen.Table whose reads take at least rtt, as over a network.
type distantTable struct {
	zen.Table
	rtt time.Duration
}

func (d distantTable) wait(ctx context.Context) error {
	tm := time.NewTimer(d.rtt)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// Get waits rtt, then reads the key.
func (d distantTable) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := d.wait(ctx); err != nil {
		return nil, err
	}
	return d.Table.Get(ctx, key)
}

// Scan waits rtt, then scans.
func (d distantTable) Scan(ctx context.Context, opts zen.ScanOptions) ([]zen.KV, error) {
	if err := d.wait(ctx); err != nil {
		return nil, err
	}
	return d.Table.Scan(ctx, opts)
}

// runFor lets the load run for d (the length of a phase), or fails the test when ctx ends.
func runFor(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(d):
	}
}

// spreadFeedTable opens the cluster with a fresh table prefix and creates the feed table, until
// its regions open on all three region servers. A region server restarted by the test before
// (TestRegionServerKill) is registered in ZooKeeper before the master assigns it regions, so a
// table created in between lands on two: that one is dropped and made again, for at most a
// minute.
func spreadFeedTable(t *testing.T, ctx context.Context, zkAddr string) (*zenhbase.Store, zen.Table) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		hb, err := zenhbase.Open(ctx, zkAddr, zenhbase.Options{TablePrefix: fmt.Sprintf("gt%d_", time.Now().UnixNano()), CreateTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		primary, err := hb.Table(ctx, tableFeed)
		if err != nil {
			_ = hb.Close()
			t.Fatal(err)
		}
		regions, err := hb.Regions(ctx, tableFeed)
		if err != nil {
			_ = hb.Close()
			t.Fatal(err)
		}
		per := zenhbase.RegionsPerServer(regions)
		if len(per) == 3 || time.Now().After(deadline) {
			t.Cleanup(func() { _ = hb.Close() })
			t.Cleanup(func() { _ = hb.Drop(context.Background(), tableFeed) })
			return hb, primary
		}
		t.Logf("feed regions on %d servers (%v): the master has not taken the third yet; a new table", len(per), per)
		_ = hb.Drop(ctx, tableFeed)
		_ = hb.Close()
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}
