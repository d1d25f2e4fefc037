package feedsvc

import (
	"context"
	"errors"
	"testing"
	"time"

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
