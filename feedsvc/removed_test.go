package feedsvc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/zen"
)

// fakeEligibility names removed pins, or fails while err is set.
type fakeEligibility struct {
	mu      sync.Mutex
	removed map[zen.ID]bool
	err     error
}

func (f *fakeEligibility) Removed(_ context.Context, _ zen.ID, items []Item) (map[zen.ID]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := map[zen.ID]bool{}
	for _, it := range items {
		if f.removed[it.Pin] {
			out[it.Pin] = true
		}
	}
	return out, nil
}

func (f *fakeEligibility) set(removed map[zen.ID]bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed, f.err = removed, err
}

// A removal after a chunk was prepared (pins 6-10) takes pins 7 and 9 out of it: the next first
// page serves the rest fresh, in order, and the feed never holds 7 or 9, whether the chunk is
// served by a visit or materialized unvisited by the recovery pass.
func TestPreparedChunkRemovals(t *testing.T) {
	for _, visit := range []bool{true, false} {
		t.Run(map[bool]string{true: "visit", false: "recovery"}[visit], func(t *testing.T) {
			el := &fakeEligibility{}
			e, _ := newPreparedEnv(t, func(d *Deps) { d.Eligibility = el })
			el.set(map[zen.ID]bool{pinID(7): true, pinID(9): true}, nil)
			if visit {
				p := e.get(t, "", 100)
				want := []zen.ID{pinID(6), pinID(8), pinID(10)}
				if diff := cmp.Diff(want, freshPins(p)); diff != "" {
					t.Errorf("fresh after the removal (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(cat(want, pins(1, 5)), pagePins(p)); diff != "" {
					t.Errorf("page after the removal (-want +got):\n%s", diff)
				}
				e.svc.Wait()
				e.materialize(t)
			} else if n, err := e.svc.Recover(t.Context(), e.user, everyPending); err != nil || n != 1 {
				t.Fatalf("the recovery pass materialized %d chunks (%v), want the prepared one", n, err)
			}
			el.set(nil, nil)
			got := e.all(t, 3)
			for _, p := range []zen.ID{pinID(7), pinID(9)} {
				if slices.Contains(got, p) {
					t.Errorf("the feed %v holds removed pin %v", got, p)
				}
			}
			if n := testutil.ToFloat64(e.svc.m.preparedRemoved); n != 2 {
				t.Errorf("smartfeed_feed_prepared_removed_total = %v, want 2", n)
			}
		})
	}
}

// A removal check that fails holds the prepared chunk back from the page (no pin of it shown);
// once the check answers, the chunk is served, every pin once.
func TestPreparedChunkCheckFailsClosed(t *testing.T) {
	el := &fakeEligibility{}
	e, _ := newPreparedEnv(t, func(d *Deps) { d.Eligibility = el })
	el.set(nil, errors.New("graph down"))
	p := e.get(t, "", 100)
	for _, pin := range pins(6, 10) {
		if slices.Contains(pagePins(p), pin) {
			t.Errorf("page while the check fails shows prepared pin %v: %v", pin, pagePins(p))
		}
	}
	if n := testutil.ToFloat64(e.svc.m.preparedCheckErrors); n < 1 {
		t.Errorf("smartfeed_feed_prepared_check_errors_total = %v, want at least 1", n)
	}
	if _, err := e.svc.Recover(t.Context(), e.user, everyPending); err == nil {
		t.Error("the recovery pass materialized a prepared chunk it could not check")
	}
	el.set(nil, nil)
	e.svc.Wait()
	e.get(t, "", 100)
	e.svc.Wait()
	e.materialize(t)
	got := e.all(t, 4)
	for _, pin := range pins(6, 10) {
		if n := countOf(got, pin); n != 1 {
			t.Errorf("prepared pin %v is %d times in the feed %v, want once", pin, n, got)
		}
	}
}

// everyPending is a Recover age that takes every pending chunk, one recorded in this very
// millisecond too (Recover skips chunks served at or after now minus the age).
const everyPending = -time.Minute

func countOf(s []zen.ID, v zen.ID) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
