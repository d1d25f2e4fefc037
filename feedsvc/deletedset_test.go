package feedsvc

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// graphOver opens a Graph over s: one per simulated process.
func graphOver(t testing.TB, s zen.Store) *zen.Graph {
	t.Helper()
	g, err := zen.NewGraph(context.Background(), s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// createPins creates pinID(1)…pinID(n) in g (the fake generator's pins).
func createPins(t testing.TB, g *zen.Graph, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		o, err := g.Create(context.Background(), zen.TypePin, pinID(1), map[string]any{"title": "p"})
		if err != nil {
			t.Fatal(err)
		}
		if o.ID != pinID(uint64(i)) {
			t.Fatalf("created pin %d, want %d", o.ID, pinID(uint64(i)))
		}
	}
}

// TestDeleteAcknowledgedIsNeverServed: two feed services (two processes: each its own graph
// handle and DeletedSet) serve one feed; after each delete through a third graph handle (the
// graph service) is acknowledged, neither serves the pin, although both had read the feed, and
// so caught up with the log, just before.
func TestDeleteAcknowledgedIsNeverServed(t *testing.T) {
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	createPins(t, writer, 20)
	e := newEnv(t, nil)
	all := feedOf(t, e, 4)
	svcs := make([]*Service, 2)
	for i := range svcs {
		svc, err := New(Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
			Liveness: NewDeletedSet(graphOver(t, graphStore))}, e.svc.Config())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Wait)
		svcs[i] = svc
	}
	deleted := map[zen.ID]bool{}
	for _, p := range []zen.ID{pinID(3), pinID(11), pinID(20), pinID(12), pinID(1)} {
		for _, svc := range svcs {
			e.svc = svc
			e.all(t, 50)
		}
		if err := writer.Delete(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		deleted[p] = true
		want := slices.DeleteFunc(slices.Clone(all), func(p zen.ID) bool { return deleted[p] })
		for i, svc := range svcs {
			e.svc = svc
			for _, size := range []int{3, 50} {
				if diff := cmp.Diff(want, e.all(t, size)); diff != "" {
					t.Errorf("service %d, page size %d, after deleting %d: feed (-want +got):\n%s", i, size, p, diff)
				}
			}
		}
	}
}

// TestDeletedSetRacesDeletes: while one graph handle deletes pins one by one, two DeletedSets
// over their own handles answer Live without pause, and compact the log as it grows; no answer
// names as live a pin whose delete was acknowledged before the call began.
func TestDeletedSetRacesDeletes(t *testing.T) {
	ctx := t.Context()
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	const n = 300
	createPins(t, writer, n)
	all := pins(1, n)
	var acked atomic.Int64 // pins of all[:acked] are deleted and acknowledged
	done := make(chan struct{})
	// The deletes start once both readers have answered once, so that reads and deletes overlap
	// however the goroutines are scheduled.
	var wg, ready sync.WaitGroup
	var sets []*DeletedSet
	for r := range 2 {
		set := NewDeletedSet(graphOver(t, graphStore))
		sets = append(sets, set)
		// Each set compacts the log every 8 deletions or so: the readers also race the
		// compactions and the trims (their own and the other's).
		set.SetCompactAfter(8)
		t.Cleanup(set.Wait)
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			for calls := 0; ; calls++ {
				if calls == 1 {
					ready.Done()
				}
				select {
				case <-done:
					return
				default:
				}
				k := int(acked.Load())
				live, err := set.Live(ctx, all)
				if err != nil {
					t.Error(err)
					if calls == 0 {
						ready.Done()
					}
					return
				}
				for _, p := range all[:k] {
					if live[p] {
						t.Errorf("reader %d: pin %d live after its delete was acknowledged", r, p)
						return
					}
				}
			}
		}()
	}
	ready.Wait()
	for i, p := range all {
		if i == n/2 {
			// Halfway, a compaction has happened (the readers start them as the log grows), so
			// the second half of the deletes races the trimmed log and later compactions.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // polling: a background compaction
				if pos, _, err := graphOver(t, graphStore).DeletionSnapshot(ctx); err == nil && pos > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no compaction within 10s of the readers seeing 150 deletions")
				}
			}
		}
		if err := writer.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
		acked.Store(int64(i + 1))
	}
	close(done)
	wg.Wait()
	// The compactions run in the background: the ones the readers started end before the check.
	for _, set := range sets {
		set.Wait()
	}
	if pos, _, err := graphOver(t, graphStore).DeletionSnapshot(ctx); err != nil || pos == 0 {
		t.Errorf("snapshot at %d, %v: no compaction raced the deletes", pos, err)
	} else {
		t.Logf("the log's snapshot covers %d of %d deletions", pos, n)
	}
}

