package feedsvc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/zen"
)

type fakeLiveness struct {
	mu      sync.Mutex
	deleted map[zen.ID]bool
	err     error
	calls   int
}

func (f *fakeLiveness) Live(_ context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out := map[zen.ID]bool{}
	for _, p := range pins {
		if !f.deleted[p] {
			out[p] = true
		}
	}
	return out, nil
}

// rebuild replaces the env's service by one with extra deps over the same tables (a restart).
func (e *env) rebuild(t testing.TB, mod func(*Deps)) {
	t.Helper()
	d := Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue}
	if mod != nil {
		mod(&d)
	}
	svc, err := New(d, e.svc.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Wait)
	e.svc = svc
}

// feedOf materializes n chunks of 5 and returns the feed's pins in order (newest chunk first).
func feedOf(t *testing.T, e *env, n int) []zen.ID {
	t.Helper()
	for range n {
		e.get(t, "", 1)
		e.svc.Wait()
		e.materialize(t)
	}
	e.gen.err = errGen
	var want []zen.ID
	for c := n; c >= 1; c-- {
		want = append(want, pins(uint64(c-1)*5+1, uint64(c)*5)...)
	}
	return want
}

func TestDeletedPinsSkippedOnRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted []zen.ID
	}{
		{"none", nil},
		{"scattered", []zen.ID{pinID(1), pinID(7), pinID(8), pinID(20), pinID(13)}},
		{"long run (more than the re-reads fill)", pins(2, 18)},
		{"all", pins(1, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			all := feedOf(t, e, 4)
			lv := &fakeLiveness{deleted: map[zen.ID]bool{}}
			for _, p := range tc.deleted {
				lv.deleted[p] = true
			}
			e.rebuild(t, func(d *Deps) { d.Liveness = lv })
			want := slices.DeleteFunc(slices.Clone(all), func(p zen.ID) bool { return lv.deleted[p] })
			if len(want) == 0 {
				want = nil
			}
			for _, size := range []int{1, 2, 3, 7, 50} {
				got := e.all(t, size)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("page size %d: feed (-want +got):\n%s", size, diff)
				}
			}
			if len(tc.deleted) > 0 && counterValue(e.svc.m.deletedSkipped) == 0 {
				t.Error("deleted items not counted")
			}
		})
	}
}

// TestDeletedWhileReading: a pin deleted between two pages changes nothing already read, and
// the next page neither repeats nor skips a live item.
func TestDeletedWhileReading(t *testing.T) {
	e := newEnv(t, nil)
	all := feedOf(t, e, 3)
	lv := &fakeLiveness{deleted: map[zen.ID]bool{}}
	e.rebuild(t, func(d *Deps) { d.Liveness = lv })
	p1 := e.get(t, "", 4)
	lv.mu.Lock()
	lv.deleted[all[3]] = true // already served
	lv.deleted[all[4]] = true // the next one
	lv.mu.Unlock()
	var got []zen.ID
	for cur := p1.NextCursor; cur != ""; {
		p := e.get(t, cur, 4)
		got = append(got, pagePins(p)...)
		cur = p.NextCursor
	}
	if diff := cmp.Diff(all[5:], got); diff != "" {
		t.Errorf("after page 1 (-want +got):\n%s", diff)
	}
}

func TestLivenessErrorServesUnfiltered(t *testing.T) {
	e := newEnv(t, nil)
	all := feedOf(t, e, 2)
	lv := &fakeLiveness{deleted: map[zen.ID]bool{all[0]: true}, err: errors.New("graph down")}
	e.rebuild(t, func(d *Deps) { d.Liveness = lv })
	if diff := cmp.Diff(all, e.all(t, 4)); diff != "" {
		t.Errorf("feed (-want +got):\n%s", diff)
	}
	if counterValue(e.svc.m.liveErrors) == 0 {
		t.Error("liveness errors not counted")
	}
}

type fakeActivity struct {
	mu         sync.Mutex
	rebuilding bool
	err        error
	block      chan struct{}
	users      []zen.ID
}

func (f *fakeActivity) Touch(_ context.Context, user zen.ID) (bool, error) {
	f.mu.Lock()
	f.users = append(f.users, user)
	block, r, err := f.block, f.rebuilding, f.err
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	return r, err
}

func (f *fakeActivity) touched() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.users)
}

