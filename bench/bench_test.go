package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestModelIsDeterministicAndFollowsTheBuckets(t *testing.T) {
	a, b := NewModel(1000, 8), NewModel(1000, 8)
	if diff := cmp.Diff(a.Follower, b.Follower); diff != "" {
		t.Fatalf("same seed, different graphs:\n%s", diff)
	}
	if diff := cmp.Diff(a.Authors(500, 1), b.Authors(500, 1)); diff != "" {
		t.Fatalf("same seed, different events:\n%s", diff)
	}
	if c := NewModel(1000, 9); cmp.Equal(a.Follower, c.Follower) {
		t.Error("another seed gave the same graph")
	}
	// Followers per bucket: 5 / 50 / 100 / 5% (50) / max(10%, 1000) capped at n-1.
	want := []int{5, 50, 100, 50, 999}
	for u := range a.Users {
		if got := len(a.Follower[u]); got != want[a.Bucket[u]] {
			t.Fatalf("user %d in bucket %d has %d followers, want %d", u, a.Bucket[u], got, want[a.Bucket[u]])
		}
		if slices.Contains(a.Follower[u], u) {
			t.Fatalf("user %d follows itself", u)
		}
	}
	// Authors come from the posting buckets only (the first posts 0 a day).
	for _, u := range a.Authors(2000, 2) {
		if a.Bucket[u] == 0 {
			t.Fatalf("author %d is in the bucket that never posts", u)
		}
	}
}

func TestSummary(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(d)
	want := Summary{N: 1000, P50: 500, P99: 990, P999: 999, Max: 1000, Mean: 500.5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("empty summary not zero")
	}
}

// results.json always carries every ratio key, and the report and plots are written.
func TestWriteHasEveryRatio(t *testing.T) {
	dir := t.TempDir()
	r := &Results{Profile: "quick", Ratios: map[string]float64{"fanout_vs_redis": 0.5},
		getfeed: []time.Duration{time.Millisecond, 2 * time.Millisecond}, redis: []time.Duration{time.Millisecond},
		Hedging:   []HedgeResult{{Hedging: false}, {Hedging: true, ExtraLoad: 0.02}},
		Scale:     []ScaleResult{{Users: 10, CPUSecPerEvent: 1}, {Users: 100, CPUSecPerEvent: 2}},
		lagSeries: []lagPoint{{time.Second, time.Millisecond}},
		Reads: ReadResult{GeneratorCalls: 40, GeneratorMeanMs: 3.25, Fresh: map[string]uint64{"included": 40, "generator_timeout": 1},
			Prepared: map[string]uint64{"recorded": 30, "busy": 2}, FirstVisits: Summary{N: 38, P50: 3, P99: 6.5, Max: 6.5}}}
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Ratios map[string]float64 `json:"ratios"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range RatioKeys {
		if _, ok := got.Ratios[k]; !ok {
			t.Errorf("ratios lacks %s", k)
		}
	}
	var res struct {
		Reads struct {
			GeneratorMeanMs float64           `json:"generator_mean_ms"`
			Fresh           map[string]uint64 `json:"fresh"`
			Prepared        map[string]uint64 `json:"prepared"`
			FirstVisits     Summary           `json:"getfeed_first_visits"`
		} `json:"reads"`
	}
	if err := json.Unmarshal(b, &res); err != nil || res.Reads.GeneratorMeanMs != 3.25 || res.Reads.Fresh["generator_timeout"] != 1 {
		t.Errorf("results.json generator time = %v, fresh %v, %v", res.Reads.GeneratorMeanMs, res.Reads.Fresh, err)
	}
	if rep, _ := os.ReadFile(filepath.Join(dir, "report.md")); !strings.Contains(string(rep), "fresh status (the service's counter): generator_timeout 1, included 40.") {
		t.Errorf("report.md does not give the calls by fresh status")
	}
	if res.Reads.Prepared["busy"] != 2 || res.Reads.FirstVisits.N != 38 {
		t.Errorf("results.json prepared %v, first visits %+v", res.Reads.Prepared, res.Reads.FirstVisits)
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"(`smartfeed_feed_prepared_total`): busy 2, recorded 30.",
		"each of the 38 distinct readers made its first visit", "p50 3.00 ms, p99 6.50 ms"} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if rep, _ := os.ReadFile(filepath.Join(dir, "report.md")); !strings.Contains(string(rep), "generator (first pages) took 3.25 ms on average over 40 calls") {
		t.Errorf("report.md does not give the generator's time")
	}
	for _, f := range []string{"report.md", "getfeed_cdf.png", "fanout_lag.png", "fanout_lag_read_load.png", "hedging.png", "scale.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestModelSpecStreamsTheSameGraph: the spec draws each user's followers alone, the same ones
// NewModel holds, and caps the buckets when asked.
func TestModelSpecStreamsTheSameGraph(t *testing.T) {
	full, spec := NewModel(3000, 5), NewModelSpec(3000, 5, 0)
	for u := range full.Users {
		if diff := cmp.Diff(full.Follower[u], spec.FollowersOf(u)); diff != "" {
			t.Fatalf("user %d's followers (-held +streamed):\n%s", u, diff)
		}
	}
	if full.Edges() != spec.Edges() {
		t.Errorf("edges: held %d, spec %d", full.Edges(), spec.Edges())
	}
	capped := NewModelSpec(3000, 5, 60)
	for u := range capped.Users {
		if got, want := len(capped.FollowersOf(u)), min(full.Buckets[full.Bucket[u]].Followers, 60); got != want {
			t.Fatalf("capped user %d has %d followers, want %d", u, got, want)
		}
	}
}

// TestScaleRatiosAndPlots: the scale ratio is largest over smallest whatever the order of the
// sizes, named by the largest; an unmeasured ratio key is listed as such; every plot is drawn,
// the read rates' with points on its logarithmic axes.
func TestScaleRatiosAndPlots(t *testing.T) {
	dir := t.TempDir()
	r := &Results{Profile: "quick", Ratios: map[string]float64{},
		Scale:            []ScaleResult{{Users: 100000, CPUSecPerEvent: 3, CPUMsPerRead: 0.5}, {Users: 10000, CPUSecPerEvent: 2, CPUMsPerRead: 0.25}},
		GetFeedRateSteps: []ReadStep{{Offered: 200, SchedP99Ms: 2}, {Offered: 1000, SchedP99Ms: 40}},
		RedisRateSteps:   []ReadStep{{Offered: 200, SchedP99Ms: 0.5}, {Offered: 1000, SchedP99Ms: 0.7}}, RateStepBoundMs: 10}
	r.setScaleRatios()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	if got := r.Ratios["scale_cost_growth_100k"]; got != 1.5 {
		t.Errorf("scale_cost_growth_100k = %v, want 1.5 (3 ms at 100k over 2 ms at 10k)", got)
	}
	if got := r.Ratios["scale_read_cost_growth_100k"]; got != 2 {
		t.Errorf("scale_read_cost_growth_100k = %v, want 2", got)
	}
	if !slices.Contains(r.NotMeasured, "scale_cost_growth_1m") {
		t.Errorf("ratios_not_measured = %v, want scale_cost_growth_1m in it", r.NotMeasured)
	}
	for _, f := range PlotFiles() {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if rep, _ := os.ReadFile(filepath.Join(dir, "report.md")); !strings.Contains(string(rep), "| `scale_cost_growth_1m` | not measured |") ||
		!strings.Contains(string(rep), "No in-process serving phase") {
		t.Errorf("report.md does not say scale_cost_growth_1m was not measured, or that the serving phase did not run")
	}
}
