package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

// LoadGenRun runs the load generator (package loadgen) in a process of its own against the
// running system, reading users (the population: it draws readers among them), and returns its
// report. cmd/smartfeed starts `smartfeed loadgen` for it.
type LoadGenRun func(ctx context.Context, users []uint64) (*loadgen.Report, error)

// LoadGenResult is the load generator's run as results.json keeps it: every window, and the
// steps and highest rates of its summary.
type LoadGenResult struct {
	Summary *loadgen.Summary `json:"summary"`
	Windows []loadgen.Window `json:"windows"`
}

// loadgenActiveSalt draws the daily-active users the load generator reads as.
const loadgenActiveSalt = 11

// LoadGenRatioRates are the offered rates at which results.json compares GetFeed's p99 (from
// schedule) with the Redis peer's: getfeed_p99_vs_redis_<rate>.
var LoadGenRatioRates = []float64{200, 1000, 5000}

// runLoadGen is the read-throughput phase with the load generator in its own process: the
// fanout runs at opts.EventRate throughout, as under the in-process search it replaces.
func runLoadGen(ctx context.Context, sys System, w *World, opts Options, t0 time.Time, say func(string, ...any)) (*loadgen.Report, error) {
	bg, stopBG := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until the generator is done (cancelled then); an hour is more than any run takes.
		_, _, _ = fanout(bg, sys, w, opts.EventRate, time.Hour, 5, nil, t0)
	}()
	// The readers are the day's active users (the model's 10%), the generator skewing their
	// visits by a Zipf law over them.
	active := w.M.ActiveUsers(loadgenActiveSalt)
	readers := make([]uint64, len(active))
	for i, u := range active {
		readers[i] = w.IDs[u]
	}
	say("read rates: the load generator in its own process over the %d daily-active of %d users, fanout running at %.0f events/s", len(readers), len(w.IDs), opts.EventRate)
	rep, err := opts.LoadGen(ctx, readers)
	stopBG()
	<-done
	drain(ctx, sys, time.Minute)
	return rep, err
}

// setLoadGen puts the generator's report into res: its steps as the read-rate steps (held
// judged from schedule), its highest rates, and the ratios between the kinds.
func (res *Results) setLoadGen(rep *loadgen.Report) {
	s := rep.Summary
	res.LoadGen = &LoadGenResult{Summary: s, Windows: rep.Windows}
	res.Processes = append(res.Processes, ProcessRSS{Name: "smartfeed loadgen (read rates)", PeakMiB: rep.PeakRSSMiB, Source: "VmHWM, read by the generator as it ended"})
	res.GetFeedRateSteps, res.RedisRateSteps, res.FloorRateSteps = nil, nil, nil
	for _, st := range s.Steps {
		rs := ReadStep{Offered: st.Offered, Seconds: st.Seconds, Calls: st.Errors[loadgen.CodeOK] + st.Unsent,
			Achieved: st.Achieved, P50Ms: st.FromSend.P50, P99Ms: st.FromSend.P99, P999Ms: st.FromSend.P999,
			SchedP99Ms: st.FromSchedule.P99, Held: st.Held}
		for c, n := range st.Errors {
			if c != loadgen.CodeOK {
				rs.Errors += n
				rs.Calls += n
			}
		}
		switch st.Kind {
		case loadgen.KindGetFeed:
			res.GetFeedRateSteps = append(res.GetFeedRateSteps, rs)
		case loadgen.KindRedis:
			res.RedisRateSteps = append(res.RedisRateSteps, rs)
		case loadgen.KindFloor:
			res.FloorRateSteps = append(res.FloorRateSteps, rs)
		}
	}
	res.GetFeedMaxRate, res.RedisMaxRate, res.FloorMaxRate = s.MaxRate[loadgen.KindGetFeed], s.MaxRate[loadgen.KindRedis], s.MaxRate[loadgen.KindFloor]
	res.RateStepBoundMs, res.RateStepConc = s.BoundMs, s.InFlight
	p99 := func(kind string, rate float64) float64 {
		st, ok := s.Step(kind, rate)
		if !ok {
			return 0
		}
		return st.FromSchedule.P99
	}
	for _, r := range LoadGenRatioRates {
		res.Ratios[fmt.Sprintf("getfeed_p99_vs_redis_%.0f", r)] = ratio(p99(loadgen.KindGetFeed, r), p99(loadgen.KindRedis, r))
	}
	res.Ratios["getfeed_p99_vs_grpc_floor_1000"] = ratio(p99(loadgen.KindGetFeed, 1000), p99(loadgen.KindFloor, 1000))
}

// toUint converts counts for freshLine.
func toUint(m map[string]int) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = uint64(v)
	}
	return out
}

// loadgenMinShare is the load generator's share of the offered rate a step must achieve.
const loadgenMinShare = loadgen.MinAchievedShare