// countingLog counts the log rows a DeletedSet reads past the snapshot.
type countingLog struct {
	DeletionLog
	rows atomic.Int64
}

func (c *countingLog) DeletionsAfter(ctx context.Context, after uint64, limit int) ([]zen.ID, error) {
	ids, err := c.DeletionLog.DeletionsAfter(ctx, after, limit)
	c.rows.Add(int64(len(ids)))
	return ids, err
}

// TestDeletedSetCompacts: a set compacts the log once 10 rows are past the snapshot, in the
// background. A set that starts afterwards loads the snapshot and reads only the rows past it;
// a set that had read the first rows before the compaction trimmed them catches up from the
// snapshot. Both know every deletion.
func TestDeletedSetCompacts(t *testing.T) {
	ctx := t.Context()
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	createPins(t, writer, 30)
	behind := NewDeletedSet(graphOver(t, graphStore))
	behind.SetCompactAfter(0)
	del := func(from, to int) {
		for i := from; i <= to; i++ {
			if err := writer.Delete(ctx, pinID(uint64(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	del(1, 3)
	if err := behind.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	del(4, 25)
	owner := NewDeletedSet(graphOver(t, graphStore))
	owner.SetCompactAfter(10)
	if err := owner.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	owner.Wait()
	del(26, 28)
	g := graphOver(t, graphStore)
	if pos, _, err := g.DeletionSnapshot(ctx); err != nil || pos != 25 {
		t.Fatalf("snapshot after the owner's compaction at position %d, %v; want 25", pos, err)
	}
	if _, err := g.DeletionsAfter(ctx, 3, 10); !errors.Is(err, zen.ErrDeletionsTrimmed) {
		t.Fatalf("rows past 3 after the compaction: %v, want them trimmed", err)
	}
	fresh := &countingLog{DeletionLog: g}
	for _, tc := range []struct {
		name string
		set  *DeletedSet
	}{{"started after the compaction", NewDeletedSet(fresh)}, {"behind the trim", behind}, {"the owner", owner}} {
		live, err := tc.set.Live(ctx, pins(1, 30))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(pins(29, 30), slices.Sorted(maps.Keys(live))); diff != "" {
			t.Errorf("%s: live pins (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := fresh.rows.Load(); got != 3 {
		t.Errorf("the set that started after the compaction read %d log rows, want the 3 past the snapshot", got)
	}
}

// failingCompactions is a log whose compactions fail, counted.
type failingCompactions struct {
	DeletionLog
	calls atomic.Int64
}

func (f *failingCompactions) CompactDeletions(context.Context, int) (uint64, error) {
	f.calls.Add(1)
	return 0, errors.New("store down")
}

// TestDeletedSetCompactionFailureBacksOff: a compaction that fails is not tried again on the
// next catch-up (it would be on every page), and the set keeps answering from the log.
func TestDeletedSetCompactionFailureBacksOff(t *testing.T) {
	ctx := t.Context()
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	createPins(t, writer, 6)
	log := &failingCompactions{DeletionLog: graphOver(t, graphStore)}
	set := NewDeletedSet(log)
	set.SetCompactAfter(2)
	for i := 1; i <= 5; i++ {
		if err := writer.Delete(ctx, pinID(uint64(i))); err != nil {
			t.Fatal(err)
		}
		live, err := set.Live(ctx, pins(1, 6))
		if err != nil {
			t.Fatal(err)
		}
		set.Wait()
		if diff := cmp.Diff(pins(uint64(i+1), 6), slices.Sorted(maps.Keys(live))); diff != "" {
			t.Errorf("after %d deletions: live pins (-want +got):\n%s", i, diff)
		}
	}
	if got := log.calls.Load(); got != 1 {
		t.Errorf("%d compactions tried, want 1 (then none for a while after it failed)", got)
	}
}

// gatedLog is a DeletionLog whose reads see the rows logged when they begin and then wait for
// release (when it is not nil) before they answer, as a read of a store does at its snapshot.
type gatedLog struct {
	mu      sync.Mutex
	rows    []zen.ID
	reads   atomic.Int32
	release chan struct{}
}

func (l *gatedLog) add(id zen.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, id)
}

func (l *gatedLog) DeletionsAfter(ctx context.Context, after uint64, limit int) ([]zen.ID, error) {
	l.reads.Add(1)
	l.mu.Lock()
	var out []zen.ID
	if after < uint64(len(l.rows)) {
		out = slices.Clone(l.rows[after:min(len(l.rows), int(after)+limit)])
	}
	gate := l.release
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func (l *gatedLog) DeletionSnapshot(context.Context) (uint64, []zen.ID, error) { return 0, nil, nil }

func (l *gatedLog) CompactDeletions(context.Context, int) (uint64, error) { return 0, nil }

// tick moves a synctest bubble's fake clock on, so that what follows happens later.
func tick() {
	// sleep: in a synctest bubble the sleep only advances the fake clock, at once.
	time.Sleep(time.Millisecond)
}

// TestDeletedSetPageJoinsALaterRead: a page that began before a read of the log began waits for
// that read instead of reading the log too, and is answered by it.
func TestDeletedSetPageJoinsALaterRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &gatedLog{}
		d := NewDeletedSet(log)
		if err := d.CatchUp(context.Background()); err != nil { // loads the (empty) snapshot
			t.Fatal(err)
		}
		tick()
		log.add(pinID(7)) // acknowledged before the page begins
		tick()
		page := withPageStart(context.Background(), time.Now())
		tick() // the read below begins after the page
		log.release = make(chan struct{})
		reads := log.reads.Load()
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := d.CatchUp(context.Background()); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // that read is under way, waiting for release
		var live map[zen.ID]bool
		wg.Go(func() {
			var err error
			if live, err = d.Live(page, []zen.ID{pinID(7), pinID(8)}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		if got := log.reads.Load() - reads; got != 1 {
			t.Fatalf("%d reads of the log for a read and a page that began before it; want 1", got)
		}
		close(log.release)
		wg.Wait()
		if diff := cmp.Diff(map[zen.ID]bool{pinID(8): true}, live); diff != "" {
			t.Errorf("live (-want +got):\n%s", diff)
		}
	})
}

// TestDeletedSetPageDoesNotJoinAnEarlierRead: a page that began after a read of the log began
// does not take that read's answer, which may lack a deletion acknowledged in between: it reads
// the log itself, and never serves the deleted pin.
func TestDeletedSetPageDoesNotJoinAnEarlierRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &gatedLog{}
		d := NewDeletedSet(log)
		if err := d.CatchUp(context.Background()); err != nil {
			t.Fatal(err)
		}
		log.release = make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := d.CatchUp(context.Background()); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()   // the early read saw the log without pin 7 and waits
		log.add(pinID(7)) // acknowledged now
		tick()
		page := withPageStart(context.Background(), time.Now())
		var live map[zen.ID]bool
		wg.Go(func() {
			var err error
			if live, err = d.Live(page, []zen.ID{pinID(7)}); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		close(log.release)
		wg.Wait()
		if live[pinID(7)] {
			t.Fatal("a page that began after pin 7's deletion was acknowledged found it live")
		}
	})
}
