package bench

import (
	"math"
	"runtime/metrics"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSchedDiff(t *testing.T) {
	buckets := []float64{0, 1e-4, 1e-3, 1e-2, math.Inf(1)} // 0–0.1 ms, 0.1–1 ms, 1–10 ms, ≥ 10 ms
	before := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{5, 5, 5, 5}}
	// Over the phase: 980 waits under 0.1 ms, 15 under 1 ms, 3 under 10 ms, 2 past it (the open
	// last bucket reports its lower bound).
	after := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{985, 20, 8, 7}}
	got := schedDiff(before, after)
	want := &SchedResult{Waits: 1000, P50Ms: 0.1, P99Ms: 1, P999Ms: 10}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schedDiff (-want +got):\n%s", diff)
	}
	if got := schedDiff(before, before); got == nil || got.Waits != 0 {
		t.Errorf("schedDiff of no waits = %+v, want zero waits", got)
	}
	if got := schedDiff(nil, after); got != nil {
		t.Errorf("schedDiff without a snapshot = %+v, want nil", got)
	}
	if s := schedSnapshot(); s == nil || len(s.Counts) == 0 {
		t.Errorf("the runtime has no %s histogram", schedLatencies)
	}
}

func TestSchedAccAddsStretches(t *testing.T) {
	buckets := []float64{0, 1e-4, 1e-3, math.Inf(1)}
	h := func(c ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Buckets: buckets, Counts: c}
	}
	// Two stretches of one kind of call, with another kind's stretch between them that must
	// not count: 90+9+1 waits in all, the slow ones in the first stretch.
	var a schedAcc
	a.add(h(0, 0, 0), h(40, 9, 1))
	a.add(h(500, 500, 500), h(550, 500, 500))
	want := &SchedResult{Waits: 100, P50Ms: 0.1, P99Ms: 1, P999Ms: 1}
	if diff := cmp.Diff(want, a.result()); diff != "" {
		t.Errorf("schedAcc over two stretches (-want +got):\n%s", diff)
	}
	a.add(nil, h(1, 1, 1))
	if got := a.result(); got != nil {
		t.Errorf("schedAcc with a missing snapshot = %+v, want nil", got)
	}
}
