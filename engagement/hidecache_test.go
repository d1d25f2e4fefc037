package engagement

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// scanCounting counts the scans of a table.
type scanCounting struct {
	zen.Table
	scans atomic.Int64
}

func (s *scanCounting) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	s.scans.Add(1)
	return s.Table.Scan(ctx, o)
}

// TestHideCacheCoherent: two processes (each its own Store and HideCache over one table) read
// alice's hide set; a hide written through either, or through a third Store with no cache (the
// worker), is in both caches' very next answer, and an unchanged set is answered with no scan.
func TestHideCacheCoherent(t *testing.T) {
	ctx := t.Context()
	tab, err := zenmem.New().Table(ctx, Table)
	if err != nil {
		t.Fatal(err)
	}
	counted := make([]*scanCounting, 2)
	caches := make([]*HideCache, 2)
	stores := make([]*Store, 3)
	for i := range stores {
		c := &scanCounting{Table: tab}
		stores[i] = NewStore(c, 0, nil)
		if i < 2 {
			counted[i], caches[i] = c, NewHideCache(stores[i], 0)
		}
	}
	pin3 := mustID(1, zen.TypePin, 6)
	want := map[zen.ID]bool{}
	check := func(step string) {
		t.Helper()
		for i, c := range caches {
			got, err := c.HiddenPins(ctx, alice)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: process %d's hidden pins (-want +got):\n%s", step, i, diff)
			}
		}
	}
	check("no hide")
	for i, p := range []zen.ID{pin1, pin2, pin3} {
		if err := stores[i].Hide(ctx, alice, p, author); err != nil {
			t.Fatal(err)
		}
		want[p] = true
		check("after hiding " + p.String())
	}
	// Unchanged: answered from memory.
	for i, c := range caches {
		before := counted[i].scans.Load()
		if _, err := c.HiddenPins(ctx, alice); err != nil {
			t.Fatal(err)
		}
		if n := counted[i].scans.Load() - before; n != 0 {
			t.Errorf("process %d scanned %d times for an unchanged hide set, want 0", i, n)
		}
	}
}

// TestHideCacheBounded: past its bound, the cache drops a user for each new one, and still
// answers each user right.
func TestHideCacheBounded(t *testing.T) {
	s := newStore(t, nil)
	c := NewHideCache(s, 2)
	users := []zen.ID{alice, author, mustID(1, zen.TypeUser, 9)}
	for _, u := range users {
		if err := s.Hide(t.Context(), u, pin1, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for _, u := range users {
			got, err := c.HiddenPins(t.Context(), u)
			if err != nil || !got[pin1] || len(got) != 1 {
				t.Errorf("user %d: %v, %v", u, got, err)
			}
		}
	}
	if n := len(c.users); n > 2 {
		t.Errorf("%d users cached, bound 2", n)
	}
}
