// Package faults wraps any zen.Table to inject latency, errors and outages, switchable at run
// time. The tests, the benchmarks and the demo use it to slow or break the primary or the
// standby of the materialized feed. Draws come from a seeded RNG, so a run is repeatable.
package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrInjected is returned by a call chosen to fail by Config.ErrorRate.
var ErrInjected = errors.New("faults: injected error")

// ErrOutage is returned by every call while Config.Outage is set.
var ErrOutage = errors.New("faults: store outage")

// Config is the fault mix. The zero value injects nothing.
type Config struct {
	// Base is added to every call.
	Base time.Duration `json:"base"`
	// Jitter adds a uniform delay in [0, Jitter) to every call.
	Jitter time.Duration `json:"jitter"`
	// SlowFraction of calls, in [0, 1], are delayed by a further Slow.
	SlowFraction float64       `json:"slow_fraction"`
	Slow         time.Duration `json:"slow"`
	// ErrorRate of calls, in [0, 1], fail with ErrInjected (after their delay).
	ErrorRate float64 `json:"error_rate"`
	// Outage fails every call at once with ErrOutage.
	Outage bool `json:"outage"`
}

// Validate reports a field out of range.
func (c Config) Validate() error {
	frac := func(name string, v float64) error {
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("faults: %s %v is not in [0, 1]", name, v)
		}
		return nil
	}
	if err := frac("slow fraction", c.SlowFraction); err != nil {
		return err
	}
	if err := frac("error rate", c.ErrorRate); err != nil {
		return err
	}
	const maxDelay = 10 * time.Minute
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"base", c.Base}, {"jitter", c.Jitter}, {"slow", c.Slow}} {
		if d.v < 0 || d.v > maxDelay {
			return fmt.Errorf("faults: %s delay %v is not in [0, %v]", d.name, d.v, maxDelay)
		}
	}
	return nil
}

// Stats counts what the wrapper did.
type Stats struct {
	Calls, Slowed, Errors, Outages int64
}

// Table is a zen.Table that injects the faults of its Config before calling the wrapped table.
type Table struct {
	inner zen.Table
	cfg   atomic.Pointer[Config]
	mu    sync.Mutex
	rng   *rand.Rand

	calls, slowed, errs, outages atomic.Int64
}

var (
	_ zen.Table        = (*Table)(nil)
	_ zen.MultiGetter  = (*Table)(nil)
	_ zen.MultiScanner = (*Table)(nil)
	_ zen.Carrier      = (*Table)(nil)
	_ zen.CondBatcher  = (*Table)(nil)
)

// Wrap returns inner wrapped with no faults, drawing from an RNG seeded with seed.
func Wrap(inner zen.Table, seed uint64) *Table {
	t := &Table{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	t.cfg.Store(&Config{})
	return t
}

// Set replaces the fault mix; calls already delayed keep their delay.
func (t *Table) Set(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	t.cfg.Store(&c)
	return nil
}

// Config returns the current fault mix.
func (t *Table) Config() Config { return *t.cfg.Load() }

// Stats returns the counts so far.
func (t *Table) Stats() Stats {
	return Stats{Calls: t.calls.Load(), Slowed: t.slowed.Load(), Errors: t.errs.Load(), Outages: t.outages.Load()}
}

// inject applies the delay and decides the error of one call.
func (t *Table) inject(ctx context.Context) error {
	t.calls.Add(1)
	c := t.cfg.Load()
	if c.Outage {
		t.outages.Add(1)
		return ErrOutage
	}
	d := c.Base
	t.mu.Lock()
	if c.Jitter > 0 {
		d += time.Duration(t.rng.Int64N(int64(c.Jitter)))
	}
	slow := c.SlowFraction > 0 && t.rng.Float64() < c.SlowFraction
	fail := c.ErrorRate > 0 && t.rng.Float64() < c.ErrorRate
	t.mu.Unlock()
	if slow {
		t.slowed.Add(1)
		d += c.Slow
	}
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		t.errs.Add(1)
		return ErrInjected
	}
	return nil
}

// Get injects faults, then reads from the wrapped table.
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return t.inner.Get(ctx, key)
}

// GetMany injects faults once for the call, then reads the keys from the wrapped table.
func (t *Table) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return zen.GetMany(ctx, t.inner, keys)
}

// ScanMany injects faults once for the call, then runs the scans on the wrapped table.
func (t *Table) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return zen.ScanMany(ctx, t.inner, opts)
}

// CheckAndSetMany injects faults once for the call, then runs the compare-and-sets on the
// wrapped table.
func (t *Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return zen.CheckAndSetMany(ctx, t.inner, conds)
}

// CheckAndSetWith injects faults, then compares-and-sets with extra on the wrapped table; it
// fails with errors.ErrUnsupported, writing nothing, when that table is not a zen.Carrier.
func (t *Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	c, ok := t.inner.(zen.Carrier)
	if !ok {
		return false, fmt.Errorf("faults: check-and-set with extra rows: %w", errors.ErrUnsupported)
	}
	if err := t.inject(ctx); err != nil {
		return false, err
	}
	return c.CheckAndSetWith(ctx, key, expected, value, extra)
}

// IncrementWith injects faults, then increments with extra on the wrapped table; it fails with
// errors.ErrUnsupported, writing nothing, when that table is not a zen.Carrier.
func (t *Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	c, ok := t.inner.(zen.Carrier)
	if !ok {
		return 0, fmt.Errorf("faults: increment with extra rows: %w", errors.ErrUnsupported)
	}
	if err := t.inject(ctx); err != nil {
		return 0, err
	}
	return c.IncrementWith(ctx, key, delta, extra)
}

// Apply injects faults, then writes to the wrapped table.
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.inject(ctx); err != nil {
		return err
	}
	return t.inner.Apply(ctx, muts)
}

// Scan injects faults, then scans the wrapped table.
func (t *Table) Scan(ctx context.Context, opts zen.ScanOptions) ([]zen.KV, error) {
	if err := t.inject(ctx); err != nil {
		return nil, err
	}
	return t.inner.Scan(ctx, opts)
}

// CheckAndSet injects faults, then compares-and-sets on the wrapped table.
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if err := t.inject(ctx); err != nil {
		return false, err
	}
	return t.inner.CheckAndSet(ctx, key, expected, value)
}

// Increment injects faults, then increments on the wrapped table.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	if err := t.inject(ctx); err != nil {
		return 0, err
	}
	return t.inner.Increment(ctx, key, delta)
}
