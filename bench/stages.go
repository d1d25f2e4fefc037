package bench

import "sort"

// StageHist is one cumulative latency histogram of a stage of the running system (a Prometheus
// histogram series): Upper[i] is a bucket's upper bound in seconds, Counts[i] the cumulative
// count of observations at or under it.
type StageHist struct {
	Metric string
	Stage  string
	Upper  []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// StageTimer is implemented by a System that exports per-stage histograms (GetFeed's stages,
// the generator's); the harness reports each stage's share of a phase.
type StageTimer interface {
	Stages() []StageHist
}

// StageResult is one stage over one phase: its calls, mean, and p99 as the upper bound of the
// histogram bucket that holds it (an estimate no finer than the buckets).
type StageResult struct {
	Metric string  `json:"metric"`
	Stage  string  `json:"stage"`
	Calls  uint64  `json:"calls"`
	MeanMs float64 `json:"mean_ms"`
	P99Ms  float64 `json:"p99_ms_bucket"`
}

// stageDiff is what each stage did between two snapshots, ordered by metric and stage.
func stageDiff(before, after []StageHist) []StageResult {
	type key struct{ metric, stage string }
	old := map[key]StageHist{}
	for _, h := range before {
		old[key{h.Metric, h.Stage}] = h
	}
	var out []StageResult
	for _, h := range after {
		b := old[key{h.Metric, h.Stage}]
		n := h.Count - b.Count
		if n == 0 {
			continue
		}
		r := StageResult{Metric: h.Metric, Stage: h.Stage, Calls: n, MeanMs: (h.Sum - b.Sum) * 1000 / float64(n), P99Ms: -1}
		want := uint64(float64(n)*0.99 + 0.999999)
		for i, up := range h.Upper {
			var was uint64
			if i < len(b.Counts) {
				was = b.Counts[i]
			}
			if h.Counts[i]-was >= want {
				r.P99Ms = up * 1000
				break
			}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Metric != out[j].Metric {
			return out[i].Metric < out[j].Metric
		}
		return out[i].Stage < out[j].Stage
	})
	return out
}

// stages snapshots sys's stage histograms (nil when it has none).
func stages(sys System) []StageHist {
	if st, ok := sys.(StageTimer); ok {
		return st.Stages()
	}
	return nil
}

// FreshCounter is implemented by a System that counts its GetFeed calls by fresh status (the
// page's: "included", "recent", "generator_timeout" when the generator missed its deadline,
// ...).
type FreshCounter interface {
	FreshCounts() map[string]uint64
}

// freshCounts snapshots sys's GetFeed calls by fresh status (nil when it has none).
func freshCounts(sys System) map[string]uint64 {
	if f, ok := sys.(FreshCounter); ok {
		return f.FreshCounts()
	}
	return nil
}

// PreparedCounter is implemented by a System whose feed service prepares users' next chunks in
// the background: its preparations and prepared chunks by outcome so far ("recorded", "empty",
// "busy", "failed", "served", "stale", "lost", ...).
type PreparedCounter interface {
	PreparedCounts() map[string]uint64
}

// preparedCounts snapshots sys's prepared-chunk outcomes (nil when it has none).
func preparedCounts(sys System) map[string]uint64 {
	if f, ok := sys.(PreparedCounter); ok {
		return f.PreparedCounts()
	}
	return nil
}

// freshDiff is the calls of each status between two snapshots, the statuses with none left out
// (nil when there were none at all).
func freshDiff(before, after map[string]uint64) map[string]uint64 {
	var out map[string]uint64
	for k, v := range after {
		if n := v - min(v, before[k]); n > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[k] = n
		}
	}
	return out
}
