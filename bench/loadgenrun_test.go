package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

// TestSetLoadGen: the generator's steps become the read-rate steps, its highest rates the
// results', and the ratios compare the kinds' p99 from schedule at the same offered rate.
func TestSetLoadGen(t *testing.T) {
	step := func(kind string, rate, p99, sendP99 float64, held bool) loadgen.Step {
		return loadgen.Step{Kind: kind, Offered: rate, Achieved: rate, Seconds: 20, Windows: 1, Held: held,
			FromSchedule: loadgen.Percentiles{P99: p99}, FromSend: loadgen.Percentiles{P99: sendP99},
			Errors: map[string]int{loadgen.CodeOK: int(rate) * 20, "Unavailable": 3}}
	}
	sum := &loadgen.Summary{BoundMs: 10, InFlight: 64, Steps: []loadgen.Step{
		step(loadgen.KindGetFeed, 200, 4, 3, true), step(loadgen.KindRedis, 200, 1, 1, true), step(loadgen.KindFloor, 200, 0.5, 0.5, true),
		step(loadgen.KindGetFeed, 1000, 30, 6, false), step(loadgen.KindRedis, 1000, 2, 1, true), step(loadgen.KindFloor, 1000, 1.5, 1, true),
		step(loadgen.KindGetFeed, 5000, 900, 8, false), step(loadgen.KindRedis, 5000, 3, 2, true), step(loadgen.KindFloor, 5000, 60, 5, false),
	}, MaxRate: map[string]float64{loadgen.KindGetFeed: 200, loadgen.KindRedis: 5000, loadgen.KindFloor: 1000}}
	res := &Results{Ratios: map[string]float64{}}
	res.setLoadGen(&loadgen.Report{Summary: sum})
	want := map[string]float64{"getfeed_p99_vs_redis_200": 4, "getfeed_p99_vs_redis_1000": 15, "getfeed_p99_vs_redis_5000": 300,
		"getfeed_p99_vs_grpc_floor_1000": 20}
	if diff := cmp.Diff(want, res.Ratios); diff != "" {
		t.Errorf("ratios (-want +got):\n%s", diff)
	}
	if res.GetFeedMaxRate != 200 || res.RedisMaxRate != 5000 || res.FloorMaxRate != 1000 || res.RateStepConc != 64 || res.RateStepBoundMs != 10 {
		t.Errorf("max rates %v %v %v, concurrency %d, bound %v", res.GetFeedMaxRate, res.RedisMaxRate, res.FloorMaxRate, res.RateStepConc, res.RateStepBoundMs)
	}
	if len(res.GetFeedRateSteps) != 3 || res.GetFeedRateSteps[1].SchedP99Ms != 30 || res.GetFeedRateSteps[1].P99Ms != 6 || res.GetFeedRateSteps[1].Errors != 3 || res.GetFeedRateSteps[1].Held {
		t.Errorf("GetFeed steps %+v", res.GetFeedRateSteps)
	}
}
