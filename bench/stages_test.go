package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestStageDiff(t *testing.T) {
	before := []StageHist{{Metric: "m", Stage: "a", Upper: []float64{0.001, 0.002, 0.004}, Counts: []uint64{10, 10, 10}, Count: 10, Sum: 0.005}}
	after := []StageHist{
		// 100 new calls: 98 under 1 ms, 1 more under 2 ms, 1 more under 4 ms: p99 is 2 ms.
		{Metric: "m", Stage: "a", Upper: []float64{0.001, 0.002, 0.004}, Counts: []uint64{108, 109, 110}, Count: 110, Sum: 0.205},
		{Metric: "m", Stage: "idle", Upper: []float64{0.001}, Counts: []uint64{0}, Count: 0},
		// New series: everything is new; the last call is beyond the buckets.
		{Metric: "l", Stage: "b", Upper: []float64{0.001}, Counts: []uint64{1}, Count: 2, Sum: 0.5},
	}
	got := stageDiff(before, after)
	want := []StageResult{
		{Metric: "l", Stage: "b", Calls: 2, MeanMs: 250, P99Ms: -1},
		{Metric: "m", Stage: "a", Calls: 100, MeanMs: 2, P99Ms: 2},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("stageDiff (-want +got):\n%s", d)
	}
}

// TestFreshDiff: the calls of each fresh status between two snapshots; statuses first seen in
// the later one count whole, statuses with no new calls are left out.
func TestFreshDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]uint64
		want          map[string]uint64
	}{
		{"none", nil, nil, nil},
		{"no new calls", map[string]uint64{"recent": 5}, map[string]uint64{"recent": 5}, nil},
		{"new and grown", map[string]uint64{"recent": 5, "included": 2},
			map[string]uint64{"recent": 9, "included": 2, "generator_timeout": 1}, map[string]uint64{"recent": 4, "generator_timeout": 1}},
		// A counter that went backwards (a restarted system) counts nothing, not a wrap.
		{"backwards", map[string]uint64{"recent": 9}, map[string]uint64{"recent": 3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, freshDiff(tc.before, tc.after)); diff != "" {
				t.Errorf("freshDiff (-want +got):\n%s", diff)
			}
		})
	}
	if got, want := freshLine(map[string]uint64{"generator_timeout": 1, "included": 237, "recent": 1764}), "generator_timeout 1, included 237, recent 1764"; got != want {
		t.Errorf("freshLine = %q, want %q", got, want)
	}
}
