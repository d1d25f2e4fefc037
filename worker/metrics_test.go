package worker

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDelayQuantile checks the fanout delay quantile over a window: only the delays observed
// between the two snapshots count, interpolated within their bucket.
func TestDelayQuantile(t *testing.T) {
	bounds := []float64{0.1, 0.2, 0.4}
	snap := func(cum ...uint64) DelaySnapshot {
		return DelaySnapshot{bounds: bounds, cum: cum[:3], count: cum[3]}
	}
	type want struct {
		D  time.Duration
		OK bool
	}
	for _, tc := range []struct {
		name     string
		old, now DelaySnapshot
		q        float64
		want     want
	}{
		{"none", snap(5, 5, 5, 5), snap(5, 5, 5, 5), 0.99, want{0, false}},
		// 100 new delays, all in (0.1 s, 0.2 s]: the 99th is 99% of the way through it.
		{"one bucket", snap(50, 50, 50, 50), snap(50, 150, 150, 150), 0.99, want{199 * time.Millisecond, true}},
		// The old snapshot's slow delays are left out of the window.
		{"window", snap(0, 0, 90, 100), snap(100, 100, 190, 200), 0.5, want{50 * time.Millisecond, true}},
		// Past the last bound: the last bound.
		{"overflow", snap(0, 0, 0, 0), snap(0, 0, 0, 10), 0.99, want{400 * time.Millisecond, true}},
		// Since the start (the zero snapshot): every delay.
		{"since start", DelaySnapshot{}, snap(0, 0, 4, 4), 0.5, want{300 * time.Millisecond, true}},
		// A histogram that went backwards (another process's): no answer.
		{"reset", snap(9, 9, 9, 9), snap(1, 1, 1, 1), 0.5, want{0, false}},
		{"other histogram", DelaySnapshot{bounds: []float64{1}, cum: []uint64{1}, count: 1}, snap(0, 0, 4, 4), 0.5, want{0, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got want
			got.D, got.OK = tc.now.Quantile(tc.old, tc.q)
			got.D = got.D.Round(time.Microsecond)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Quantile (-want +got):\n%s", diff)
			}
		})
	}
}
