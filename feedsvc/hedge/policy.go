// Package hedge issues speculative ("hedged") reads: the primary first, and the same read to a
// standby when the primary errs or has not answered by a cutoff; the first good answer wins and
// the other read is cancelled. The cutoff is fixed or a percentile of the primary's recent
// latency, clamped to [Min, Max]; an extra-load budget caps how many calls may hedge on the
// cutoff, so a global slowdown cannot double the load; errors fail over at once, whatever the
// budget. A warm-up fraction of calls also reads the standby and drops the answer.
//
// The shape follows The Tail at Scale (Dean & Barroso, 2013), Finagle's BackupRequestFilter and
// failsafe-go's hedgepolicy. Every knob lives in a Policy that can be replaced at run time.
package hedge

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// Mode selects how the hedging cutoff is chosen.
type Mode string

const (
	// ModeOff never hedges on the cutoff; errors of the primary still fail over to the standby.
	ModeOff Mode = "off"
	// ModeFixed hedges after Policy.Delay.
	ModeFixed Mode = "fixed"
	// ModePercentile hedges after Policy.Percentile of the primary's recent latency, clamped to
	// [Policy.Min, Policy.Max].
	ModePercentile Mode = "percentile"
)

// Policy holds every live-tunable knob of a Hedger. The zero value is not valid; start from
// DefaultPolicy.
type Policy struct {
	// Mode is off, fixed or percentile. Default percentile.
	Mode Mode `json:"mode"`
	// Delay is the cutoff in fixed mode. Default 10ms.
	Delay time.Duration `json:"delay"`
	// Percentile of the primary's recent latency used as the cutoff in percentile mode, in
	// (0, 100). Default 99.9.
	Percentile float64 `json:"percentile"`
	// Min and Max clamp the percentile cutoff. Defaults 2ms and 100ms. While the window holds
	// fewer than MinSamples samples the cutoff is Max.
	Min time.Duration `json:"min"`
	Max time.Duration `json:"max"`
	// Budget is the largest fraction of calls that may hedge on the cutoff, in [0, 1]: each call
	// earns Budget tokens, a cutoff hedge spends one, and at most BudgetBurst tokens are kept.
	// A hedge at a cutoff below Max may only spend down to BudgetBurst/2; the rest is kept for
	// calls still outstanding at Max. Default 0.02 (2% extra load). Failover on a primary error
	// spends no token.
	Budget float64 `json:"budget"`
	// BudgetBurst caps the saved tokens. Default 10.
	BudgetBurst float64 `json:"budget_burst"`
	// Warmup is the fraction of calls, in [0, 1], that also read the standby and drop the
	// answer, to keep its caches warm. Default 0.01.
	Warmup float64 `json:"warmup"`
	// MinSamples is the number of primary latencies needed before the percentile is trusted.
	// Default 100.
	MinSamples int `json:"min_samples"`
}

// DefaultPolicy returns the documented defaults: percentile mode at p99.9 clamped to
// [2ms, 100ms], a 2% extra-load budget and 1% warm-up reads.
func DefaultPolicy() Policy {
	return Policy{
		Mode:        ModePercentile,
		Delay:       10 * time.Millisecond,
		Percentile:  99.9,
		Min:         2 * time.Millisecond,
		Max:         100 * time.Millisecond,
		Budget:      0.02,
		BudgetBurst: 10,
		Warmup:      0.01,
		MinSamples:  100,
	}
}

// Validate reports the first knob out of range.
func (p Policy) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("hedge policy: "+f, args...) }
	switch p.Mode {
	case ModeOff, ModeFixed, ModePercentile:
	default:
		return bad("mode %s is not off, fixed or percentile", quote.Q(string(p.Mode)))
	}
	if p.Delay < 0 {
		return bad("delay %v is negative", p.Delay)
	}
	if math.IsNaN(p.Percentile) || p.Percentile <= 0 || p.Percentile >= 100 {
		return bad("percentile %v is not in (0, 100)", p.Percentile)
	}
	if p.Min < 0 || p.Max <= 0 || p.Min > p.Max {
		return bad("clamp [%v, %v] is not 0 <= min <= max, max > 0", p.Min, p.Max)
	}
	if math.IsNaN(p.Budget) || p.Budget < 0 || p.Budget > 1 {
		return bad("budget %v is not in [0, 1]", p.Budget)
	}
	if math.IsNaN(p.BudgetBurst) || p.BudgetBurst < 1 || p.BudgetBurst > 1e6 {
		return bad("budget burst %v is not in [1, 1e6]", p.BudgetBurst)
	}
	if math.IsNaN(p.Warmup) || p.Warmup < 0 || p.Warmup > 1 {
		return bad("warmup %v is not in [0, 1]", p.Warmup)
	}
	if p.MinSamples < 1 || p.MinSamples > 1<<20 {
		return bad("min samples %d is not in [1, 2^20]", p.MinSamples)
	}
	return nil
}

// ErrBothFailed wraps the errors of a call whose primary and standby both failed.
var ErrBothFailed = errors.New("hedge: primary and standby both failed")
