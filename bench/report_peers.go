package bench

import (
	"fmt"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// peerRatioMeanings are the meanings of the ratios of the equal-work peers, the fanout lag under
// read load and hedging, for the report's table.
var peerRatioMeanings = map[string]string{
	"fanout_vs_redis_equal": "our pool inserts/s (the burst: events published at once, until drained) over the Redis sorted-set feed's, the same receivers' rows " +
		"in the worker's batches (one pipeline per fanout chunk) on as many clients as the worker has task slots, trimmed on the worker's schedule, " +
		"against the Redis of the worker's durability (AOF appendfsync always) when one ran (see Fanout at equal work)",
	"fanout_vs_raw_store_equal": "our pool inserts/s (the burst) over the store's raw synced writes of the same pool rows in the same batches on as many writers, " +
		"its table pre-filled past the memtable",
	"fanout_lag_p99_s_at_read_load": "fanout lag p99 in seconds at the profile's sustained event rate while the load generator, in its own process, offers GetFeed at 1,000/s",
	"hedged_p999_vs_unhedged":       "GetFeed p99.9 with hedging on over with hedging off, the same slice of the primary's reads slowed by the same amount in both",
	"hedge_extra_load":              "reads sent to the standby (hedges and warm-up reads) per GetFeed call, hedging on",
}

// equalWorkMarkdown is the fanout against its peers at equal work.
func equalWorkMarkdown(r *Results) string {
	eq := r.EqualWork
	if eq == nil {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## Fanout at equal work")
	p("")
	p("The burst's %d receivers' rows, split as the worker writes them: %d batches (one per fanout chunk of at most %d receivers, %.0f rows on average),",
		eq.Rows, eq.Batches, eq.ChunkSize, eq.MeanBatch)
	p("written by %d concurrent clients (the worker's task slots) on each side; the worker trims a receiver's pools after 1 in %d inserts, and the Redis peer its sets on the same schedule.",
		eq.Slots, eq.TrimEvery)
	p("")
	p("| | durability | inserts/s | seconds |")
	p("|---|---|---|---|")
	fl := "not counted"
	if eq.SmartFeedFlushes >= 0 {
		fl = fmt.Sprintf("%.0f memtable flushes during it", eq.SmartFeedFlushes)
	}
	p("| SmartFeed (the burst, %s) | every pool batch synced | %.0f | %.1f |", fl, eq.SmartFeedInsertsPerSec, r.Fanout.BurstSeconds)
	for _, rd := range eq.Redis {
		p("| Redis sorted sets, trimmed 1 in %d | %s | %.0f | %.1f |", rd.TrimEvery, rd.Durability, rd.InsertsPerSec, rd.Seconds)
	}
	if raw := eq.Raw; raw != nil {
		fl := "flushes not counted"
		if raw.Flushes >= 0 {
			fl = fmt.Sprintf("%.0f memtable flushes during it", raw.Flushes)
		}
		p("| raw store, same rows and batches (table pre-filled with %d rows, %.0f MiB; %s) | every batch synced | %.0f | %.1f |",
			raw.PrefillRows, raw.PrefillMiB, fl, raw.RowsPerSec, raw.Seconds)
	}
	p("")
	p("%s", equalWorkMethod)
	p("")
	if eq.RatioRedis != "" {
		p("`fanout_vs_redis_equal` compares with the Redis peer running %s.", eq.RatioRedis)
		p("")
	}
	for _, n := range eq.Notes {
		p("Note: %s.", n)
		p("")
	}
	return b.String()
}

// lagUnderReadsMarkdown is the sustainable event rate under read load.
func lagUnderReadsMarkdown(r *Results, img func(string) string) string {
	lr := r.LagUnderReads
	if lr == nil {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## Sustained event rate under read load")
	p("")
	p("The load generator (`smartfeed loadgen`, its own process) offered GetFeed at %.0f/s over the bench's users for the whole phase; once the server counted its first call (after %.1f s)",
		lr.ReadRate, lr.ReadsSeenAfter)
	p("events were published at each rate below for the step's length, the fanout queues drained after each, up to the first rate at or above the sustained rate (%.0f/s) whose lag p99 was over %.0f ms.",
		lr.EventRate, lr.BoundMs)
	p("")
	p("%s", lagUnderReadsMethod)
	p("")
	if w := lr.GetFeed; w != nil {
		p("GetFeed over the phase (%.0f s): %.0f/s achieved of %.0f offered, p50 %.2f / p99 %.2f / p99.9 %.2f ms from schedule, p99 %.2f ms from send, load average up to %.1f.",
			w.Seconds, w.Achieved, w.Offered, w.FromSchedule.P50, w.FromSchedule.P99, w.FromSchedule.P999, w.FromSend.P99, w.LoadAvg.Max)
		if w.Warning != "" {
			p("")
			p("**Warning**: %s.", w.Warning)
		}
		p("")
	}
	p("| events/s | events | lag p99 | under %.0f ms |", lr.BoundMs)
	p("|---|---|---|---|")
	for _, s := range lr.Steps {
		p("| %.0f | %d | %.0f ms | %v |", s.Rate, s.Events, s.LagP99Ms, s.Sustainable)
	}
	p("")
	p("Highest event rate with fanout lag p99 under %.0f ms while GetFeed ran at %.0f/s: **%.0f events/s**; lag p99 at the sustained %.0f events/s: **%.2f s**.",
		lr.BoundMs, lr.ReadRate, lr.MaxRate, lr.EventRate, lr.LagP99AtEventRate)
	p("")
	p("![fanout lag under read load](%s)", img("fanout_lag_read_load.png"))
	p("")
	return b.String()
}

// machineMarkdown is the machine during each phase and each process's peak RSS, with a warning
// for every phase another process took CPU in.
func machineMarkdown(r *Results) string {
	if len(r.PhaseLoad) == 0 && len(r.Processes) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## Machine")
	p("")
	p("%s", machineMethod)
	p("")
	if len(r.PhaseLoad) > 0 {
		p("CPU in cores on average over each phase: the machine's (/proc/stat), the run's (this process, the load generator, the Redis servers) and the rest (other processes).")
		p("")
		p("| phase | seconds | load avg start / max / end | machine CPU | run CPU | other CPU |")
		p("|---|---|---|---|---|---|")
		for _, l := range r.PhaseLoad {
			p("| %s | %.0f | %.1f / %.1f / %.1f | %.2f | %.2f | %.2f |", l.Phase, l.Seconds, l.LoadAvgStart, l.LoadAvgMax, l.LoadAvgEnd, l.MachineCores, l.RunCores, l.OtherCores)
		}
		p("")
		for _, l := range r.PhaseLoad {
			if l.Warning != "" {
				p("**Warning** (%s): %s: its figures are not this software's alone.", l.Phase, l.Warning)
				p("")
			}
		}
	}
	if len(r.Processes) > 0 {
		p("| process | peak RSS | from |")
		p("|---|---|---|")
		for _, pr := range r.Processes {
			p("| %s | %.0f MiB | %s |", pr.Name, pr.PeakMiB, pr.Source)
		}
		p("")
	}
	return b.String()
}

// plotLagUnderReads is the fanout lag over the phase under read load, each sampled event a
// point, and the per-second p99.
func plotLagUnderReads(path string, r *Results) error {
	p := plot.New()
	p.Title.Text = "Fanout lag while GetFeed runs at 1,000/s (stepped event rates)"
	if lr := r.LagUnderReads; lr != nil {
		p.Title.Text = fmt.Sprintf("Fanout lag while GetFeed runs at %.0f/s (stepped event rates)", lr.ReadRate)
	}
	p.X.Label.Text, p.Y.Label.Text = "time into the phase (s)", "lag (ms)"
	if lr := r.LagUnderReads; lr != nil && len(lr.BySecond) > 0 {
		pts := make(plotter.XYs, 0, len(lr.series))
		for _, l := range lr.series {
			pts = append(pts, plotter.XY{X: l.at.Seconds(), Y: ms(l.lag)})
		}
		p99 := make(plotter.XYs, 0, len(lr.BySecond))
		for _, s := range lr.BySecond {
			p99 = append(p99, plotter.XY{X: s.At + 0.5, Y: s.P99Ms})
		}
		if len(pts) > 0 {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			p.Add(sc)
			p.Legend.Add("sampled events", sc)
		}
		if err := plotutil.AddLines(p, "p99 by second", p99); err != nil {
			return err
		}
	}
	return save(p, path)
}

// equalWorkMethod, lagUnderReadsMethod and machineMethod say how those sections are measured,
// for the report (docs/benchmarks.md carries the same paragraphs).
const (
	equalWorkMethod = `How it is measured: the burst's events (each author's followers, the author left out) are split as the worker writes them, one batch per fanout chunk of at most ` +
		"`ChunkSize`" + ` receivers, and each peer writes exactly those batches on as many concurrent clients as the worker has task slots (` + "`worker.concurrency`" + `), before the burst.
The Redis peer (worker/baseline: ZADD per receiver, one pipeline per batch) trims a receiver's set after the same 1 in ` + "`TrimEvery`" + ` inserts, picked by the same hash, as the worker trims its pools;
it runs on the run's Redis (its durability read with CONFIG GET: ` + "`make bench`" + `'s runs AOF appendfsync everysec) and on a redis-server the bench starts on a free loopback port with AOF appendfsync always, the worker's durability (every pool batch is synced):
` + "`fanout_vs_redis_equal`" + ` compares with that one, and the report names the peer used. The raw-store peer writes the same batches as pool rows (zen's pool key, a pool row's value size), synced,
into a fresh table of the pools' store pre-filled, unsynced, with twice the memtable of pool rows, so that both it and the burst after it run on a store past its memtable; the memtable flushes during each are counted.`
	lagUnderReadsMethod = `How it is measured: ` + "`smartfeed bench`" + ` starts ` + "`smartfeed loadgen`" + ` in a process of its own offering GetFeed at 1,000/s (open loop, one window for the whole phase, ended by an interrupt), waits until the server counts its first call,
then publishes events at each step rate (the profile's sustained rate among them) for the step's length and waits for the fanout queues to drain, up to the first rate at or above the sustained one whose lag p99 is over 2 s.
A quarter of the events watch three of their followers; an event's lag is from its enqueue to the worker's write of the slowest watched follower's row. ` + "`fanout_lag_p99_s_at_read_load`" + ` is the lag p99 at the sustained rate, in seconds; the plot is every sampled event's lag over the phase and the p99 of each second.`
	machineMethod = `How it is measured: at each phase's start and end the bench reads the machine's busy CPU time (/proc/stat), its own and its waited-for children's (getrusage: the load generator) and the Redis servers' (/proc/PID/stat),
and samples the 1-minute load average every second. Other processes' CPU is the machine's less the run's; a phase where it exceeded 0.25 cores on average, or the load average exceeded the cores, is flagged with a warning.
Peak RSS: the bench process's (server and harness: the services run in it) from getrusage, each load generator's from its own VmHWM as it ends (a child's rusage would count its parent's peak at the exec), the Redis servers' from VmHWM (since each server started).`
)
