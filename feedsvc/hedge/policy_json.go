package hedge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// policyDoc is Policy's JSON form, the one every written policy uses (the binary's config file,
// the feed service's knobs file): the keys of Policy's json tags, durations as Go duration
// strings ("10ms", "1.5s"), every key optional.
type policyDoc struct {
	Mode        *Mode     `json:"mode,omitempty"`
	Delay       *duration `json:"delay,omitempty"`
	Percentile  *float64  `json:"percentile,omitempty"`
	Min         *duration `json:"min,omitempty"`
	Max         *duration `json:"max,omitempty"`
	Budget      *float64  `json:"budget,omitempty"`
	BudgetBurst *float64  `json:"budget_burst,omitempty"`
	Warmup      *float64  `json:"warmup,omitempty"`
	MinSamples  *int      `json:"min_samples,omitempty"`

	PrimaryTimeout  *duration `json:"primary_timeout,omitempty"`
	BreakerFailures *int      `json:"breaker_failures,omitempty"`
	BreakerSlowRate *float64  `json:"breaker_slow_rate,omitempty"`
	BreakerInterval *duration `json:"breaker_interval,omitempty"`
	BreakerWindow   *int      `json:"breaker_window,omitempty"`
	BreakerOpenFor  *duration `json:"breaker_open_for,omitempty"`
	BreakerProbes   *int      `json:"breaker_probes,omitempty"`
}

// duration is a time.Duration written as a Go duration string.
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"10ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// MarshalJSON writes every knob, durations as Go duration strings.
func (p Policy) MarshalJSON() ([]byte, error) {
	d := func(v time.Duration) *duration { x := duration(v); return &x }
	return json.Marshal(policyDoc{
		Mode: &p.Mode, Delay: d(p.Delay), Percentile: &p.Percentile, Min: d(p.Min), Max: d(p.Max),
		Budget: &p.Budget, BudgetBurst: &p.BudgetBurst, Warmup: &p.Warmup, MinSamples: &p.MinSamples,
		PrimaryTimeout: d(p.PrimaryTimeout), BreakerFailures: &p.BreakerFailures, BreakerSlowRate: &p.BreakerSlowRate,
		BreakerInterval: d(p.BreakerInterval), BreakerWindow: &p.BreakerWindow, BreakerOpenFor: d(p.BreakerOpenFor), BreakerProbes: &p.BreakerProbes,
	})
}

// UnmarshalJSON overrides the knobs present in b and keeps the others, so a document names
// only what it changes: decode over DefaultPolicy (or the policy in force). Unknown keys are
// refused. It does not validate; call Validate on the result.
func (p *Policy) UnmarshalJSON(b []byte) error {
	var doc policyDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("hedge policy: %w", err)
	}
	set(&p.Mode, doc.Mode)
	setDuration(&p.Delay, doc.Delay)
	set(&p.Percentile, doc.Percentile)
	setDuration(&p.Min, doc.Min)
	setDuration(&p.Max, doc.Max)
	set(&p.Budget, doc.Budget)
	set(&p.BudgetBurst, doc.BudgetBurst)
	set(&p.Warmup, doc.Warmup)
	set(&p.MinSamples, doc.MinSamples)
	setDuration(&p.PrimaryTimeout, doc.PrimaryTimeout)
	set(&p.BreakerFailures, doc.BreakerFailures)
	set(&p.BreakerSlowRate, doc.BreakerSlowRate)
	setDuration(&p.BreakerInterval, doc.BreakerInterval)
	set(&p.BreakerWindow, doc.BreakerWindow)
	setDuration(&p.BreakerOpenFor, doc.BreakerOpenFor)
	set(&p.BreakerProbes, doc.BreakerProbes)
	return nil
}

func set[T any](dst, src *T) {
	if src != nil {
		*dst = *src
	}
}

func setDuration(dst *time.Duration, src *duration) {
	if src != nil {
		*dst = time.Duration(*src)
	}
}
