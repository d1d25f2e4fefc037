package feedsvc

import (
	"context"
	"errors"
	"math/rand/v2"
	"regexp"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func cat(parts ...[]zen.ID) []zen.ID { return slices.Concat(parts...) }

// Invariant 3, order kept: each page is the fresh chunk, then the materialized chunks newest
// first, each in the generator's order.
func TestOrderKept(t *testing.T) {
	e := newEnv(t, nil)
	steps := []struct {
		want  []zen.ID
		fresh int
	}{
		{pins(1, 5), 5},
		{cat(pins(6, 10), pins(1, 5)), 5},
		{cat(pins(11, 15), pins(6, 10), pins(1, 5)), 5},
	}
	for i, st := range steps {
		p := e.get(t, "", 100)
		if diff := cmp.Diff(st.want, pagePins(p)); diff != "" {
			t.Fatalf("step %d pins (-want +got):\n%s", i, diff)
		}
		if p.FreshStatus != FreshIncluded || p.From != hedge.Primary || p.NextCursor != "" {
			t.Errorf("step %d: status %q from %v cursor %q; want included, primary, end", i, p.FreshStatus, p.From, p.NextCursor)
		}
		for j, it := range p.Items {
			if it.Fresh != (j < st.fresh) {
				t.Errorf("step %d item %d: fresh = %v", i, j, it.Fresh)
			}
		}
		e.materialize(t)
	}
	// The stored feed itself is in the same order, each item with its data.
	e.gen.err = errGen
	p := e.get(t, "", 100)
	if diff := cmp.Diff(steps[2].want, pagePins(p)); diff != "" {
		t.Errorf("materialized feed (-want +got):\n%s", diff)
	}
	if got := p.Items[0].Item; got.Source != zen.SourceFollowing || got.Reason != "followed" || got.Score != 1000-11 {
		t.Errorf("first item = %+v, want its source, score and reason kept", got)
	}
}

// A refresh before materialization shows each pin once: pending chunks are merged in place.
func TestRefreshBeforeMaterialization(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 100)
	e.get(t, "", 100)
	p := e.get(t, "", 100)
	want := cat(pins(11, 15), pins(6, 10), pins(1, 5))
	if diff := cmp.Diff(want, pagePins(p)); diff != "" {
		t.Fatalf("pins before materialization (-want +got):\n%s", diff)
	}
	// Materialize out of order, each job twice: same feed, chunks settled as delivered.
	tasks := e.queue.take()
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	for _, task := range append(tasks, tasks...) {
		if err := e.svc.Materialize(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	e.gen.err = errGen
	if diff := cmp.Diff(want, pagePins(e.get(t, "", 100))); diff != "" {
		t.Errorf("pins after materialization (-want +got):\n%s", diff)
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if d, ok := e.gen.settledAs(id); !ok || !d {
			t.Errorf("chunk %s settled = %v, %v; want delivered", id, d, ok)
		}
	}
}

// TestPendingPinsNotServedAgain: a generator that offers again the pins of chunks still pending
// (as it may after a machine crash undid them on its side; see generator.Options.CallerRecords)
// does not get them shown twice: not those of the newest chunk, met whole by the page's read
// even below the page, nor those of an older one the read did not reach (read through the
// pending-chunk index), nor after a page the standby answered. The pins the feed has not seen
// are served.
func TestPendingPinsNotServedAgain(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 2) // chunk c1 (pins 1-5) pending, two of its pins on the page
	e.get(t, "", 2) // chunk c2 (pins 6-10) pending: the page is two of its pins
	e.gen.mu.Lock()
	e.gen.next = 0 // the generator lost c1 and c2: it offers pins 1-10 again, then 11-12
	e.gen.size = 12
	e.gen.mu.Unlock()
	p := e.get(t, "", 2)
	var fresh []zen.ID
	for _, it := range p.Items {
		if it.Fresh {
			fresh = append(fresh, it.Pin)
		}
	}
	if diff := cmp.Diff(pins(11, 12), fresh); diff != "" {
		t.Errorf("fresh pins of the third page (-want +got):\n%s", diff)
	}
	// A page the standby answered may lack the pending chunks (replication lags): persist then
	// reads them from the primary.
	c := Chunk{ID: "again", User: e.user}
	for _, p := range pins(1, 10) {
		c.Items = append(c.Items, Item{Pin: p, Source: zen.SourceFollowing, Score: 1})
	}
	if got, err := e.svc.persist(t.Context(), e.svc.Config(), e.user, c, pageRead{pastPending: true}, false, false); err != nil || len(got) != 0 {
		t.Errorf("persist of pending chunks' pins after a standby page = %d entries, %v; want none", len(got), err)
	}
	e.materialize(t)
	e.gen.mu.Lock()
	e.gen.err = errGen // read the feed alone
	e.gen.mu.Unlock()
	all := pagePins(e.get(t, "", 100))
	slices.Sort(all)
	if diff := cmp.Diff(pins(1, 12), all); diff != "" {
		t.Errorf("the feed after materialization (-want +got):\n%s", diff)
	}
}

// Invariant 2, no item repeated across pages, even while new chunks arrive and pending chunks
// are materialized between pages.
func TestPagesNeverRepeat(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size        int
		materialize bool
	}{
		{"page 3, pending stays pending", 3, false},
		{"page 3, materialized between pages", 3, true},
		{"page 4", 4, true},
		{"page 1", 1, true},
		{"page 7", 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			for range 5 {
				e.get(t, "", 100)
				e.materialize(t)
			}
			// One more chunk served and left pending: the first page starts inside it.
			var got []zen.ID
			p := e.get(t, "", tc.size)
			got = append(got, pagePins(p)...)
			for i := 0; p.NextCursor != ""; i++ {
				if i > 100 {
					t.Fatal("pagination does not end")
				}
				// A new chunk arrives on another device, and jobs may run.
				other := e.get(t, "", 2)
				if other.FreshStatus != FreshIncluded {
					t.Fatalf("other device: %q", other.FreshStatus)
				}
				if tc.materialize {
					e.materialize(t)
				}
				p = e.get(t, p.NextCursor, tc.size)
				if p.FreshStatus != FreshNotFirstPage {
					t.Errorf("later page fresh status %q", p.FreshStatus)
				}
				got = append(got, pagePins(p)...)
			}
			want := cat(pins(26, 30), pins(21, 25), pins(16, 20), pins(11, 15), pins(6, 10), pins(1, 5))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pins across pages (-want +got):\n%s", diff)
			}
		})
	}
}

