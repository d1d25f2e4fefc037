package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// TestHangingPrimaryFeed: the primary feed store hangs (every call +2 s, it never fails) under
// a stream of GetFeed calls of users whose feeds are materialized: every call succeeds; the
// circuit breaker opens once the slow reads are most of its window and stays open (each probe
// reopens it); the reads that do meet the primary are cut by a hedge to the standby, or released
// to it once the breaker has seen the primary lose, never by the primary's own timeout. It asserts counts (the hedger's metrics, and calls that took
// the whole primary timeout), not latencies against a bound, so a loaded machine does not fail it;
// the latencies are logged.
func TestHangingPrimaryFeed(t *testing.T) {
	a, f, readers := feedsToHang(t, 4)
	ctx := t.Context()
	// read calls GetFeed n times, or for at least d.
	read := func(n int, d time.Duration) []time.Duration {
		var took []time.Duration
		start := time.Now()
		for i := 0; i < n || time.Since(start) < d; i++ {
			u := readers[i%len(readers)]
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			_, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
			took = append(took, time.Since(t0))
			cancel()
			if err != nil {
				t.Fatalf("GetFeed %d with the primary hanging: %v", i, err)
			}
		}
		slices.Sort(took)
		return took
	}
	healthy := read(100, 0)
	before := hedgeCounts(t, a)
	persistFailed := gaugeOrCounter(t, a.reg, "smartfeed_feed_persist_failed_total")
	downBefore := freshPages(t, a, "primary_down")
	if err := a.faults[0].Set(faults.Config{SlowFraction: 1, Slow: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer a.faults[0].Set(faults.Config{})
	// Long enough for the breaker's probes (every BreakerOpenFor) to meet the hung primary.
	hung := read(200, 3*a.hedger.Policy().BreakerOpenFor)
	after := hedgeCounts(t, a)
	pol := a.hedger.Policy()
	cutoff, _ := a.hedger.Cutoff()
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	t.Logf("healthy: p50 %v p99 %v; primary hanging: %d calls, p50 %v p99 %v max %v (cutoff %v, primary timeout %v)",
		healthy[len(healthy)/2], p99(healthy), len(hung), hung[len(hung)/2], p99(hung), hung[len(hung)-1], cutoff, pol.PrimaryTimeout)
	// A first page with a fresh chunk (pins the worker delivered late) records it on the primary
	// before answering, bounded by PersistTimeout (200 ms): with the primary hung that write
	// fails. With the breaker open a first page calls no generator and records nothing: it is
	// answered from the standby as "primary_down".
	persistFails := gaugeOrCounter(t, a.reg, "smartfeed_feed_persist_failed_total") - persistFailed
	primaryDown := freshPages(t, a, "primary_down") - downBefore
	t.Logf("first pages whose fresh chunk could not be recorded on the hung primary: %v; answered without a generator call (breaker open): %v",
		persistFails, primaryDown)
	d := func(k string) int { return int(after[k] - before[k]) }
	toPrimary, probes, toStandby := d(`routed{route="primary"}`), d(`routed{route="probe"}`), d(`routed{route="standby"}`)
	opened, closed := d(`breaker_transitions{to="open"}`), d(`breaker_transitions{to="closed"}`)
	atCutoff, onError, refused := d(`issued{reason="cutoff"}`), d(`issued{reason="error"}`), d("budget_exhausted")
	released := d(`issued{reason="breaker"}`)
	t.Logf("while the primary hung: %d calls routed to the primary, %d probes, %d failed over to the standby; breaker opened %d times, closed %d; standby reads: %d at the cutoff, %d released by the breaker, %d on a primary error (%d hedges refused by the budget)",
		toPrimary, probes, toStandby, opened, closed, atCutoff, released, onError, refused)
	// The breaker: each call is one read (calls are sequential here), and every read of the hung
	// primary is slow; the breaker's window is the last BreakerInterval's reads, which the healthy
	// calls before the hang (and a few reads of the set-up) fill at most, so it opens before as
	// many calls as those went to the hung primary.
	if most := len(healthy) + pol.BreakerWindow; toPrimary > most {
		t.Errorf("%d calls went to the hung primary with the breaker closed, want at most %d (the healthy calls before, and the breaker's window): the breaker opened late or not at all",
			toPrimary, most)
	}
	if opened == 0 || toStandby == 0 {
		t.Errorf("the breaker sent no call to the standby first (%d transitions to open, %d calls failed over)", opened, toStandby)
	}
	// Three BreakerOpenFor periods: probes met the hung primary, and each one reopened the breaker.
	if probes == 0 || closed > 0 || a.hedger.BreakerState() == hedge.BreakerClosed {
		t.Errorf("breaker while the primary hung: %d probes, %d closes, now %s; want probes, no close, not closed",
			probes, closed, a.hedger.BreakerState())
	}
	// The hedging: a probe is hedged at the cutoff whatever the budget, a call with the breaker
	// closed whenever the budget allows, and one whose hedge the budget refused reads the standby
	// once the breaker has seen the primary lose; none waits for the primary's own timeout (the
	// only way this primary fails).
	if atCutoff < probes {
		t.Errorf("%d hedges at the cutoff for %d probes of the hung primary: probes must be hedged at the cutoff", atCutoff, probes)
	}
	if onError > 0 {
		t.Errorf("%d reads waited for the hung primary's %v timeout (%d hedges refused by the budget, %d released by the breaker)",
			onError, pol.PrimaryTimeout, refused, released)
	}
	// Only a call that read the primary (closed, or the half-open probe) may try to record a
	// chunk there; the others, with the breaker open, skip the generator.
	if primaryDown == 0 {
		t.Errorf("no first page was answered as primary_down while the breaker was open (%d calls failed over)", toStandby)
	}
	if persistFails > float64(toPrimary+probes) {
		t.Errorf("%v fresh chunks failed to record on the hung primary, more than the %d calls that read it: pages with the breaker open called the generator",
			persistFails, toPrimary+probes)
	}
	// And from the client's side: a call that took the whole primary timeout waited on the
	// primary; none may.
	if waited := len(hung) - sort.Search(len(hung), func(i int) bool { return hung[i] >= pol.PrimaryTimeout }); waited > 0 {
		t.Errorf("%d of %d calls took at least the primary timeout (%v) while the primary hung, want none",
			waited, len(hung), pol.PrimaryTimeout)
	}
}

// TestHangOnsetConcurrentFeed: 16 callers read their materialized feeds, then every primary
// read hangs (+2 s, never failing). The calls in flight at the onset outnumber the hedge budget;
// those whose hedge it refuses must not wait for the primary's 1 s timeout: once a hedged read
// has lost to the standby, the breaker releases them to it. The p99 target is the cutoff + the
// standby's p99 + 50 ms; like TestHangingPrimaryFeed it asserts counts (no call waits the
// primary timeout, no read fails over on the timeout's error), so a loaded machine does not fail
// it, and logs the latencies against the target.
func TestHangOnsetConcurrentFeed(t *testing.T) {
	const callers, calls = 16, 1000
	a, f, readers := feedsToHang(t, callers)
	ctx := t.Context()
	// run makes n GetFeed calls from the callers, each its own reader, and returns their
	// latencies, sorted.
	run := func(n int) []time.Duration {
		var next atomic.Int64
		var mu sync.Mutex
		var took []time.Duration
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					t0 := time.Now()
					_, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: readers[c], PageSize: 10})
					d := time.Since(t0)
					cancel()
					if err != nil {
						t.Errorf("GetFeed: %v", err)
						return
					}
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(took)
		return took
	}
	// The standby's p99 through the whole call: the primary in outage, every read fails over.
	if err := a.faults[0].Set(faults.Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	onStandby := run(calls)
	// Healthy again: the breaker closes after its open period, on the probes.
	if err := a.faults[0].Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.hedger.BreakerState() != hedge.BreakerClosed {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %s 30 s after the primary healed", a.hedger.BreakerState())
		}
		run(callers)
		time.Sleep(50 * time.Millisecond)
	}
	healthy := run(calls)
	before := hedgeCounts(t, a)
	cutoff, _ := a.hedger.Cutoff()
	if err := a.faults[0].Set(faults.Config{SlowFraction: 1, Slow: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer a.faults[0].Set(faults.Config{})
	hung := run(calls)
	pol := a.hedger.Policy()
	// The breaker judges the slow rate over the last BreakerInterval, which still holds the
	// healthy reads just made: the hang opens it once they are outnumbered, which takes longer
	// than the calls above when those are quick. Keep the primary hung and the calls coming,
	// for up to two intervals, until it does.
	for end := time.Now().Add(2 * pol.BreakerInterval); a.hedger.BreakerState() == hedge.BreakerClosed && time.Now().Before(end); {
		run(callers)
	}
	after := hedgeCounts(t, a)
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	target := cutoff + p99(onStandby) + 50*time.Millisecond
	d := func(k string) int { return int(after[k] - before[k]) }
	waited := len(hung) - sort.Search(len(hung), func(i int) bool { return hung[i] >= pol.PrimaryTimeout })
	t.Logf("%d callers: standby-only p99 %v, healthy p99 %v; primary hung at cutoff %v: p50 %v p99 %v (target %v) max %v; %d calls took the %v primary timeout",
		callers, p99(onStandby), p99(healthy), cutoff, hung[len(hung)/2], p99(hung), target, hung[len(hung)-1], waited, pol.PrimaryTimeout)
	t.Logf("while the primary hung: %d calls routed to the primary, %d failed over; standby reads: %d at the cutoff, %d released by the breaker, %d on a primary error (%d hedges refused by the budget); breaker opened %d times",
		d(`routed{route="primary"}`), d(`routed{route="standby"}`), d(`issued{reason="cutoff"}`), d(`issued{reason="breaker"}`),
		d(`issued{reason="error"}`), d("budget_exhausted"), d(`breaker_transitions{to="open"}`))
	if waited > 0 {
		t.Errorf("%d of %d calls took at least the primary timeout (%v) at the onset of the hang, want none (p99 %v, target %v)",
			waited, len(hung), pol.PrimaryTimeout, p99(hung), target)
	}
	if n := d(`issued{reason="error"}`); n > 0 {
		t.Errorf("%d reads of the hung primary failed over on its timeout, want none", n)
	}
	if d(`breaker_transitions{to="open"}`) == 0 {
		t.Errorf("the breaker did not open with every primary read hung")
	}
}

// feedsToHang starts the `all` role and gives n readers a materialized feed of one author's 20
// pins, on both stores (the standby flushed), ready for the primary to hang.
func feedsToHang(t *testing.T, n int) (*app, feedv1.FeedServiceClient, []uint64) {
	t.Helper()
	a, conn := startAll(t)
	ctx := t.Context()
	g, f := graphv1.NewGraphServiceClient(conn), feedv1.NewFeedServiceClient(conn)
	mk := func(name string) uint64 {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetId()
	}
	author := mk("author")
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: author, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var readers []uint64
	for i := range n {
		u := mk(fmt.Sprintf("reader%d", i))
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: u, TargetId: author}); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, u)
	}
	for i := range 20 {
		if _, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: author, BoardId: board.GetId(),
			ImageUrl: fmt.Sprintf("https://i.example.com/%d.jpg", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Each reader's feed holds pins, materialized on both stores.
	deadline := time.Now().Add(30 * time.Second)
	for _, u := range readers {
		for {
			r, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
			if err == nil && len(r.GetItems()) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reader %d: no feed: %v", u, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a.feed.Wait()
	if a.standbyFlush != nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.standbyFlush(fctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	return a, f, readers
}

// freshPages reads how many GetFeed pages the app answered with the fresh status fresh
// (smartfeed_feed_requests_total{fresh=...}).
func freshPages(t *testing.T, a *app, fresh string) float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "smartfeed_feed_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "fresh" && l.GetValue() == fresh {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// hedgeCounts reads the feed hedger's counters from the app's registry, keyed by the name after
// smartfeed_hedge_ and without _total, with the label when there is one: routed{route="probe"}.
func hedgeCounts(t *testing.T, a *app) map[string]float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		name, ok := strings.CutPrefix(mf.GetName(), "smartfeed_hedge_")
		if !ok || mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		name = strings.TrimSuffix(name, "_total")
		for _, m := range mf.GetMetric() {
			k := name
			for _, l := range m.GetLabel() {
				k += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			out[k] += m.GetCounter().GetValue()
		}
	}
	return out
}
