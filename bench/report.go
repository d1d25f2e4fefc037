package bench

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/bench/loadgen"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// RatioKeys are the keys results.json's "ratios" always carries.
// A key the run could not measure (scale_cost_growth_1m in the quick profile, a rate a kind of
// call never reached) is written as 0 and listed in results.json's "ratios_not_measured".
var RatioKeys = []string{"fanout_vs_redis_equal", "fanout_vs_raw_store_equal", "fanout_lag_p99_s_at_read_load",
	"getfeed_p99_vs_redis_200", "getfeed_p99_vs_redis_1000", "getfeed_p99_vs_redis_5000",
	"getfeed_p99_vs_grpc_floor_1000", "getfeed_max_rate_vs_redis", "getfeed_max_rate_vs_grpc_floor",
	"hedged_p999_vs_unhedged", "hedge_extra_load", "scale_cost_growth_1m"}

// plots are the plots Write draws, by file name.
var plots = []struct {
	file string
	fn   func(string, *Results) error
}{{"getfeed_cdf.png", plotCDF}, {"fanout_lag.png", plotLag}, {"fanout_lag_read_load.png", plotLagUnderReads},
	{"hedging.png", plotHedging}, {"scale.png", plotScale}, {"read_rates.png", plotReadRates}}

// PlotFiles returns the file names of the plots Write draws beside report.md.
func PlotFiles() []string {
	out := make([]string, len(plots))
	for i, p := range plots {
		out[i] = p.file
	}
	return out
}

// Write writes results.json, report.md and the plots into dir.
func Write(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench out: %w", err)
	}
	r.NotMeasured = nil
	for _, k := range RatioKeys {
		// 0 is a measured value only for a rate ratio (GetFeed held no rate); elsewhere it
		// stands for a figure the run has not got.
		if v, ok := r.Ratios[k]; !ok || v == 0 && !strings.Contains(k, "max_rate") {
			r.Ratios[k] = 0
			r.NotMeasured = append(r.NotMeasured, k)
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	for _, p := range plots {
		if err := p.fn(filepath.Join(dir, p.file), r); err != nil {
			return fmt.Errorf("plot %s: %w", p.file, err)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(r, "")), 0o644)
}

// Markdown renders the report; plotDir prefixes the plot paths (empty: beside the report).
func Markdown(r *Results, plotDir string) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	img := func(name string) string { return filepath.ToSlash(filepath.Join(plotDir, name)) }
	p("# SmartFeed benchmark (%s profile, %s)", r.Profile, r.Storage)
	p("")
	p("Run `%s` on %s, commit %s, started %s, %.0f s. Every figure below comes from this one run;", "smartfeed bench --profile "+r.Profile+" --storage "+r.Storage, r.Machine, r.Commit, r.Started.UTC().Format(time.RFC3339), r.Seconds)
	p("the peers ran on the same events and reads, so compare ratios, not absolute figures (the machine is shared).")
	p("")
	b.WriteString(ratiosMarkdown(r))
	p("## Model")
	p("")
	p("%d users, %d follows, after Stream-Framework-Bench's social model (10%% daily active; followers 5/50/100/5%% capped at 1,000/10%% with a minimum of 1,000 by percentile bucket; posts 0/1/5/10/25 and reads 1/5/10/20/50 per day).", r.Model["users"], r.Model["follows"])
	p("")
	p("%s", loadMethod)
	if l := r.Load; l != nil {
		p("")
		how := "in batched writes"
		switch {
		case l.HFiles > 0:
			how = fmt.Sprintf("as %d HFiles moved into the tables by HBase's own bulk load", l.HFiles)
		case l.SSTables > 0:
			how = fmt.Sprintf("as %d sstables ingested by Pebble", l.SSTables)
		}
		p("The graph was written by the bulk loader (`smartfeed load`'s: the rows the graph API writes, %s): %d users and %d follows, %d rows in %.1f s, **%.0f rows/s**, the process's peak RSS %.0f MiB after it.", how, l.Users, l.Follows, l.Rows, l.Seconds, l.RowsPerSec, l.PeakRSSMiB)
	}
	p("")
	b.WriteString(fanoutMarkdown(r, img))
	b.WriteString(lagUnderReadsMarkdown(r, img))
	b.WriteString(servingMarkdown(r, img))
	b.WriteString(rateStepsMarkdown(r, img))
	p("## Tail under trouble")
	p("")
	p("| hedging | GetFeed p50 | p99 | p99.9 | extra load | cutoff | standby p99.9 |")
	p("|---|---|---|---|---|---|---|")
	for _, h := range r.Hedging {
		p("| %v | %.2f ms | %.2f ms | %.1f ms | %.2f%% | %.1f ms | %.1f ms |", h.Hedging, h.GetFeed.P50, h.GetFeed.P99, h.GetFeed.P999, 100*h.ExtraLoad, h.CutoffMs, h.StandbyP999)
	}
	p("")
	p("![hedging](%s)", img("hedging.png"))
	p("")
	b.WriteString(replicationMarkdown(r.Replication))
	b.WriteString(graphReadsMarkdown(r.GraphReads))
	b.WriteString(hbaseJavaMarkdown(r.HBaseJava, r.Reads.BesidePeer))
	p("## Growth")
	p("")
	p("CPU is the bench process's (the server and the in-process publisher or reader) and the Redis servers' of the run (/proc/PID/stat), over the phase's events or pages.")
	p("")
	p("| users | follows | events | inserts | CPU ms per event | wall µs per insert | GetFeed pages | CPU ms per page | GetFeed p99 |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Scale {
		p("| %d | %d | %d | %.0f | %.2f | %.1f | %d | %.2f | %.1f ms |", s.Users, s.Follows, s.Events, s.Inserts, s.CPUSecPerEvent, s.WallPerInsert,
			s.Reads, s.CPUMsPerRead, s.GetFeedP99Ms)
	}
	p("")
	p("![scale](%s)", img("scale.png"))
	p("")
	p("Peak RSS of the process (system and peers): %.0f MiB.", r.RSSMiB)
	p("")
	b.WriteString(machineMarkdown(r))
	for _, n := range r.Notes {
		p("")
		p("Note: %s", n)
	}
	return b.String()
}