// Invariant 2, no pin twice under concurrent GetFeed: concurrent first pages, refreshes and
// materializations (each job run twice, concurrently) never show or store a pin twice.
func TestConcurrentGetFeedNoPinTwice(t *testing.T) {
	const workers, rounds = 8, 6
	// Every page asks the generator, none is deferred: the count of fresh pins below is exact.
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.MaxGenerating = workers })
	var mu sync.Mutex
	fresh := map[zen.ID]int{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var jobs sync.WaitGroup
	jobs.Go(func() {
		for {
			tasks := e.queue.take()
			var inner sync.WaitGroup
			for _, task := range tasks {
				for range 2 {
					inner.Go(func() {
						if err := e.svc.Materialize(context.Background(), task); err != nil {
							t.Errorf("materialize: %v", err)
						}
					})
				}
			}
			inner.Wait()
			select {
			case <-stop:
				if len(tasks) == 0 {
					return
				}
			default:
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for range rounds {
				p, err := e.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 50})
				if err != nil {
					t.Errorf("GetFeed: %v", err)
					return
				}
				seen := map[zen.ID]bool{}
				for _, it := range p.Items {
					if seen[it.Pin] {
						t.Errorf("pin %v twice on one page", it.Pin)
					}
					seen[it.Pin] = true
				}
				mu.Lock()
				for _, it := range p.Items {
					if it.Fresh {
						fresh[it.Pin]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	jobs.Wait()
	e.materialize(t)
	for pin, n := range fresh {
		if n != 1 {
			t.Errorf("pin %v handed out fresh %d times", pin, n)
		}
	}
	if len(fresh) != workers*rounds*5 {
		t.Errorf("%d fresh pins, want %d", len(fresh), workers*rounds*5)
	}
	e.gen.err = errGen
	all := e.all(t, 7)
	seen := map[zen.ID]bool{}
	for _, pin := range all {
		if seen[pin] {
			t.Errorf("pin %v twice in the materialized feed", pin)
		}
		seen[pin] = true
	}
	if len(all) != len(fresh) {
		t.Errorf("materialized feed has %d pins, want the %d served", len(all), len(fresh))
	}
}

// Invariant 4, degrade: the generator failing or stuck still gives the materialized feed, and
// a stuck generator never holds the request past its deadline.
func TestGeneratorFailureFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.GeneratorDeadline = 30 * time.Millisecond })
		e.get(t, "", 100)
		e.materialize(t)

		e.gen.err = errGen
		p := e.get(t, "", 100)
		if p.FreshStatus != FreshGeneratorError || p.FreshDetail == "" {
			t.Errorf("status %q detail %q, want generator_error with a reason", p.FreshStatus, p.FreshDetail)
		}
		if diff := cmp.Diff(pins(1, 5), pagePins(p)); diff != "" {
			t.Errorf("fallback pins (-want +got):\n%s", diff)
		}

		e.gen.mu.Lock()
		e.gen.err, e.gen.block = nil, make(chan struct{})
		e.gen.mu.Unlock()
		start := time.Now()
		p = e.get(t, "", 100)
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("a stuck generator held the request for %v (deadline 30ms)", took)
		}
		if p.FreshStatus != FreshTimeout {
			t.Errorf("status %q, want generator_timeout", p.FreshStatus)
		}
		if diff := cmp.Diff(pins(1, 5), pagePins(p)); diff != "" {
			t.Errorf("timeout pins (-want +got):\n%s", diff)
		}
		// The late chunk is given back to the pools, not lost.
		close(e.gen.block)
		select {
		case id := <-e.gen.settleCh:
			for id == "c1" {
				id = <-e.gen.settleCh
			}
			if d, _ := e.gen.settledAs(id); d {
				t.Errorf("late chunk %s settled as delivered, want returned", id)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the late chunk was never settled")
		}
	})
}

