package zen_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestDeletionLog: deletions from two Graphs on one store (two processes) each take one row of
// the log, without gaps; a second Delete of a deleted object and a Delete of an absent one log
// nothing; DeletionsAfter pages through the rows in order and returns none past the last.
func TestDeletionLog(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	a, b := newGraph(t, s, nil), newGraph(t, s, nil)
	const n = 40
	ids := make([]zen.ID, n)
	for i := range ids {
		o, err := a.Create(ctx, zen.TypePin, 0, map[string]any{"title": "p"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = o.ID
	}
	var wg sync.WaitGroup
	for i, g := range []*zen.Graph{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < n; j += 2 {
				if err := g.Delete(ctx, ids[j]); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := a.Delete(ctx, ids[0]); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if err := a.Delete(ctx, mustID(t, 9, zen.TypePin, 999)); err == nil {
		t.Fatal("delete of an absent pin succeeded")
	}
	var got []zen.ID
	for after := uint64(0); ; {
		page, err := b.DeletionsAfter(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after += uint64(len(page))
	}
	seen := map[zen.ID]int{}
	for _, id := range got {
		seen[id]++
	}
	want := map[zen.ID]int{}
	for _, id := range ids {
		want[id] = 1
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("deletions logged (-want +got):\n%s", diff)
	}
	if _, err := b.DeletionsAfter(ctx, 0, zen.MaxDeletionsPage+1); err == nil {
		t.Error("DeletionsAfter took a limit past MaxDeletionsPage")
	}
}