// ratioMeanings says what each ratio of results.json measures (the peers' in peerRatioMeanings).
var ratioMeanings = map[string]string{
	"getfeed_max_rate_vs_redis": "highest offered GetFeed rate held with p99 under the bound over the same for Redis ZREVRANGE, same steps " +
		"(when Redis held every step this is an upper bound)",
	"getfeed_max_rate_vs_grpc_floor": "highest offered GetFeed rate held with p99 under the bound over the same for an empty call on GetFeed's gRPC connection, same steps " +
		"(when the empty call held every step this is an upper bound)",
	"getfeed_p99_vs_redis_200":       "load generator in its own process: GetFeed p99 counted from each call's scheduled start over Redis ZREVRANGE's, both offered 200/s",
	"getfeed_p99_vs_redis_1000":      "load generator in its own process: GetFeed p99 counted from each call's scheduled start over Redis ZREVRANGE's, both offered 1,000/s",
	"getfeed_p99_vs_redis_5000":      "load generator in its own process: GetFeed p99 counted from each call's scheduled start over Redis ZREVRANGE's, both offered 5,000/s",
	"getfeed_p99_vs_grpc_floor_1000": "load generator in its own process: GetFeed p99 counted from each call's scheduled start over an empty call's on GetFeed's connection, both offered 1,000/s",
	"scale_cost_growth_100k":         "CPU per event (the bench process's, server and in-process publisher, and the Redis servers') at 100,000 users over 10,000",
	"scale_cost_growth_1m":           "CPU per event (the bench process's, server and in-process publisher, and the Redis servers') at 1,000,000 users over 10,000 (the full profile)",
	"scale_read_cost_growth_100k":    "CPU per GetFeed page (the bench process's, server and in-process client) at 100,000 users over 10,000",
	"scale_read_cost_growth_1m":      "CPU per GetFeed page (the bench process's, server and in-process client) at 1,000,000 users over 10,000",
	"getfeed_p99_vs_redis":           "in process (no load generator): GetFeed p99 over Redis ZREVRANGE p99 at the same offered load and concurrency",
	"hbase_get_p99_vs_java":          "zen Get p99 (the worse of before and after PE) over HBase's own Java client's Get p99 (PerformanceEvaluation randomRead), same HBase, one at a time",
	"hbase_top50_p99_vs_java":        "zen Top(50) p99 over HBase's own Java client's Get p99 (PerformanceEvaluation randomRead), same HBase",
	"getfeed_p99_vs_hbase_java":      "GetFeed p99 (serving phase) over HBase's own Java client's Get p99 (PerformanceEvaluation randomRead), same HBase, the Java client alone",
	"getfeed_p99_vs_hbase_java_under_fanout": "GetFeed p99 (serving phase) over HBase's own Java client's Get p99 (PerformanceEvaluation randomRead), same HBase, " +
		"the Java client with the fanout running at the serving phase's rate",
	"getfeed_p99_vs_hbase_java_feed_scan": "GetFeed p99 over HBase's own Java client's p99 making GetFeed's reads of the feed " +
		"(a Scan of each reader's feed rows, a page's worth), both at the serving phase's offered load and concurrency at the same time, right after it with its fanout still running",
	"hbase_feed_scan_p99_vs_java": "zen's Scan of a feed page (gohbase) p99 over HBase's own Java client's for the same Scans, one at a time, right after the serving phase with its fanout still running",
}

