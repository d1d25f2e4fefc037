package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/zen"
)

// withoutHeadVersions returns rows without the head version rows (user | 'f'), whose values
// name the incarnation that wrote them: two runs of the same writes differ only there.
func withoutHeadVersions(rows []zen.KV) []zen.KV {
	var out []zen.KV
	for _, kv := range rows {
		if !isHeadVersionKey(kv.Key) {
			out = append(out, kv)
		}
	}
	return out
}

// peer is one feed process over e's stores: a Service of its own (its own head cache and
// incarnation) with its own metrics.
type peer struct {
	svc *Service
	reg *prometheus.Registry
}

func newPeer(t *testing.T, e *env, headBytes int64) peer {
	t.Helper()
	reg := prometheus.NewRegistry()
	// The same checks as e's service, as every feed process of a deployment has: a peer without
	// them would demote a prepared chunk with its removed pins in it.
	svc, err := New(Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
		Registerer: reg, TrimEvery: 1, HeadCacheBytes: headBytes, Liveness: e.svc.live, Eligibility: e.svc.elig}, e.svc.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Wait)
	return peer{svc, reg}
}

func (p peer) page(t *testing.T, user zen.ID, size int) Page {
	t.Helper()
	pg, err := p.svc.GetFeed(context.Background(), Request{User: user, PageSize: size})
	if err != nil {
		t.Fatal(err)
	}
	p.svc.enqueues.Wait()
	return pg
}

func (p peer) hits(t *testing.T) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "smartfeed_feed_head_cache_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == headHit {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// shown is a page's items as the test compares them: pin and fresh label.
func shown(p Page) []string {
	out := make([]string, 0, len(p.Items))
	for _, it := range p.Items {
		out = append(out, fmt.Sprintf("%d fresh=%v", it.Pin.Local(), it.Fresh))
	}
	return out
}

// TestHeadCacheTwoProcesses: two feed processes (two Services, each with its head cache) serve
// one user over one store, taking turns writing (a served chunk, its materialization, a trim, the
// feed's deletion) while the other has the feed's head cached. After each write returns, the
// other's next first page is what a process with no cache reads, so the write is never hidden;
// every fresh pin is shown fresh once over both processes; and pages with no write between them
// are served from the cache.
func TestHeadCacheTwoProcesses(t *testing.T) {
	e := newEnv(t, nil)
	procs := []peer{newPeer(t, e, 0), newPeer(t, e, 0)}
	cold := newPeer(t, e, -1) // reads the store every time
	user := e.user
	const size = 40
	freshSeen := map[zen.ID]int{}
	// read has reader serve a first page with the generator down (the page is the materialized
	// read alone, the cached part) and compares it with a cold read.
	read := func(step string, reader peer) {
		t.Helper()
		e.gen.err = errGen
		defer func() { e.gen.err = nil }()
		got := reader.page(t, user, size)
		want := cold.page(t, user, size)
		if diff := cmp.Diff(shown(want), shown(got)); diff != "" {
			t.Fatalf("%s: page of the process with the head cached (-cold read +got):\n%s", step, diff)
		}
	}
	for round := range 6 {
		writer, reader := procs[round%2], procs[1-round%2]
		step := func(what string) string { return fmt.Sprintf("round %d, after %s", round, what) }
		read(step("nothing"), reader)
		read(step("nothing, again"), reader) // a hit
		p := writer.page(t, user, size)      // a fresh chunk, recorded as pending
		if p.FreshStatus != FreshIncluded {
			t.Fatalf("round %d: writer's page %q", round, p.FreshStatus)
		}
		for _, it := range p.Items {
			if it.Fresh {
				freshSeen[it.Pin]++
			}
		}
		read(step("a served chunk"), reader)
		for _, task := range e.queue.take() {
			if err := writer.svc.Materialize(context.Background(), task); err != nil {
				t.Fatal(err)
			}
		}
		read(step("a materialization"), reader)
	}
	for pin, n := range freshSeen {
		if n != 1 {
			t.Errorf("pin %d shown fresh %d times", pin.Local(), n)
		}
	}
	if len(freshSeen) != 6*5 {
		t.Errorf("%d pins shown fresh, want 30", len(freshSeen))
	}
	for i, p := range procs {
		if p.hits(t) < 3 {
			t.Errorf("process %d: %v head cache hits, want at least 3 (its pages with no write between them)", i, p.hits(t))
		}
	}

	// A trim by one process: the other, its head cached, serves the trimmed feed.
	read("before the trim", procs[0])
	cfg := procs[1].svc.Config()
	cfg.MaxItems = 7
	if err := procs[1].svc.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if n, err := procs[1].svc.Trim(context.Background(), user); err != nil || n == 0 {
		t.Fatalf("trim: %d dropped, %v", n, err)
	}
	read("the trim", procs[0])
	if got := len(procs[0].page(t, user, size).Items); got != 7+5 { // the page's own fresh chunk too
		t.Errorf("after the trim: %d items, want 12", got)
	}
	for _, task := range e.queue.take() {
		if err := procs[0].svc.Materialize(context.Background(), task); err != nil {
			t.Fatal(err)
		}
	}

	// The feed's deletion by one process: the other serves nothing.
	read("before the deletion", procs[0])
	if err := procs[1].svc.DeleteFeed(context.Background(), user); err != nil {
		t.Fatal(err)
	}
	read("the deletion", procs[0])
}

