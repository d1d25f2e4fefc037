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
// DefaultPolicy. It is the one hedging policy type: the binary's config (feed.hedge), the knobs
// file and the CLI use it, in JSON through MarshalJSON/UnmarshalJSON (durations as strings);
// the admin RPC's HedgePolicy message is its wire form, converted in feedsvc.
type Policy struct {
	// Mode is off, fixed or percentile. Default percentile.
	Mode Mode `json:"mode"`
	// Delay is the cutoff in fixed mode, in (0, MaxDelay] and below PrimaryTimeout (when set).
	// Default 10ms.
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

	// PrimaryTimeout is each primary read's own deadline: a primary that hangs costs a call at
	// most this long (then the read fails over to the standby). 0 means none. Default 1s.
	PrimaryTimeout time.Duration `json:"primary_timeout"`
	// BreakerFailures is the least number of failed or slow primary reads in the breaker's
	// window that can open the circuit breaker (slow: over Max, or beaten by a standby that
	// answered within the cutoff); 0 turns the breaker off. While it is open, reads go to the
	// standby first; they are failover, not hedges, and spend no budget. Default 5.
	BreakerFailures int `json:"breaker_failures"`
	// BreakerSlowRate opens the breaker when at least this fraction of the primary reads in its
	// window were slow or failed (and at least BreakerFailures of them), in (0, 1]. Default 0.5.
	BreakerSlowRate float64 `json:"breaker_slow_rate"`
	// BreakerInterval is the breaker's window in time: the slow rate is computed over the
	// primary reads judged in the last BreakerInterval, so a stall shorter than a fraction of it
	// does not open the breaker however many reads it catches at once. Default 1s.
	BreakerInterval time.Duration `json:"breaker_interval"`
	// BreakerWindow is the least number of recent primary reads the slow rate is computed over:
	// when the last BreakerInterval holds fewer (a quiet service), the last BreakerWindow reads
	// are the window. Default 20.
	BreakerWindow int `json:"breaker_window"`
	// BreakerOpenFor is how long the breaker stays open before it lets a probe through.
	// Default 2s.
	BreakerOpenFor time.Duration `json:"breaker_open_for"`
	// BreakerProbes is how many good probes in a row close it again. Default 3.
	BreakerProbes int `json:"breaker_probes"`
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

		PrimaryTimeout:  time.Second,
		BreakerFailures: 5,
		BreakerSlowRate: 0.5,
		BreakerInterval: time.Second,
		BreakerWindow:   20,
		BreakerOpenFor:  2 * time.Second,
		BreakerProbes:   3,
	}
}

// MaxDelay is the largest fixed cutoff (Policy.Delay) a policy may hold.
const MaxDelay = 10 * time.Second

// Validate reports the first knob out of range.
func (p Policy) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("hedge policy: "+f, args...) }
	switch p.Mode {
	case ModeOff, ModeFixed, ModePercentile:
	default:
		return bad("mode %s is not off, fixed or percentile", quote.Q(string(p.Mode)))
	}
	if p.Delay < 0 || p.Delay > MaxDelay {
		return bad("delay %v is not in [0, %v]", p.Delay, MaxDelay)
	}
	if p.Mode == ModeFixed {
		// A zero cutoff hedges every call as soon as the budget allows, and one at or past the
		// primary's own timeout never hedges: neither is a cutoff.
		if p.Delay == 0 {
			return bad("delay 0 in fixed mode: want a cutoff in (0, %v]", MaxDelay)
		}
		if p.PrimaryTimeout > 0 && p.Delay >= p.PrimaryTimeout {
			return bad("delay %v in fixed mode is not below the primary timeout %v", p.Delay, p.PrimaryTimeout)
		}
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
	if p.PrimaryTimeout < 0 || (p.PrimaryTimeout > 0 && p.PrimaryTimeout < p.Max) {
		return bad("primary timeout %v is not 0 or at least max %v", p.PrimaryTimeout, p.Max)
	}
	if p.BreakerFailures < 0 || p.BreakerFailures > 1000 {
		return bad("breaker failures %d is not in [0, 1000]", p.BreakerFailures)
	}
	if p.BreakerFailures > 0 {
		if math.IsNaN(p.BreakerSlowRate) || p.BreakerSlowRate <= 0 || p.BreakerSlowRate > 1 {
			return bad("breaker slow rate %v is not in (0, 1]", p.BreakerSlowRate)
		}
		if p.BreakerInterval < 10*time.Millisecond || p.BreakerInterval > time.Hour {
			return bad("breaker interval %v is not in [10ms, 1h]", p.BreakerInterval)
		}
		if p.BreakerWindow < 1 || p.BreakerWindow > 10000 {
			return bad("breaker window %d is not in [1, 10000]", p.BreakerWindow)
		}
		if p.BreakerOpenFor <= 0 || p.BreakerOpenFor > time.Hour {
			return bad("breaker open-for %v is not in (0, 1h]", p.BreakerOpenFor)
		}
		if p.BreakerProbes < 1 || p.BreakerProbes > 1000 {
			return bad("breaker probes %d is not in [1, 1000]", p.BreakerProbes)
		}
	}
	return nil
}

// ErrBothFailed wraps the errors of a call whose primary and standby both failed.
var ErrBothFailed = errors.New("hedge: primary and standby both failed")
