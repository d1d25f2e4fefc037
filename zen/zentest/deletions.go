package zentest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
)

// deletionLogPrefix is the key prefix of the deletion log's rows in the counters table.
var deletionLogPrefix = []byte{0, 0, 0, 0, 0, 0, 0, 0, 'x'}

// readDeletions reads every deletion the log names as a reader that starts does: the snapshot,
// then the rows past it (from a newer snapshot when they were trimmed meanwhile).
func readDeletions(t *testing.T, ctx context.Context, g *zen.Graph) map[zen.ID]bool {
	t.Helper()
	for range 10 {
		pos, ids, err := g.DeletionSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[zen.ID]bool{}
		for _, id := range ids {
			got[id] = true
		}
		for {
			page, err := g.DeletionsAfter(ctx, pos, zen.MaxDeletionsPage)
			if errors.Is(err, zen.ErrDeletionsTrimmed) {
				got = nil
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range page {
				got[id] = true
			}
			pos += uint64(len(page))
			if len(page) < zen.MaxDeletionsPage {
				return got
			}
		}
	}
	t.Fatal("the deletion log was trimmed under every read of it")
	return nil
}

// logRows returns the row numbers of the deletion log (trimmed rows are gone).
func logRows(t *testing.T, ctx context.Context, s zen.Store) []uint64 {
	t.Helper()
	tb, err := s.Table(ctx, zen.TableCounters)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Scan(ctx, zen.ScanOptions{Start: deletionLogPrefix, Stop: zen.PrefixEnd(deletionLogPrefix)})
	if err != nil {
		t.Fatal(err)
	}
	var ns []uint64
	for _, kv := range rows {
		var n uint64
		for _, b := range kv.Key[len(deletionLogPrefix):] {
			n = n<<8 | uint64(b)
		}
		ns = append(ns, n)
	}
	return ns
}

// makePins creates n pins and returns their IDs.
func makePins(t *testing.T, ctx context.Context, g *zen.Graph, n int) []zen.ID {
	t.Helper()
	ids := make([]zen.ID, n)
	for i := range ids {
		o, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"title": "p"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = o.ID
	}
	return ids
}

// modelDeletionsCompacted: 30 deletions, a compaction, 5 more. A reader that starts loads the
// snapshot and the rows past it and knows all 35; the log keeps only the row at the snapshot's
// position and the rows past it; a reader behind the snapshot is told to load it
// (ErrDeletionsTrimmed); a compaction with fewer rows past the snapshot than asked writes none.
func modelDeletionsCompacted(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	g := modelGraph(t, s, c)
	ids := makePins(t, ctx, g, 35)
	for _, id := range ids[:30] {
		if err := g.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	pos, err := g.CompactDeletions(ctx, 1)
	if err != nil || pos != 30 {
		t.Fatalf("compaction: position %d, %v; want 30", pos, err)
	}
	if diff := cmp.Diff([]uint64{30}, logRows(t, ctx, s)); diff != "" {
		t.Errorf("log rows after the compaction (-want +got):\n%s", diff)
	}
	for _, id := range ids[30:] {
		if err := g.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	want := map[zen.ID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if diff := cmp.Diff(want, readDeletions(t, ctx, modelGraph(t, s, c))); diff != "" {
		t.Errorf("a new reader's deletions (-want +got):\n%s", diff)
	}
	if _, err := g.DeletionsAfter(ctx, 10, 100); !errors.Is(err, zen.ErrDeletionsTrimmed) {
		t.Errorf("DeletionsAfter(10) behind the snapshot at 30: %v, want ErrDeletionsTrimmed", err)
	}
	if pos, err := g.CompactDeletions(ctx, 6); err != nil || pos != 30 {
		t.Errorf("compaction asked for 6 rows with 5 past the snapshot: position %d, %v; want 30 (none written)", pos, err)
	}
	if pos, err := g.CompactDeletions(ctx, 5); err != nil || pos != 35 {
		t.Errorf("compaction of the 5 rows: position %d, %v; want 35", pos, err)
	}
	if diff := cmp.Diff([]uint64{35}, logRows(t, ctx, s)); diff != "" {
		t.Errorf("log rows after the second compaction (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, readDeletions(t, ctx, modelGraph(t, s, c))); diff != "" {
		t.Errorf("a new reader's deletions after the second compaction (-want +got):\n%s", diff)
	}
}

// modelDeletionsCompactRace: three graph handles (processes) delete pins while a fourth
// compacts the log over and over. A reader that starts afterwards, from the snapshot and the
// rows past it, knows every acknowledged deletion; and one made while the deletes ran knew every
// deletion acknowledged before it began. A last compaction leaves one row.
func modelDeletionsCompactRace(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	ids := makePins(t, ctx, modelGraph(t, s, c), 90)
	var acked sync.Map
	var deleters, compactor sync.WaitGroup
	var done atomic.Bool
	compactions := 0
	compactor.Go(func() {
		g := modelGraph(t, s, c)
		for !done.Load() {
			if _, err := g.CompactDeletions(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			compactions++
			// A reader meanwhile: every deletion acknowledged before it began is named.
			var before []zen.ID
			acked.Range(func(k, _ any) bool { before = append(before, k.(zen.ID)); return true })
			got := readDeletions(t, ctx, g)
			for _, id := range before {
				if !got[id] {
					t.Errorf("a reader during the race misses %d, acknowledged before it began", id)
				}
			}
		}
	})
	for w := range 3 {
		deleters.Go(func() {
			g := modelGraph(t, s, c)
			for i := w; i < len(ids); i += 3 {
				if err := g.Delete(ctx, ids[i]); err != nil {
					t.Error(err)
					return
				}
				acked.Store(ids[i], true)
			}
		})
	}
	deleters.Wait()
	done.Store(true)
	compactor.Wait()
	want := map[zen.ID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if diff := cmp.Diff(want, readDeletions(t, ctx, modelGraph(t, s, c))); diff != "" {
		t.Errorf("after %d compactions raced the deletes: a new reader's deletions (-want +got):\n%s", compactions, diff)
	}
	g := modelGraph(t, s, c)
	pos, err := g.CompactDeletions(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	rows := logRows(t, ctx, s)
	if diff := cmp.Diff([]uint64{pos}, rows, cmpopts.EquateEmpty()); diff != "" && !(pos == 0 && len(rows) == 0) {
		t.Errorf("log rows after the last compaction at %d (-want +got):\n%s", pos, diff)
	}
	_, snap, err := g.DeletionSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != len(ids) {
		t.Errorf("the last snapshot names %d deletions, want %d (each once)", len(snap), len(ids))
	}
	t.Logf("%d compactions raced 90 deletes; the log ends at row %d", compactions, pos)
}
