package hedge

import (
	"math"
	"strings"
	"testing"
	"time"
)

// hist builds a cumulative histogram from per-bucket counts.
func hist(upper []float64, counts []uint64) Histogram {
	h := Histogram{Upper: append(upper, math.Inf(1))}
	var cum uint64
	for _, c := range append(counts, 0) {
		cum += c
		h.Cum = append(h.Cum, cum)
	}
	return h
}

func TestQuantile(t *testing.T) {
	// 100 reads in (0, 1ms], 100 in (1ms, 2ms].
	h := hist([]float64{0.001, 0.002}, []uint64{100, 100})
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{
		{0.25, 500 * time.Microsecond},
		{0.5, time.Millisecond},
		{0.75, 1500 * time.Microsecond},
		{1, 2 * time.Millisecond},
	} {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := (Histogram{}).Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile = %v, want 0", got)
	}
}

// A primary that is fast except for 1% of reads at ~100ms, and a fast standby: a 5ms cutoff
// with a 2% budget should hedge about 1% of calls and bring p99.9 from ~100ms to under 10ms;
// a zero budget hedges nothing.
func TestSuggest(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004, 0.064, 0.128}
	primary := hist(bounds, []uint64{9900, 0, 0, 0, 100})
	standby := hist(bounds, []uint64{1000, 0, 0, 0, 0})
	rows, err := Suggest(primary, standby, []time.Duration{0, 5 * time.Millisecond, 200 * time.Millisecond}, 0.02, 10, 100000, 1)
	if err != nil {
		t.Fatal(err)
	}
	none, five, late := rows[0], rows[1], rows[2]
	if none.HedgeRate != 0 || none.P999 < 64*time.Millisecond {
		t.Errorf("no hedge: %+v, want no hedges and p99.9 in the slow bucket", none)
	}
	if five.HedgeRate < 0.008 || five.HedgeRate > 0.012 || five.ExtraLoad != five.HedgeRate {
		t.Errorf("5ms: hedge rate %v, want about 1%%", five.HedgeRate)
	}
	if five.P999 > 7*time.Millisecond {
		t.Errorf("5ms: p99.9 %v, want at most cutoff + standby (6ms)", five.P999)
	}
	if late.HedgeRate != 0 {
		t.Errorf("200ms cutoff above every read: hedge rate %v, want 0", late.HedgeRate)
	}
	rows, err = Suggest(primary, standby, []time.Duration{5 * time.Millisecond}, 0, 10, 100000, 1)
	if err != nil {
		t.Fatal(err)
	}
	// With no budget, only the initial burst of 10 tokens can be spent.
	if got := rows[0].HedgeRate; got > 10.0/100000 {
		t.Errorf("zero budget: hedge rate %v, want at most the burst", got)
	}
}

func TestSuggestRefuses(t *testing.T) {
	some := hist([]float64{0.001}, []uint64{10})
	for _, tt := range []struct {
		name             string
		primary, standby Histogram
		samples          int
		want             string
	}{
		{"no primary", Histogram{}, some, 10000, "no primary latencies"},
		{"no standby", some, Histogram{}, 10000, "no standby latencies"},
		{"few samples", some, some, 10, "at least 1000"},
	} {
		_, err := Suggest(tt.primary, tt.standby, []time.Duration{time.Millisecond}, 0.02, 10, tt.samples, 1)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestParseReadLatency(t *testing.T) {
	text := `# HELP smartfeed_hedge_read_seconds Read latency.
# TYPE smartfeed_hedge_read_seconds histogram
smartfeed_hedge_read_seconds_bucket{store="primary",le="0.001"} 90
smartfeed_hedge_read_seconds_bucket{store="primary",le="0.002"} 100
smartfeed_hedge_read_seconds_bucket{store="primary",le="+Inf"} 100
smartfeed_hedge_read_seconds_sum{store="primary"} 0.1
smartfeed_hedge_read_seconds_count{store="primary"} 100
smartfeed_hedge_read_seconds_bucket{store="standby",le="0.001"} 3
smartfeed_hedge_read_seconds_bucket{store="standby",le="0.002"} 4
smartfeed_hedge_read_seconds_bucket{store="standby",le="+Inf"} 5
smartfeed_hedge_read_seconds_sum{store="standby"} 0.1
smartfeed_hedge_read_seconds_count{store="standby"} 5
`
	p, s, err := ParseReadLatency(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if p.Count() != 100 || s.Count() != 5 {
		t.Fatalf("counts %d, %d; want 100, 5", p.Count(), s.Count())
	}
	if got := p.Quantile(0.95); got != 1500*time.Microsecond {
		t.Errorf("primary p95 = %v, want 1.5ms", got)
	}
	if _, _, err := ParseReadLatency(strings.NewReader("up 1\n")); err == nil || !strings.Contains(err.Error(), "no smartfeed_hedge_read_seconds") {
		t.Errorf("metrics without the histogram: err %v", err)
	}
	if _, _, err := ParseReadLatency(strings.NewReader("{{{")); err == nil {
		t.Error("garbage: no error")
	}
}

// TestHistogramSince: the quantile of a window between two snapshots counts only the
// observations in between, interpolated within their bucket; a snapshot that is not an earlier
// one of the same histogram gives an empty window.
func TestHistogramSince(t *testing.T) {
	inf := math.Inf(1)
	snap := func(cum ...uint64) Histogram {
		return Histogram{Upper: []float64{0.1, 0.2, 0.4, inf}, Cum: cum}
	}
	for _, tc := range []struct {
		name     string
		old, now Histogram
		q        float64
		want     time.Duration
		count    uint64
	}{
		{"none", snap(5, 5, 5, 5), snap(5, 5, 5, 5), 0.99, 0, 0},
		// 100 new observations, all in (0.1 s, 0.2 s]: the 99th is 99% of the way through it.
		{"one bucket", snap(50, 50, 50, 50), snap(50, 150, 150, 150), 0.99, 199 * time.Millisecond, 100},
		// The old snapshot's slow observations are left out of the window.
		{"window", snap(0, 0, 90, 100), snap(100, 100, 190, 200), 0.5, 50 * time.Millisecond, 100},
		// Past the last finite bound: that bound.
		{"overflow", snap(0, 0, 0, 0), snap(0, 0, 0, 10), 0.99, 400 * time.Millisecond, 10},
		// Since the empty histogram: everything.
		{"since start", Histogram{}, snap(0, 0, 4, 4), 0.5, 300 * time.Millisecond, 4},
		// A histogram that went backwards (a restarted process), or another one: empty.
		{"reset", snap(9, 9, 9, 9), snap(1, 1, 1, 1), 0.5, 0, 0},
		{"other buckets", Histogram{Upper: []float64{1, inf}, Cum: []uint64{1, 1}}, snap(0, 0, 4, 4), 0.5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.now.Since(tc.old)
			if got := w.Quantile(tc.q).Round(time.Microsecond); w.Count() != tc.count || got != tc.want {
				t.Errorf("window of %d with quantile %v, want %d and %v", w.Count(), got, tc.count, tc.want)
			}
		})
	}
}
