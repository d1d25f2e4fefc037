package feedsvc

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// delayedCopy stands in for the database's own replication: it copies the canary row from
// primary to standby after delay, until ctx is done.
func delayedCopy(ctx context.Context, primary, standby zen.Table, delay time.Duration) {
	for ctx.Err() == nil {
		if v, err := primary.Get(ctx, canaryKey); err == nil {
			time.Sleep(delay)
			_ = standby.Apply(ctx, []zen.Mutation{{Key: canaryKey, Value: v}})
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCanaryMeasuresLagAndGateRefusesStaleStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := zenmem.New().Table(t.Context(), "feed")
		s, _ := zenmem.New().Table(t.Context(), "feed")
		st := faults.Wrap(s, 1)
		c, err := NewCanary(p, st, CanaryOptions{Interval: 50 * time.Millisecond, Poll: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		copyCtx, stopCopy := context.WithCancel(ctx)
		copied := make(chan struct{})
		go func() { delayedCopy(copyCtx, p, s, 20*time.Millisecond); close(copied) }()
		ran := make(chan struct{})
		go func() { _ = c.Run(ctx); close(ran) }()
		defer func() { cancel(); <-ran }()

		gate, err := NewStalenessGate(st, c, 200*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Replication running with a 20 ms delay: the lag settles near it and the gate reads.
		waitUntil(t, func() bool { l := c.Staleness(); return l >= 15*time.Millisecond && l < 150*time.Millisecond })
		waitUntil(t, func() bool { _, next, _ := c.Lags().Since(0); return next > 0 })
		if lags, next, _ := c.Lags().Since(0); uint64(len(lags)) != next || lags[0] < 20*time.Millisecond {
			t.Errorf("canary lag log = %v (next %d), want the measurements, each at least the 20 ms delay", lags, next)
		}
		if _, err := gate.Get(t.Context(), []byte("k")); !errors.Is(err, zen.ErrNotFound) {
			t.Errorf("gate read with replication healthy: %v, want the standby's own not-found", err)
		}
		// Replication stops: the outstanding canary ages, the gate refuses.
		stopCopy()
		<-copied
		waitUntil(t, func() bool { return c.Staleness() > 200*time.Millisecond })
		if _, err := gate.Scan(t.Context(), zen.ScanOptions{}); !errors.Is(err, ErrStandbyStale) {
			t.Errorf("gate scan with replication stopped: %v, want ErrStandbyStale", err)
		}
		// Unbounded: reads pass again.
		if err := gate.SetMaxStaleness(0); err != nil {
			t.Fatal(err)
		}
		if _, err := gate.Scan(t.Context(), zen.ScanOptions{}); err != nil {
			t.Errorf("unbounded gate: %v", err)
		}
		if err := gate.SetMaxStaleness(-time.Second); err == nil {
			t.Error("a negative bound was accepted")
		}
	})
}

func TestKnobsSetStandbyStaleness(t *testing.T) {
	p, _ := zenmem.New().Table(t.Context(), "feed")
	s, _ := zenmem.New().Table(t.Context(), "feed")
	r, err := NewReplicator(p, s, ReplicatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := NewStalenessGate(s, r, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Deps{Primary: r, Standby: gate, StandbyGate: gate, Generator: newFakeGen(1),
		Enqueuer: &fakeQueue{}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.ApplyKnobs([]byte(`{"standby": {"max_staleness": "250ms"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := gate.MaxStaleness(); got != 250*time.Millisecond {
		t.Errorf("max staleness = %v, want 250ms", got)
	}
	if err := svc.ApplyKnobs([]byte(`{"standby": {"max_staleness": "-1s"}, "service": {"max_items": 5}}`)); err == nil {
		t.Error("a negative bound was accepted")
	}
	if got := gate.MaxStaleness(); got != 250*time.Millisecond {
		t.Errorf("a refused document changed the bound to %v", got)
	}
}

// TestCanaryLagGaugeGrowsWhilePrimaryDown: while the primary takes no canary writes, the
// exported lag (smartfeed_replication_lag_seconds) is the time since the last canary round
// trip, growing, not the last measured lag; the gate's staleness keeps the last lag (a primary
// that takes no writes makes the standby no staler, and the standby must keep serving). A
// round trip after the outage brings the gauge back to the measured lag.
func TestCanaryLagGaugeGrowsWhilePrimaryDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := zenmem.New().Table(t.Context(), "feed")
		s, _ := zenmem.New().Table(t.Context(), "feed")
		pt := faults.Wrap(p, 1)
		reg := prometheus.NewRegistry()
		c, err := NewCanary(pt, s, CanaryOptions{Interval: 20 * time.Millisecond, Poll: 2 * time.Millisecond, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		copied := make(chan struct{})
		go func() { delayedCopy(ctx, p, s, 5*time.Millisecond); close(copied) }()
		ran := make(chan struct{})
		go func() { _ = c.Run(ctx); close(ran) }()
		defer func() { cancel(); <-ran; <-copied }()
		gauge := func() time.Duration {
			t.Helper()
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "smartfeed_replication_lag_seconds" {
					return time.Duration(mf.GetMetric()[0].GetGauge().GetValue() * float64(time.Second))
				}
			}
			t.Fatal("smartfeed_replication_lag_seconds not exported")
			return 0
		}
		waitUntil(t, func() bool { _, next, _ := c.Lags().Since(0); return next >= 2 })
		if g := gauge(); g <= 0 || g > 500*time.Millisecond {
			t.Fatalf("lag gauge with replication healthy = %v, want the measured lag", g)
		}
		if err := pt.Set(faults.Config{Outage: true}); err != nil {
			t.Fatal(err)
		}
		// Ten intervals without a round trip: the gauge says so.
		waitUntil(t, func() bool { return gauge() > 10*c.interval })
		if st := c.Staleness(); st > 10*c.interval {
			t.Errorf("staleness for the gate = %v during a primary outage, want the last measured lag", st)
		}
		g1 := gauge()
		waitUntil(t, func() bool { return gauge() > g1+5*c.interval })
		if err := pt.Set(faults.Config{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { return gauge() < 10*c.interval })
	})
}

// TestCanaryStalenessStopsWithPrimaryWrites: a canary written just before the primary stops
// taking writes is never shipped while it is down; the staleness the gate bounds standby reads
// by stops at the first failed write (the standby can miss nothing written after), so a
// primary outage longer than the bound does not make the standby refuse the reads it is there
// for. The exported lag keeps growing.
func TestCanaryStalenessStopsWithPrimaryWrites(t *testing.T) {
	p, _ := zenmem.New().Table(t.Context(), "feed")
	s, _ := zenmem.New().Table(t.Context(), "feed")
	pt := faults.Wrap(p, 1)
	c, err := NewCanary(pt, s, CanaryOptions{Interval: 20 * time.Millisecond, Poll: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() { _ = c.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	// Nothing replicates: the first canary stays outstanding and ages.
	waitUntil(t, func() bool { return c.Staleness() > 3*c.interval })
	if err := pt.Set(faults.Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return testutil.ToFloat64(c.errs.WithLabelValues("primary")) > 0 })
	s1 := c.Staleness()
	waitUntil(t, func() bool { return c.Lag() > s1+10*c.interval })
	if s2 := c.Staleness(); s2 != s1 {
		t.Errorf("staleness went from %v to %v while the primary took no writes, want it to stay", s1, s2)
	}
	// The primary takes writes again, nothing replicates: the staleness grows again.
	if err := pt.Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return c.Staleness() > s1+5*c.interval })
}