// TestHeadCacheSizes: a head read at one page size is not served for another (the read met a
// different set of rows), and each size gets the same page as a cold read.
func TestHeadCacheSizes(t *testing.T) {
	e := newEnv(t, nil)
	all := feedOf(t, e, 4) // leaves the generator down
	p := newPeer(t, e, 0)
	for _, size := range []int{3, 20, 3, 7, 20} {
		if diff := cmp.Diff(all[:min(size, len(all))], pagePins(p.page(t, e.user, size))); diff != "" {
			t.Errorf("size %d (-want +got):\n%s", size, diff)
		}
	}
}

// TestHeadCacheBudget: the cache holds at most its budget, the least recently used heads out
// first.
func TestHeadCacheBudget(t *testing.T) {
	read := pageRead{entries: make([]entry, 10)}
	cost := headCost(read) + 16
	c, err := newHeadCache(3*cost, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := []byte("0123456789abcdef")
	for u := zen.ID(1); u <= 3; u++ {
		c.put(u, 10, v, read)
	}
	if _, r := c.get(1, 10, v); r != headHit { // 1 is now the most recent: 2 goes next
		t.Fatalf("user 1: %s", r)
	}
	c.put(4, 10, v, read)
	got := map[zen.ID]string{}
	for u := zen.ID(1); u <= 4; u++ {
		_, got[u] = c.get(u, 10, v)
	}
	want := map[zen.ID]string{1: headHit, 2: headMiss, 3: headHit, 4: headHit}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after a fourth head (-want +got):\n%s", diff)
	}
	if c.used > c.budget {
		t.Errorf("%d bytes held, budget %d", c.used, c.budget)
	}
	if _, r := c.get(1, 10, []byte("another version!")); r != headStale {
		t.Errorf("another version: %s, want stale", r)
	}
	if _, r := c.get(1, 10, v); r != headMiss {
		t.Errorf("after a stale lookup: %s, want miss (dropped)", r)
	}
}