// TestBreakerOpenSkipsGenerator: once the primary's breaker is open, a first page is the
// standby's materialized feed at once: the generator is not called (its chunk could not be
// recorded on the primary, and taking pins only to give them back is churn), nothing is
// settled, and the page says why. When the primary is back and the breaker closes, fresh chunks
// return.
func TestBreakerOpenSkipsGenerator(t *testing.T) {
	e := newEnv(t, func(_ *Config, p *hedge.Policy) {
		p.Mode, p.Delay = hedge.ModeFixed, 5*time.Millisecond
		p.BreakerFailures, p.BreakerOpenFor, p.BreakerProbes = 2, 200*time.Millisecond, 1
	})
	for range 2 {
		e.get(t, "", 100)
		e.materialize(t)
	}
	e.flush(t)
	want := cat(pins(6, 10), pins(1, 5))
	if err := e.primary.Set(faults.Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	// Later pages read the failing primary until the breaker opens.
	for i := 0; e.svc.Hedger().BreakerState() != hedge.BreakerOpen; i++ {
		if i == 10 {
			t.Fatalf("breaker still %s after 10 reads of a primary in outage", e.svc.Hedger().BreakerState())
		}
		first := e.get(t, "", 4)
		e.get(t, first.NextCursor, 4)
	}
	e.svc.Wait()
	e.gen.mu.Lock()
	chunksBefore, settledBefore := e.gen.chunks, len(e.gen.settled)
	e.gen.mu.Unlock()

	p := e.get(t, "", 100)
	// The detail says why the breaker opened: the primary's reads failed (its outage). A read
	// before the outage may have counted as slow on a loaded machine (over Policy.Max, or lost to
	// the standby), so only the failures are required.
	wantDetail := regexp.MustCompile(`^the primary feed store's circuit breaker is open \([1-9][0-9]* of the last [0-9]+ primary reads failed, [0-9]+ slow\): no fresh chunk can be recorded$`)
	if p.FreshStatus != FreshPrimaryDown || !wantDetail.MatchString(p.FreshDetail) {
		t.Errorf("breaker open: status %q (%q), want %q with the breaker's reason", p.FreshStatus, p.FreshDetail, FreshPrimaryDown)
	}
	if p.From != hedge.Standby {
		t.Errorf("breaker open: page from %v, want the standby", p.From)
	}
	if diff := cmp.Diff(want, pagePins(p)); diff != "" {
		t.Errorf("breaker open: pins (-want +got):\n%s", diff)
	}
	e.svc.Wait()
	e.gen.mu.Lock()
	chunks, settled := e.gen.chunks, len(e.gen.settled)
	e.gen.mu.Unlock()
	if chunks != chunksBefore || settled != settledBefore {
		t.Errorf("breaker open: generator made %d chunks and %d were settled, want none", chunks-chunksBefore, settled-settledBefore)
	}

	// The primary heals: after BreakerOpenFor a probe closes the breaker, and first pages carry
	// fresh chunks again.
	if err := e.primary.Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p = e.get(t, "", 100)
		if p.FreshStatus == FreshIncluded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("primary healed: first pages still %q, breaker %s", p.FreshStatus, e.svc.Hedger().BreakerState())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Invariant 4, degrade: the primary down or slow gives the page from the standby; both down
// fails with ErrUnavailable.
func TestPrimaryFailureFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(_ *Config, p *hedge.Policy) { p.Mode = hedge.ModeFixed; p.Delay = 5 * time.Millisecond })
		for range 2 {
			e.get(t, "", 100)
			e.materialize(t)
		}
		e.flush(t)
		want := cat(pins(6, 10), pins(1, 5))
		e.gen.err = errGen

		if err := e.primary.Set(faults.Config{Outage: true}); err != nil {
			t.Fatal(err)
		}
		p := e.get(t, "", 100)
		if p.From != hedge.Standby || !p.Hedged {
			t.Errorf("primary down: from %v hedged %v, want the standby", p.From, p.Hedged)
		}
		if diff := cmp.Diff(want, pagePins(p)); diff != "" {
			t.Errorf("standby pins (-want +got):\n%s", diff)
		}
		// Later pages too.
		p = e.get(t, "", 4)
		if diff := cmp.Diff(want[4:], pagePins(e.get(t, p.NextCursor, 100))); diff != "" {
			t.Errorf("standby page 2 (-want +got):\n%s", diff)
		}

		// With the generator up, the fresh chunk cannot be recorded: served without it, returned.
		e.gen.err = nil
		p = e.get(t, "", 100)
		if p.FreshStatus != FreshPersistFailed {
			t.Errorf("status %q, want persist_failed", p.FreshStatus)
		}
		if diff := cmp.Diff(want, pagePins(p)); diff != "" {
			t.Errorf("pins (-want +got):\n%s", diff)
		}
		e.svc.Wait()
		if d, ok := e.gen.settledAs("c3"); !ok || d {
			t.Errorf("unrecorded chunk settled = %v, %v; want returned to the pools", d, ok)
		}
		e.gen.err = errGen

		// Slow primary: the standby answers after the cutoff.
		if err := e.primary.Set(faults.Config{SlowFraction: 1, Slow: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p = e.get(t, "", 100)
		if took := time.Since(start); took > time.Second || p.From != hedge.Standby {
			t.Errorf("slow primary: took %v from %v, want the standby soon after the 5ms cutoff", took, p.From)
		}

		// Both down.
		if err := e.primary.Set(faults.Config{Outage: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.standby.Set(faults.Config{Outage: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.GetFeed(t.Context(), Request{User: e.user}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("both down: err = %v, want ErrUnavailable", err)
		}
	})
}

// Invariant 6: bad input gets InvalidArgument-class errors and changes nothing.
func TestBadInputRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 100)
	e.materialize(t)
	good := e.get(t, "", 2).NextCursor
	e.materialize(t)
	other := userID(t, 2)
	foreign := encodeCursor(other, position{Seq: 1, Pos: 0})
	tampered := []byte(good)
	tampered[5] ^= 1
	board, _ := zen.NewID(7, zen.TypeBoard, 1)
	e.flush(t)
	before := dump(t, e.primary)
	chunks := e.gen.chunks
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"zero user", Request{}},
		{"not a user", Request{User: board}},
		{"reserved bits", Request{User: zen.ID(1 << 63)}},
		{"negative page", Request{User: e.user, PageSize: -1}},
		{"page too big", Request{User: e.user, PageSize: 201}},
		{"garbage cursor", Request{User: e.user, Cursor: "!!!"}},
		{"short cursor", Request{User: e.user, Cursor: "AAAA"}},
		{"tampered cursor", Request{User: e.user, Cursor: string(tampered)}},
		{"other user's cursor", Request{User: e.user, Cursor: foreign}},
		{"long cursor", Request{User: e.user, Cursor: string(make([]byte, 10000))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.GetFeed(t.Context(), tc.req)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	e.svc.Wait()
	e.flush(t)
	if diff := cmp.Diff(before, dump(t, e.primary)); diff != "" {
		t.Errorf("bad requests changed the table (-before +after):\n%s", diff)
	}
	if e.gen.chunks != chunks {
		t.Errorf("bad requests called the generator %d times", e.gen.chunks-chunks)
	}
}

func dump(t testing.TB, tb zen.Table) []zen.KV {
	t.Helper()
	rows, err := tb.Scan(context.Background(), zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestTrim(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.MaxItems = 12 })
	for range 4 {
		e.get(t, "", 100)
		e.materialize(t)
	}
	e.gen.err = errGen
	want := cat(pins(16, 20), pins(11, 15), pins(6, 7))
	if diff := cmp.Diff(want, e.all(t, 5)); diff != "" {
		t.Errorf("trimmed feed (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		pin  zen.ID
		want error
	}{{pinID(7), nil}, {pinID(8), zen.ErrNotFound}, {pinID(1), zen.ErrNotFound}, {pinID(20), nil}} {
		if _, err := e.primary.Get(t.Context(), pinKey(e.user, tc.pin)); !errors.Is(err, tc.want) {
			t.Errorf("pin index of %v: %v, want %v", tc.pin, err, tc.want)
		}
	}
	// Done markers of chunks wholly trimmed are gone; the others stay.
	for id, want := range map[string]error{"c1": zen.ErrNotFound, "c2": nil, "c4": nil} {
		if _, err := e.primary.Get(t.Context(), doneKey(e.user, id)); !errors.Is(err, want) {
			t.Errorf("done marker %s: %v, want %v", id, err, want)
		}
	}
}

// With TrimEvery > 1 a materialization trims only for the chunks trimDue picks: those leave
// exactly MaxItems items, the others add their chunk and leave the rest of the feed as it is.
func TestTrimEveryNth(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) { c.MaxItems = 7 })
	e.svc.trimEvery = 3
	length := 0
	var trimmed, grown int
	for i := range 24 {
		e.get(t, "", 100)
		tasks := e.queue.take()
		if len(tasks) != 1 {
			t.Fatalf("chunk %d: %d tasks", i, len(tasks))
		}
		if err := e.svc.Materialize(t.Context(), tasks[0]); err != nil {
			t.Fatal(err)
		}
		length += 5 // the fake generator's chunks hold 5 new pins
		if e.svc.trimDue(tasks[0].ChunkID) {
			length = min(length, 7)
			trimmed++
		} else {
			grown++
		}
		e.gen.mu.Lock()
		e.gen.err = errGen
		e.gen.mu.Unlock()
		if got := len(e.all(t, 50)); got != length {
			t.Fatalf("after chunk %s (due %v): feed of %d items, want %d", tasks[0].ChunkID, e.svc.trimDue(tasks[0].ChunkID), got, length)
		}
		e.gen.mu.Lock()
		e.gen.err = nil
		e.gen.mu.Unlock()
	}
	if trimmed == 0 || grown == 0 {
		t.Fatalf("%d chunks trimmed, %d grew the feed: the test needs both", trimmed, grown)
	}
}

// A pin already in the feed is not served again in a fresh chunk, nor stored twice.
func TestFreshPinAlreadyInFeed(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 100)
	e.materialize(t)
	// The generator hands out pin 3 again (say it was fanned out a second time).
	e.gen.mu.Lock()
	e.gen.next = 2
	e.gen.mu.Unlock()
	p := e.get(t, "", 2) // page of 2: pin 3 is not on the page, only in the index
	e.materialize(t)
	if diff := cmp.Diff(pins(6, 7), pagePins(p)); diff != "" {
		t.Errorf("fresh page (-want +got):\n%s", diff)
	}
	e.gen.err = errGen
	if diff := cmp.Diff(cat(pins(6, 7), pins(1, 5)), e.all(t, 3)); diff != "" {
		t.Errorf("feed (-want +got):\n%s", diff)
	}
}

// Invariant 5 and 1: a materialization that crashes after any number of writes and is retried
// leaves exactly the state of one clean run.
func TestMaterializeCrashAndRetry(t *testing.T) {
	build := func(limit int) (*Service, *crashTable, MaterializeTask) {
		inner, _ := zenmem.New().Table(t.Context(), "feed")
		ct := &crashTable{Table: inner, limit: -1}
		q := &fakeQueue{}
		// A frozen clock: the two runs compared row by row get the same chunk sequences.
		svc, err := New(Deps{Primary: ct, Standby: inner, Generator: newFakeGen(5), Enqueuer: q,
			Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, TrimEvery: 1},
			func() Config { c := queuedConfig(); c.MaxItems = 7; return c }())
		if err != nil {
			t.Fatal(err)
		}
		u := userID(t, 1)
		// c1 materialized, then c2 pending: materializing c2 also trims (max 7).
		for range 2 {
			if _, err := svc.GetFeed(t.Context(), Request{User: u}); err != nil {
				t.Fatal(err)
			}
			svc.Wait()
			if tasks := q.take(); len(tasks) != 1 {
				t.Fatalf("tasks %+v", tasks)
			} else if tasks[0].ChunkID == "c2" {
				ct.limit = limit
				return svc, ct, tasks[0]
			} else if err := svc.Materialize(t.Context(), tasks[0]); err != nil {
				t.Fatal(err)
			}
		}
		panic("unreachable")
	}
	ref, refTable, task := build(-1)
	if err := ref.Materialize(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	want := withoutHeadVersions(dump(t, refTable.Table))
	if len(want) == 0 {
		t.Fatal("empty reference")
	}
	for limit := 0; ; limit++ {
		svc, ct, task := build(limit)
		err := svc.Materialize(t.Context(), task)
		if err == nil {
			if limit < 3 {
				t.Fatalf("materialize made only %d writes", limit)
			}
			break
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("limit %d: %v", limit, err)
		}
		ct.limit = -1
		if err := svc.Materialize(t.Context(), task); err != nil {
			t.Fatalf("retry after crash at write %d: %v", limit, err)
		}
		if diff := cmp.Diff(want, withoutHeadVersions(dump(t, ct.Table))); diff != "" {
			t.Errorf("crash at write %d then retry (-clean +got):\n%s", limit, diff)
		}
	}
}

var errCrash = errors.New("crash")

// crashTable fails every write after limit writes (limit < 0: never), like a process dying.
type crashTable struct {
	zen.Table
	mu     sync.Mutex
	limit  int
	writes int
}

func (c *crashTable) write() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit >= 0 && c.writes >= c.limit {
		return errCrash
	}
	c.writes++
	return nil
}

func (c *crashTable) Apply(ctx context.Context, m []zen.Mutation) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Table.Apply(ctx, m)
}