// ratiosMarkdown is the report's ratio table: every ratio of r with its meaning.
func ratiosMarkdown(r *Results) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## Ratios")
	p("")
	p("| ratio | value | meaning |")
	p("|---|---|---|")
	meaning := maps.Clone(ratioMeanings)
	maps.Copy(meaning, peerRatioMeanings)
	keys := make([]string, 0, len(r.Ratios))
	for k := range r.Ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(r.NotMeasured, k) {
			p("| `%s` | not measured | %s |", k, meaning[k])
			continue
		}
		p("| `%s` | %.3f | %s |", k, r.Ratios[k], meaning[k])
	}
	p("")
	return b.String()
}

// fanoutMarkdown is the report's fanout section: the figures, the lag plot, the equal-work
// comparison and the sustainable event rates.
func fanoutMarkdown(r *Results, img func(string) string) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	f := r.Fanout
	p("## Fanout")
	p("")
	p("| | figure |")
	p("|---|---|")
	p("| events at %.0f/s | %d |", f.EventRate, f.Events)
	p("| SmartFeed pool inserts/s (to drained) | %.0f |", f.InsertsPerSec)
	made := "their pins made inside it"
	if f.BurstPinsMadeSeconds > 0 {
		made = fmt.Sprintf("their pins made before, in %.1f s, not timed", f.BurstPinsMadeSeconds)
	}
	p("| SmartFeed pool inserts/s, %d events published at once (%.1f s to drained; %s) | %.0f |", f.BurstEvents, f.BurstSeconds, made, f.BurstInsertsPerSec)
	p("| Redis sorted-set feed inserts/s (the same %d events' rows, at equal work: below) | %.0f |", f.BurstEvents, f.RedisInsertsPerSec)
	p("| raw store batched writes, rows/s (%d rows, at equal work: below) | %.0f |", f.RawRows, f.RawRowsPerSec)
	p("| fanout lag p50 / p99 / max (sampled followers, to the worker's write) | %.0f / %.0f / %.0f ms |", f.LagMs.P50, f.LagMs.P99, f.LagMs.Max)
	p("| drain after the phase | %.1f s |", f.DrainSeconds)
	p("")
	p("![fanout lag](%s)", img("fanout_lag.png"))
	p("")
	b.WriteString(equalWorkMarkdown(r))
	if len(r.Steps) > 0 {
		p("Sustainable event rate (lag p99 under 2 s):")
		p("")
		p("| events/s | events | lag p99 | sustainable |")
		p("|---|---|---|---|")
		best := 0.0
		for _, s := range r.Steps {
			p("| %.0f | %d | %.0f ms | %v |", s.Rate, s.Events, s.LagP99Ms, s.Sustainable)
			if s.Sustainable {
				best = s.Rate
			}
		}
		p("")
		p("Highest sustainable rate tried: **%.0f events/s**.", best)
		p("")
	}
	return b.String()
}

func save(p *plot.Plot, path string) error { return p.Save(6*vg.Inch, 4*vg.Inch, path) }

func cdf(sorted []time.Duration) plotter.XYs {
	pts := make(plotter.XYs, 0, 200)
	step := max(1, len(sorted)/200)
	for i := 0; i < len(sorted); i += step {
		pts = append(pts, plotter.XY{X: ms(sorted[i]), Y: float64(i+1) / float64(len(sorted))})
	}
	if n := len(sorted); n > 0 {
		pts = append(pts, plotter.XY{X: ms(sorted[n-1]), Y: 1})
	}
	return pts
}

