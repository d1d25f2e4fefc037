package feedsvc

import (
	"time"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// HedgePolicyProto is the wire form of p for FeedAdmin (durations in milliseconds), with
// cutoff, the cutoff in use, as its read-only current_cutoff_ms. It and HedgePolicyFromProto
// are the one place hedge.Policy and feedv1.HedgePolicy meet.
func HedgePolicyProto(p hedge.Policy, cutoff time.Duration) *feedv1.HedgePolicy {
	return &feedv1.HedgePolicy{
		Mode: string(p.Mode), DelayMs: ms(p.Delay), Percentile: p.Percentile,
		MinMs: ms(p.Min), MaxMs: ms(p.Max), Budget: p.Budget, BudgetBurst: p.BudgetBurst,
		Warmup: p.Warmup, MinSamples: int32(p.MinSamples), CurrentCutoffMs: ms(cutoff),
	}
}

// HedgePolicyFromProto reads the knobs in carries over base: the primary timeout and the
// breaker's knobs are not on the wire and keep base's values. A duration that is NaN, negative
// or over a day is an InvalidArgument error; the rest is for hedge.Policy.Validate.
func HedgePolicyFromProto(in *feedv1.HedgePolicy, base hedge.Policy) (hedge.Policy, error) {
	p := base
	p.Mode, p.Percentile, p.Budget = hedge.Mode(in.GetMode()), in.GetPercentile(), in.GetBudget()
	p.BudgetBurst, p.Warmup, p.MinSamples = in.GetBudgetBurst(), in.GetWarmup(), int(in.GetMinSamples())
	var err error
	for _, f := range []struct {
		name string
		v    float64
		dst  *time.Duration
	}{{"delay_ms", in.GetDelayMs(), &p.Delay}, {"min_ms", in.GetMinMs(), &p.Min}, {"max_ms", in.GetMaxMs(), &p.Max}} {
		if *f.dst, err = fromMS(f.name, f.v); err != nil {
			return base, err
		}
	}
	return p, nil
}