func (c *crashTable) CheckAndSet(ctx context.Context, k, e, v []byte) (bool, error) {
	if err := c.write(); err != nil {
		return false, err
	}
	return c.Table.CheckAndSet(ctx, k, e, v)
}

func (c *crashTable) Increment(ctx context.Context, k []byte, d int64) (int64, error) {
	if err := c.write(); err != nil {
		return 0, err
	}
	return c.Table.Increment(ctx, k, d)
}

// A lost materialize job is completed by a read (re-enqueue) or by Recover.
func TestLostJobRecovered(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, nil)
	e.svc.now = clock
	e.queue.err = errors.New("redis down")
	p := e.get(t, "", 100)
	if p.FreshStatus != FreshIncluded {
		t.Fatalf("status %q: a failed enqueue must not hide the recorded chunk", p.FreshStatus)
	}
	e.queue.err = nil
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	e.gen.err = errGen
	e.get(t, "", 100)
	e.svc.Wait()
	tasks := e.queue.take()
	if len(tasks) != 1 || tasks[0].ChunkID != "c1" {
		t.Fatalf("re-enqueued %+v, want c1", tasks)
	}
	e.get(t, "", 100) // not re-enqueued twice in a row
	e.svc.Wait()
	if got := e.queue.take(); len(got) != 0 {
		t.Errorf("re-enqueued again: %+v", got)
	}
	n, err := e.svc.Recover(t.Context(), e.user, 30*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want 1", n, err)
	}
	if d, ok := e.gen.settledAs("c1"); !ok || !d {
		t.Errorf("recovered chunk settled = %v, %v", d, ok)
	}
	if n, err := e.svc.Recover(t.Context(), e.user, 0); err != nil || n != 0 {
		t.Errorf("second Recover = %d, %v; want 0", n, err)
	}
	if diff := cmp.Diff(pins(1, 5), pagePins(e.get(t, "", 100))); diff != "" {
		t.Errorf("feed (-want +got):\n%s", diff)
	}
}