func TestActivity(t *testing.T) {
	e := newEnv(t, nil)
	act := &fakeActivity{rebuilding: true}
	e.rebuild(t, func(d *Deps) { d.Activity = act; d.ActivityWait = time.Second })
	p := e.get(t, "", 10)
	if !p.Rebuilding {
		t.Error("rebuilding not reported")
	}
	if p.NextCursor != "" || len(p.Items) != 5 {
		t.Errorf("page %d items, cursor %q", len(p.Items), p.NextCursor)
	}
	act.mu.Lock()
	act.rebuilding = false
	act.mu.Unlock()
	if e.get(t, "", 10).Rebuilding {
		t.Error("rebuilding reported after the rebuild")
	}
	// An error reads as not rebuilding and never fails the page.
	act.mu.Lock()
	act.rebuilding, act.err = true, errors.New("worker state down")
	act.mu.Unlock()
	if p := e.get(t, "", 10); p.Rebuilding {
		t.Error("a failed Touch reported rebuilding")
	}
	// A bad request is not an activity.
	n := act.touched()
	if _, err := e.svc.GetFeed(t.Context(), Request{User: e.user, PageSize: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if act.touched() != n {
		t.Error("Touch called for an invalid request")
	}
}

func TestActivityOffCriticalPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		act := &fakeActivity{rebuilding: true, block: make(chan struct{})}
		e.rebuild(t, func(d *Deps) { d.Activity = act; d.ActivityWait = 10 * time.Millisecond })
		start := time.Now()
		p := e.get(t, "", 10)
		if took := time.Since(start); took > time.Second {
			t.Errorf("GetFeed took %v behind a stuck Touch", took)
		}
		if p.Rebuilding || len(p.Items) != 5 {
			t.Errorf("page: rebuilding %v, %d items", p.Rebuilding, len(p.Items))
		}
		if counterValue(e.svc.m.activityLate) != 1 {
			t.Error("late Touch not counted")
		}
		close(act.block) // the background Touch finishes (svc.Wait at cleanup waits for it)
	})
}

// TestRecoverAllAfterRestart: a chunk served while its materialize job was lost (a crash of
// the enqueue path) is found through the pending index by a new service over the same tables,
// materialized and settled; the index is empty afterwards.
func TestRecoverAllAfterRestart(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, nil)
	e.svc.now = clock
	users := []zen.ID{userID(t, 3), userID(t, 1), userID(t, 2)}
	e.queue.err = errors.New("redis down")
	for _, u := range users {
		if _, err := e.svc.GetFeed(t.Context(), Request{User: u}); err != nil {
			t.Fatal(err)
		}
	}
	e.svc.Wait()
	for i, id := range []string{"c1", "c2", "c3"} {
		if st, err := e.svc.ChunkStatus(t.Context(), users[i], id); err != nil || st != ChunkPending {
			t.Errorf("ChunkStatus(%s) = %v, %v; want pending", id, st, err)
		}
	}
	if st, _ := e.svc.ChunkStatus(t.Context(), users[0], "c9"); st != ChunkUnknown {
		t.Errorf("unknown chunk: %v", st)
	}
	e.queue.err = nil

	// Restart: a new service over the same stores, later.
	e.rebuild(t, func(d *Deps) { d.Now = clock })
	if _, _, err := e.svc.RecoverAll(t.Context(), 0, time.Minute, 100); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.gen.settledAs("c1"); ok {
		t.Fatal("a chunk younger than olderThan was recovered")
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	total := 0
	after := zen.ID(0)
	for i := 0; ; i++ {
		next, n, err := e.svc.RecoverAll(t.Context(), after, time.Minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if next == 0 {
			break
		}
		if i > 10 {
			t.Fatal("RecoverAll does not end")
		}
		after = next
	}
	if total != 3 {
		t.Errorf("recovered %d chunks, want 3", total)
	}
	for i, id := range []string{"c1", "c2", "c3"} {
		if d, ok := e.gen.settledAs(id); !ok || !d {
			t.Errorf("chunk %s settled = %v, %v; want delivered", id, d, ok)
		}
		if st, err := e.svc.ChunkStatus(t.Context(), users[i], id); err != nil || st != ChunkDone {
			t.Errorf("ChunkStatus(%s) = %v, %v; want done", id, st, err)
		}
	}
	if rows := indexRows(t, e.primary); len(rows) != 0 {
		t.Errorf("pending index after recovery: %v", rows)
	}
	e.gen.err = errGen
	if diff := cmp.Diff(pins(6, 10), e.all(t, 100)); diff != "" {
		t.Errorf("feed of %v (-want +got):\n%s", e.user, diff)
	}
	if _, _, err := e.svc.RecoverAll(t.Context(), 0, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("limit 0: %v", err)
	}
}

// TestRecoverAllDropsOrphanIndexRows: an index row without its pending row (a write cut
// short) is dropped.
func TestRecoverAllDropsOrphanIndexRows(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.repl.Apply(t.Context(), []zen.Mutation{{Key: pendingIndexKey(e.user, 9), Value: []byte{}}}); err != nil {
		t.Fatal(err)
	}
	if _, n, err := e.svc.RecoverAll(t.Context(), 0, 0, 10); err != nil || n != 0 {
		t.Fatalf("RecoverAll = %d, %v", n, err)
	}
	if rows := indexRows(t, e.primary); len(rows) != 0 {
		t.Errorf("orphan index row kept")
	}
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
