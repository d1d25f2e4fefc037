package feedsvc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// lostAnswerTable fails the next write of a chunk recording (the pending row's compare-and-set
// with the marker and index rows) with a timeout, after writing it when land is set: a store
// write whose answer was lost. It wraps a zen.Carrier (the Replicator).
type lostAnswerTable struct {
	zen.Table
	armed atomic.Bool
	land  bool
}

func (l *lostAnswerTable) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	c := l.Table.(zen.Carrier)
	if keyKind(key) == prefixFeed && l.armed.CompareAndSwap(true, false) {
		if l.land {
			if _, err := c.CheckAndSetWith(ctx, key, expected, value, extra); err != nil {
				return false, err
			}
		}
		return false, context.DeadlineExceeded
	}
	return c.CheckAndSetWith(ctx, key, expected, value, extra)
}

func (l *lostAnswerTable) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	return l.Table.(zen.Carrier).IncrementWith(ctx, key, delta, extra)
}

// TestUnsureRecordingSettledByWhatLanded: when the write recording a served chunk fails with
// no answer, the chunk is not given back at once (the rows may have landed: its pins would be
// served from the pending row and again from the pools). Once the write cannot land any more,
// the service looks: landed, the chunk is materialized and settled as delivered; not landed, it
// goes back to the pools.
func TestUnsureRecordingSettledByWhatLanded(t *testing.T) {
	for _, land := range []bool{true, false} {
		t.Run(map[bool]string{true: "landed", false: "lost"}[land], func(t *testing.T) {
			e := newEnv(t, nil)
			lt := &lostAnswerTable{Table: e.repl, land: land}
			h, err := hedge.New(hedge.DefaultPolicy(), hedge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := New(Deps{Primary: lt, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
				Hedger: h, UnsureGrace: 50 * time.Millisecond}, queuedConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Close)
			get := func() Page {
				t.Helper()
				p, err := svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 100})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			lt.armed.Store(true)
			if p := get(); p.FreshStatus != FreshPersistFailed || len(p.Items) != 0 {
				t.Fatalf("first page: %q with %d items, want persist_failed and nothing", p.FreshStatus, len(p.Items))
			}
			if d, ok := e.gen.settledAs("c1"); ok {
				t.Fatalf("chunk settled (delivered %v) before its recording's outcome was known", d)
			}
			svc.Wait()
			d, ok := e.gen.settledAs("c1")
			tasks := e.queue.take()
			if land {
				if ok {
					t.Errorf("recorded chunk settled (delivered %v) before it was materialized", d)
				}
				if diff := cmp.Diff([]MaterializeTask{{User: e.user, ChunkID: "c1"}}, tasks); diff != "" {
					t.Errorf("materialize jobs (-want +got):\n%s", diff)
				}
				for _, task := range tasks {
					if err := svc.Materialize(context.Background(), task); err != nil {
						t.Fatal(err)
					}
				}
				if d, ok := e.gen.settledAs("c1"); !ok || !d {
					t.Errorf("recorded chunk settled = %v, %v; want delivered", d, ok)
				}
			} else {
				if !ok || d {
					t.Errorf("unrecorded chunk settled = %v, %v; want returned to the pools", d, ok)
				}
				if len(tasks) != 0 {
					t.Errorf("materialize jobs %+v for a chunk never recorded", tasks)
				}
			}
			// The next page: the landed chunk's pins once, the lost one's not at all (they are
			// back in the pools), then the next chunk.
			e.gen.err = errGen
			want := []zen.ID(nil)
			if land {
				want = pins(1, 5)
			}
			if diff := cmp.Diff(want, pagePins(get())); diff != "" {
				t.Errorf("feed after (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCloseEndsUnsureWait: Close does not wait out the grace; the recovery pass settles the
// chunk instead.
func TestCloseEndsUnsureWait(t *testing.T) {
	e := newEnv(t, nil)
	lt := &lostAnswerTable{Table: e.repl, land: true}
	svc, err := New(Deps{Primary: lt, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
		UnsureGrace: time.Hour}, queuedConfig())
	if err != nil {
		t.Fatal(err)
	}
	lt.armed.Store(true)
	if _, err := svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 100}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { svc.Close(); svc.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the unsure-recording grace")
	}
	if d, ok := e.gen.settledAs("c1"); ok {
		t.Errorf("chunk settled (delivered %v) at close; want it left to recovery", d)
	}
}

// TestSequencesUniqueAcrossProcesses: chunk sequences come from the clock, so two feed processes
// serving one user in the same microsecond pick the same one; the pending row's
// compare-and-set makes the second take another, and both chunks are recorded and served, with
// the primary a zen.Carrier (one commit) and without (marker and index first).
func TestSequencesUniqueAcrossProcesses(t *testing.T) {
	for _, carrier := range []bool{true, false} {
		t.Run(map[bool]string{true: "carrier", false: "separate writes"}[carrier], func(t *testing.T) {
			e := newEnv(t, nil)
			var primary zen.Table = e.repl
			if !carrier {
				primary = plainTable{e.repl}
			}
			frozen := func() time.Time { return time.Unix(1_800_000_000, 0) }
			var svcs []*Service
			for range 2 {
				svc, err := New(Deps{Primary: primary, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue, Now: frozen}, queuedConfig())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(svc.Close)
				svcs = append(svcs, svc)
			}
			for _, svc := range svcs {
				p, err := svc.GetFeed(context.Background(), Request{User: e.user, PageSize: 100})
				if err != nil || p.FreshStatus != FreshIncluded {
					t.Fatalf("GetFeed = %q, %v; want the fresh chunk included", p.FreshStatus, err)
				}
			}
			var seqs []uint64
			for _, id := range []string{"c1", "c2"} {
				m, err := svcs[0].marker(context.Background(), e.user, id)
				if err != nil {
					t.Fatalf("marker of %s: %v", id, err)
				}
				seqs = append(seqs, m.seq)
			}
			if seqs[0] == seqs[1] {
				t.Fatalf("both chunks recorded under sequence %d", seqs[0])
			}
			e.gen.err = errGen
			p, err := svcs[0].GetFeed(context.Background(), Request{User: e.user, PageSize: 100})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(cat(pins(6, 10), pins(1, 5)), pagePins(p)); diff != "" {
				t.Errorf("feed (-want +got):\n%s", diff)
			}
		})
	}
}