func TestMaterializeRefusesBadTasks(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 100)
	task := e.queue.take()[0]
	m, err := e.svc.marker(t.Context(), task.User, task.ChunkID)
	if err != nil {
		t.Fatal(err)
	}
	seq := m.seq
	for _, bad := range []MaterializeTask{
		{User: task.User, ChunkID: "other", Seq: seq},
		{User: task.User, ChunkID: ""},
		{User: 0, ChunkID: task.ChunkID},
	} {
		if err := e.svc.Materialize(t.Context(), bad); !errors.Is(err, ErrBadTask) {
			t.Errorf("Materialize(%+v) = %v, want ErrBadTask", bad, err)
		}
	}
	board, _ := zen.NewID(7, zen.TypeBoard, 1)
	err = e.svc.HandleMaterialize(t.Context(), pinlater.MaterializePayload{V: 1, User: uint64(board), ChunkID: "c1"})
	if !errors.Is(err, pinlater.ErrInvalidPayload) {
		t.Errorf("HandleMaterialize(board) = %v, want pinlater.ErrInvalidPayload (archive, no retry)", err)
	}
	if err := e.svc.HandleMaterialize(t.Context(), pinlater.MaterializePayload{V: 1, User: uint64(task.User), ChunkID: task.ChunkID}); err != nil {
		t.Fatal(err)
	}
	if d, ok := e.gen.settledAs(task.ChunkID); !ok || !d {
		t.Errorf("chunk settled = %v, %v; want delivered", d, ok)
	}
}