// TestHeadCacheRemovalAfterCaching: the cache holds the raw read, so a removal (an unfollow or a
// delete) that the graph answers after the head was cached, with no feed write since, still
// keeps its pins off the next page, which is served from the cache.
func TestHeadCacheRemovalAfterCaching(t *testing.T) {
	el := &fakeEligibility{}
	reg := prometheus.NewRegistry()
	e, _ := newPreparedEnv(t, func(d *Deps) { d.Eligibility, d.Registerer = el, reg }) // prepared: pins 6-10
	p := peer{e.svc, reg}
	e.gen.err = errGen // no new chunk: the pages write nothing before they answer
	el.set(nil, errors.New("graph down"))
	if got := p.page(t, e.user, 100); len(freshPins(got)) != 0 {
		t.Fatalf("removal check down: fresh %v, want the prepared chunk held back", freshPins(got))
	}
	hits := p.hits(t)
	el.set(map[zen.ID]bool{pinID(7): true, pinID(9): true}, nil)
	got := p.page(t, e.user, 100)
	if p.hits(t) != hits+1 {
		t.Fatalf("the second page was not served from the head cache (%v hits, want %v)", p.hits(t), hits+1)
	}
	want := []zen.ID{pinID(6), pinID(8), pinID(10)}
	if diff := cmp.Diff(want, freshPins(got)); diff != "" {
		t.Errorf("fresh after the removal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(cat(want, pins(1, 5)), pagePins(got)); diff != "" {
		t.Errorf("page after the removal (-want +got):\n%s", diff)
	}
}

// TestHeadCacheConcurrentPages: pages of one user served at once from one cached head, each
// filtering it (deleted pins, removed prepared pins) and serving its prepared chunk, while
// another process writes to the feed, share no memory they write (go test -race) and each
// shows every pin once.
func TestHeadCacheConcurrentPages(t *testing.T) {
	el := &fakeEligibility{removed: map[zen.ID]bool{pinID(7): true}}
	live := &fakeLiveness{deleted: map[zen.ID]bool{pinID(2): true}}
	e, _ := newPreparedEnv(t, func(d *Deps) { d.Eligibility, d.Liveness = el, live })
	e.gen.err = errGen
	other := newPeer(t, e, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			for range 25 {
				pg, err := e.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 50})
				if err != nil {
					errs <- err
					return
				}
				seen := map[zen.ID]bool{}
				for _, it := range pg.Items {
					if seen[it.Pin] || it.Pin == pinID(2) || it.Pin == pinID(7) {
						errs <- fmt.Errorf("page %v shows pin %d twice or removed", pagePins(pg), it.Pin.Local())
						return
					}
					seen[it.Pin] = true
				}
			}
		})
	}
	for range 5 {
		e.gen.mu.Lock()
		e.gen.err = nil
		e.gen.mu.Unlock()
		if _, err := other.svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 50}); err != nil {
			t.Error(err)
		}
		e.gen.mu.Lock()
		e.gen.err = errGen
		e.gen.mu.Unlock()
	}
	wg.Wait()
	e.svc.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHeadCacheStalePendingReenqueued: a served chunk whose materialize job was lost stays in the
// cached head as pending; once it is older than stale_pending, a page served from the cache
// re-enqueues its materialization, as a page that scanned would.
func TestHeadCacheStalePendingReenqueued(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reg := prometheus.NewRegistry()
	e.rebuild(t, func(d *Deps) { d.Now, d.Registerer = clock, reg })
	p := peer{e.svc, reg}
	p.page(t, e.user, 20)
	lost := e.queue.take() // the chunk's job is lost
	if len(lost) != 1 {
		t.Fatalf("jobs %+v, want the chunk's", lost)
	}
	e.gen.err = errGen
	p.page(t, e.user, 20) // caches the head, the chunk pending and young
	p.page(t, e.user, 20)
	e.svc.Wait()
	if got := e.queue.take(); len(got) != 0 {
		t.Fatalf("young pending chunk re-enqueued: %+v", got)
	}
	mu.Lock()
	now = now.Add(e.svc.Config().StalePending + time.Second)
	mu.Unlock()
	hits := p.hits(t)
	p.page(t, e.user, 20)
	if p.hits(t) != hits+1 {
		t.Fatalf("the page was not served from the head cache")
	}
	e.svc.Wait()
	if diff := cmp.Diff(lost, e.queue.take()); diff != "" {
		t.Errorf("re-enqueued after stale_pending (-lost job +got):\n%s", diff)
	}
}