func plotCDF(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "GetFeed vs Redis ZREVRANGE, same offered load"
	p.X.Label.Text, p.Y.Label.Text = "latency (ms, log)", "fraction of calls"
	var args []any
	if len(r.getfeed) > 0 {
		args = append(args, "GetFeed", cdf(r.getfeed))
	}
	if len(r.redis) > 0 {
		args = append(args, "Redis ZREVRANGE", cdf(r.redis))
	}
	if len(args) > 0 {
		// Logarithmic only with points to draw: an empty log axis does not draw.
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
		if err := plotutil.AddLines(p, args...); err != nil {
			return err
		}
	}
	return save(p, path)
}

func plotLag(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "Fanout lag over the run (sampled followers)"
	p.X.Label.Text, p.Y.Label.Text = "time into the run (s)", "lag (ms)"
	pts := make(plotter.XYs, 0, len(r.lagSeries))
	for _, l := range r.lagSeries {
		pts = append(pts, plotter.XY{X: l.at.Seconds(), Y: ms(l.lag)})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
	if len(pts) > 0 {
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		p.Add(s)
	}
	return save(p, path)
}

func plotHedging(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "GetFeed p99.9 with the primary's tail slowed"
	p.Y.Label.Text = "p99.9 (ms)"
	vals := plotter.Values{}
	var names []string
	for _, h := range r.Hedging {
		vals = append(vals, h.GetFeed.P999)
		n := "hedging off"
		if h.Hedging {
			n = fmt.Sprintf("hedging on (+%.1f%% load)", 100*h.ExtraLoad)
		}
		names = append(names, n)
	}
	if len(vals) > 0 {
		bars, err := plotter.NewBarChart(vals, vg.Points(40))
		if err != nil {
			return err
		}
		p.Add(bars)
		p.NominalX(names...)
	}
	return save(p, path)
}

func plotScale(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "Cost per event and GetFeed p99 as users grow"
	p.X.Label.Text, p.Y.Label.Text = "users", "CPU ms per event / GetFeed p99 ms"
	var cost, lat plotter.XYs
	for _, s := range r.Scale {
		cost = append(cost, plotter.XY{X: float64(s.Users), Y: s.CPUSecPerEvent})
		lat = append(lat, plotter.XY{X: float64(s.Users), Y: s.GetFeedP99Ms})
	}
	if len(cost) > 0 {
		if err := plotutil.AddLinePoints(p, "CPU ms per event", cost, "GetFeed p99 ms", lat); err != nil {
			return err
		}
	}
	return save(p, path)
}

// rateStepsMarkdown is the read-throughput section: both searches, step by step.
func rateStepsMarkdown(r *Results, img func(string) string) string {
	if len(r.GetFeedRateSteps) == 0 && len(r.RedisRateSteps) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## Read throughput (fanout running)")
	p("")
	if lg := r.LoadGen; lg != nil && lg.Summary != nil {
		s := lg.Summary
		p("The load generator in its own process (`smartfeed loadgen`; GOMAXPROCS %d, CPUs %s of %d): open loop, %d calls in flight at most, %.0f s windows of each kind",
			s.Machine.GOMAXPROCS, s.Machine.Affinity, s.Machine.Cores, s.InFlight, s.WindowSeconds)
		p("alternating (%d round(s) at each rate), the server idle before each (%.0f s of waits in all); readers: %s.", s.Rounds, s.IdleWaitSeconds, s.Population)
		p("A step is held when its p99 **from schedule** (each call counted from its scheduled start, queueing included) is under %.0f ms and at least %.0f%% of the offered rate succeeded;",
			s.BoundMs, 100*loadgenMinShare)
		p("p50, p99 and p99.9 below are counted from the send. Every kind is measured at %v/s; above them a kind goes on only while it holds.", LoadGenRatioRates)
		p("")
		p("%s", loadgenMethod)
		if len(s.Fresh) > 0 {
			p("")
			p("GetFeed's pages by fresh status: %s.", freshLine(toUint(s.Fresh)))
		}
		for _, w := range s.Warnings {
			p("")
			p("**Warning**: %s.", w)
		}
	} else {
		p("Offered rate stepped up, %d calls in flight at most, each step held when p99 < %.0f ms and at least %.0f%% of the offered rate succeeded;", r.RateStepConc, r.RateStepBoundMs, 100*MinAchievedShare)
		p("the search stops at the first step not held. \"from schedule\" counts from each call's scheduled send time, so it includes the wait for a free slot.")
	}
	p("")
	p("| reads | offered/s | achieved/s | p50 | p99 | p99.9 | p99 from schedule | errors | held |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, t := range []struct {
		name  string
		steps []ReadStep
	}{{"GetFeed", r.GetFeedRateSteps}, {"Redis ZREVRANGE", r.RedisRateSteps}, {"empty gRPC call", r.FloorRateSteps}} {
		for _, s := range t.steps {
			p("| %s | %.0f | %.0f | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %d | %v |", t.name, s.Offered, s.Achieved, s.P50Ms, s.P99Ms, s.P999Ms, s.SchedP99Ms, s.Errors, s.Held)
		}
	}
	p("")
	floor := ""
	if len(r.FloorRateSteps) > 0 {
		floor = fmt.Sprintf("; an empty call on GetFeed's gRPC connection held **%s**", rateStepsLabel(r.FloorRateSteps, r.FloorMaxRate))
	}
	p("GetFeed held **%s** with p99 under %.0f ms; Redis ZREVRANGE held **%s**%s.", rateStepsLabel(r.GetFeedRateSteps, r.GetFeedMaxRate),
		r.RateStepBoundMs, rateStepsLabel(r.RedisRateSteps, r.RedisMaxRate), floor)
	p("")
	if t := freshLatencyTable(r.LoadGen); t != "" {
		p("%s", t)
	}
	p("![p99 from schedule vs offered rate](%s)", img("read_rates.png"))
	p("")
	return b.String()
}

// freshLatencyTable is GetFeed's latency from its send by fresh status at each offered rate,
// as a markdown table with its lead line ("" without the load generator's fresh statuses).
func freshLatencyTable(lg *LoadGenResult) string {
	if lg == nil || lg.Summary == nil {
		return ""
	}
	var b strings.Builder
	for _, st := range lg.Summary.Steps {
		if st.Kind != loadgen.KindGetFeed || len(st.FreshFromSend) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("GetFeed's pages from their send, by fresh status (`included`: a fresh chunk, from the generator or prepared; `recent`: the feed as it stood, the generator asked within `feed.min_chunk_interval`; `empty`: the generator found nothing; `generator_timeout`: it was late; `deferred`: the feed as it stood, `feed.max_generating` pages waiting on the generator already):\n\n")
			b.WriteString("| offered/s | fresh status | pages | p50 | p99 | p99.9 |\n|---|---|---|---|---|---|\n")
		}
		keys := make([]string, 0, len(st.FreshFromSend))
		for k := range st.FreshFromSend {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			q := st.FreshFromSend[k]
			fmt.Fprintf(&b, "| %.0f | %s | %d | %.2f ms | %.2f ms | %.2f ms |\n", st.Offered, k, q.N, q.P50, q.P99, q.P999)
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// freshLine is the fresh status counts as "included 237, recent 1764", by status name.
func freshLine(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// minuteList is "1.31 / 1.40 / 1.63" ("–" for none).
func minuteList(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " / ")
}

// loadgenMethod is how the load generator measures, for the report (docs/benchmarks.md).
const loadgenMethod = `How it is measured: ` + "`" + `smartfeed bench` + "`" + ` runs ` + "`" + `smartfeed loadgen` + "`" + ` (bench/loadgen), its own binary in a process of its own, against the server it built, the fanout running.
The generator offers each kind of call (GetFeed over gRPC; the Redis peer's ZREVRANGE 0..49 of the same users' sorted sets; the gRPC health check on GetFeed's connection, the transport's floor)
in an open loop: call i of a window is scheduled at start + i/rate whatever the earlier calls did, at most ` + "`" + `--in-flight` + "`" + ` outstanding; a call whose time came while every slot was busy waits,
and its latency **from schedule** counts that wait (what a closed-loop client hides: coordinated omission), beside its latency from the send. A window's calls not sent by 5 s after its end are counted unsent, at the time they had waited then; calls in flight when a window is interrupted (the lag-under-reads phase stops its window so) are counted interrupted, not errors.
Latencies go into HdrHistogram histograms (3 significant digits). Each kind has contiguous windows (20 s in the quick profile), the kinds alternating at each rate; before each window the generator polls the server's /metrics
until the counters of a page's background work (preparations, materializations) have stood still for 2 s, and reports the wait, so one window's background work does not fall in the next.
Readers are the day's active users (the model's 10%, Model.ActiveUsers), drawn with a Zipf-skewed visit rate. Each window records the load average (/proc/loadavg) and warns when it exceeded the cores.
Every kind is measured at 200, 1,000 and 5,000/s; above them a kind is stepped up only while it holds. The output (one JSON line per window, a summary last) is bench/out/loadgen.jsonl.`

// loadMethod is how the bench writes its graph, for the report (docs/benchmarks.md).
const loadMethod = `How the graph is built: ` + "`" + `smartfeed bench` + "`" + ` writes the model with the bulk loader of ` + "`" + `smartfeed load` + "`" + ` (graphsvc.Loader), not through the API:
every user (object, username and email keys), a "pins" board each, every follow and its inverse, and each list's count, the rows CreateUser, CreateBoard and Follow write
(TestLoaderRowsEqualAPI compares them row by row), IDs in blocks from the per-shard counters. By default the rows are staged sorted on local disk and handed to the store's own bulk load
(sstables Pebble ingests into its lowest level; HFiles HBase's bulk load moves into the regions); with ` + "`" + `--pebble-ingest=false` + "`" + ` or ` + "`" + `--hbase-bulk-load ""` + "`" + ` they go through the store's batched writes instead. The line below the model says which.
The model is drawn one user at a time from the seed (each user's followers alone), so no run holds the graph's edges in memory.
The quick profile loads 100,000 users (31M follows, 124M edge rows), the full profile 1,000,000 with every user's followers capped at 1,000 (130M follows):
uncapped, the model's top 2% would have 100,000 followers each, 2 billion follows. The load's rows/s and peak RSS are reported below the model; the store is empty when it starts.
A load through batched writes leaves its flushes and compactions running on into the phases that follow; a bulk-loaded one leaves nothing to compact.`

// plotReadRates draws each kind of call's p99, counted from the scheduled start, against the
// offered rate (both axes logarithmic), with the bound a rate is held under.
func plotReadRates(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "p99 from schedule vs offered rate (load generator in its own process)"
	p.X.Label.Text, p.Y.Label.Text = "offered calls/s", "p99 from schedule, ms"
	var lines []any
	for _, k := range []struct {
		name  string
		steps []ReadStep
	}{{"GetFeed", r.GetFeedRateSteps}, {"Redis ZREVRANGE", r.RedisRateSteps}, {"empty gRPC call", r.FloorRateSteps}} {
		var xy plotter.XYs
		for _, st := range k.steps {
			if v := st.SchedP99Ms; st.Offered > 0 && v > 0 {
				xy = append(xy, plotter.XY{X: st.Offered, Y: v})
			}
		}
		if len(xy) > 0 {
			lines = append(lines, k.name, xy)
		}
	}
	if len(lines) == 0 {
		return save(p, path)
	}
	// Logarithmic axes only with points to draw: an empty log axis does not draw.
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	if b := r.RateStepBoundMs; b > 0 {
		lo, hi := math.Inf(1), 0.0
		for i := 1; i < len(lines); i += 2 {
			for _, pt := range lines[i].(plotter.XYs) {
				lo, hi = min(lo, pt.X), max(hi, pt.X)
			}
		}
		lines = append(lines, fmt.Sprintf("bound %.0f ms", b), plotter.XYs{{X: lo, Y: b}, {X: hi, Y: b}})
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	return save(p, path)
}

// servingMarkdown is the in-process serving phase's section, or a line saying why it did not run.
func servingMarkdown(r *Results, img func(string) string) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	if rd := r.Reads; rd.GetFeed.N == 0 && rd.GeneratorCalls == 0 && len(rd.Fresh) == 0 {
		p("## Serving")
		p("")
		p("No in-process serving phase: the load generator, in a process of its own, measured the reads (below); a client sharing the server's process measures a friendlier world.")
		p("")
		return b.String()
	}
	rd := r.Reads
	p("## Serving (fanout running)")
	p("")
	p("| at %.0f/s offered, %d concurrent | p50 | p99 | p99.9 | achieved/s | errors |", rd.Offered, rd.Concurrency)
	p("|---|---|---|---|---|---|")
	p("| GetFeed (gRPC, loopback) | %.2f ms | %.2f ms | %.2f ms | %.0f | %d |", rd.GetFeed.P50, rd.GetFeed.P99, rd.GetFeed.P999, rd.GetFeedRate, rd.Errors)
	p("| Redis ZREVRANGE 0..%d | %.2f ms | %.2f ms | %.2f ms | %.0f | |", 49, rd.Redis.P50, rd.Redis.P99, rd.Redis.P999, rd.RedisRate)
	if f := rd.Floor; f != nil {
		p("| empty gRPC call (health check, GetFeed's connection) | %.2f ms | %.2f ms | %.2f ms | | |", f.P50, f.P99, f.P999)
	}
	p("")
	if rd.Turns != "" {
		p("The kinds of call shared the phase %s, each at the offered rate in its own turns, the fanout running throughout.", rd.Turns)
		p("")
	}
	p("GetFeed p99 in the first third of the phase %.2f ms, in the last third %.2f ms. The generator (first pages) took %.2f ms on average over %.0f calls.",
		rd.FirstP99Ms, rd.LastP99Ms, rd.GeneratorMeanMs, rd.GeneratorCalls)
	if len(rd.P99ByMinuteMs) > 0 {
		p("")
		p("p99 by minute of the phase (the calls that started in it): GetFeed %s ms, the last minute over the first %.3f; "+
			"Redis ZREVRANGE %s ms; the empty gRPC call %s ms (a minute slow for all three is the machine's).",
			minuteList(rd.P99ByMinuteMs), ratio(rd.LastMinuteP99Ms, rd.FirstMinuteP99Ms), minuteList(rd.RedisP99ByMinuteMs), minuteList(rd.FloorP99ByMinuteMs))
	}
	if fv := rd.FirstVisits; fv.N > 0 {
		p("")
		p("Before the phase each of the %d distinct readers made its first visit, one after the other with no fanout running (a user never seen has no prepared chunk, so the generator runs): p50 %.2f ms, p99 %.2f ms, max %.2f ms.",
			fv.N, fv.P50, fv.P99, fv.Max)
	}
	if len(rd.Fresh) > 0 {
		p("")
		p("The calls by fresh status (the service's counter): %s. A `generator_timeout` is a first page whose generator call missed its deadline.", freshLine(rd.Fresh))
	}
	if len(rd.Prepared) > 0 {
		p("")
		p("Prepared chunks by outcome over the phase (`smartfeed_feed_prepared_total`): %s. A first page with no prepared chunk to serve runs the generator.", freshLine(rd.Prepared))
	}
	if rd.Readers > 0 && rd.Offered > 0 {
		p("")
		p("The calls read %d distinct users, each back every %.2f s on average: a page sooner than `feed.min_chunk_interval` after the user's last generator call is a plain read of the feed.",
			rd.Readers, float64(rd.Readers)/rd.Offered)
	}
	p("")
	if g, red := rd.Sched, rd.RedisSched; g != nil && red != nil {
		p("Goroutines of this process waited, runnable, for a CPU (Go's /sched/latencies): p50 %.3f ms, p99 %.2f ms, p99.9 %.2f ms during the GetFeed calls; p50 %.3f ms, p99 %.2f ms, p99.9 %.2f ms during the Redis calls. A GetFeed crosses several goroutines (client, transport, handler), each a wait.",
			g.P50Ms, g.P99Ms, g.P999Ms, red.P50Ms, red.P99Ms, red.P999Ms)
		p("")
	}
	if len(rd.Stages) > 0 {
		p("Where the time went, from the service's own stage histograms over the same calls (p99: the upper bound of its bucket; -1: beyond the last):")
		p("")
		p("| histogram | stage | calls | mean | p99 ≤ |")
		p("|---|---|---|---|---|")
		for _, st := range rd.Stages {
			p("| %s | %s | %d | %.3f ms | %.3g ms |", st.Metric, st.Stage, st.Calls, st.MeanMs, st.P99Ms)
		}
		p("")
	}
	p("![GetFeed CDF](%s)", img("getfeed_cdf.png"))
	p("")
	return b.String()
}