// A materialize job runs in a background lane: while every lane is held it waits, and fails
// with its context, the chunk not settled (the job is retried); with a lane free it runs.
func TestMaterializeJobWaitsForALane(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 100)
	task := e.queue.take()[0]
	for range e.svc.lanes.Cap() {
		holdLane(t, e.svc)
	}
	p := pinlater.MaterializePayload{V: 1, User: uint64(task.User), ChunkID: task.ChunkID}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := e.svc.HandleMaterialize(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HandleMaterialize with every lane held = %v, want its context's deadline", err)
	}
	if _, ok := e.gen.settledAs(task.ChunkID); ok {
		t.Fatal("the chunk was settled by a job that had no lane")
	}
	e.svc.lanes.Release()
	if err := e.svc.HandleMaterialize(t.Context(), p); err != nil {
		t.Fatalf("HandleMaterialize with a lane free = %v", err)
	}
	if d, ok := e.gen.settledAs(task.ChunkID); !ok || !d {
		t.Errorf("chunk settled = %v, %v; want delivered", d, ok)
	}
}

// A hung Redis (the materialize enqueue never answers) does not hold a first page (the enqueue
// runs after the answer), and the chunk is still served and re-enqueued by a later read.
func TestHungQueueDoesNotHoldReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Unix(1_800_000_000, 0)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		e := newEnv(t, nil)
		e.svc.now = clock
		e.queue.hang.Store(true)
		t0 := time.Now()
		p, err := e.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took > 100*time.Millisecond {
			t.Errorf("first page took %v with the queue hung; want it not to wait for the enqueue", took)
		}
		e.svc.Wait() // the hung enqueue gives up at its bound
		if p.FreshStatus != FreshIncluded || len(p.Items) != 5 {
			t.Fatalf("status %q, %d items: a hung enqueue must not hide the recorded chunk", p.FreshStatus, len(p.Items))
		}
		e.queue.hang.Store(false)
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
		e.gen.err = errGen
		e.get(t, "", 100)
		e.svc.Wait()
		if tasks := e.queue.take(); len(tasks) != 1 || tasks[0].ChunkID != "c1" {
			t.Fatalf("re-enqueued %+v, want c1", tasks)
		}
	})
}

// TestSaturationKeepsFreshChunks: every primary read answers after the hedge policy's Max
// (120 ms against 100 ms; no hedging, so the primary's own answer is judged). Judged by time
// alone that is a slow store: the breaker opens and first pages come back primary_down. When
// the process's scheduling latency (injected) says the process is saturated, the late reads
// are its own, the breaker stays closed and every page carries its fresh chunk. The stores'
// delays run on the bubble's clock.
func TestSaturationKeepsFreshChunks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sched    time.Duration
		wantDown bool
	}{
		{"no scheduling latency: a slow store", 0, true},
		{"saturated process", 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var pol hedge.Policy
				e := newEnv(t, func(c *Config, p *hedge.Policy) {
					// The chunk's record (several writes of the slowed store) has time to land.
					c.MinChunkInterval, c.PersistTimeout = 0, 10*time.Second
					p.Mode, p.BreakerFailures = hedge.ModeOff, 3
					pol = *p
				})
				h, err := hedge.New(pol, hedge.Options{SchedLatency: func() time.Duration { return tc.sched }})
				if err != nil {
					t.Fatal(err)
				}
				e.rebuild(t, func(d *Deps) { d.Hedger = h })
				if err := e.primary.Set(faults.Config{SlowFraction: 1, Slow: 120 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				down := 0
				var statuses []FreshStatus
				for range 6 {
					p := e.get(t, "", 10)
					if p.FreshStatus == FreshPrimaryDown {
						down++
					}
					statuses = append(statuses, p.FreshStatus)
				}
				t.Logf("first pages: %v", statuses)
				if got := down > 0; got != tc.wantDown || !tc.wantDown && slices.Contains(statuses, FreshPersistFailed) {
					t.Errorf("first pages %v (breaker %s); want primary_down among them: %v (and, if not, every page fresh)", statuses, h.BreakerState(), tc.wantDown)
				}
			})
		})
	}
}
