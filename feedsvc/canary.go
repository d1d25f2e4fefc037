package feedsvc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// canaryKey is the canary row of the feed table, in the reserved range beside the change log:
// no feed read ever scans it.
var canaryKey = []byte{0xff, 'r', 'c'}

// Canary measures the lag of replication that the database does itself (HBase's replication
// from the primary cluster to the standby): every Interval it writes the current time into a
// canary row on the primary and watches for it on the standby. The lag of the last canary seen
// is observed; while a canary is outstanding, the staleness is at least its age.
//
// Two figures come out of it. Staleness, which the StalenessGate bounds standby reads by, is
// what the standby is known to miss: a primary that takes no writes makes the standby no
// staler, so from the first failed canary write it stops growing (the last lag, or the age the
// outstanding canary had then) and the standby keeps serving through a primary outage of any
// length. Lag, the smartfeed_replication_lag_seconds gauge, is what an
// operator can vouch for: once a canary write or read fails, it is the time since the newest
// canary seen on the standby was written, growing until a round trip succeeds again, so the
// dashboard shows an outage as one instead of the last healthy measurement.
//
// The canary row lives in one region, so on a cluster of several region servers it measures the
// replication queue of that region's server; HBase ships each server's WAL in order.
type Canary struct {
	primary, standby zen.Table
	interval, poll   time.Duration
	log              *zap.Logger
	hist             prometheus.Histogram
	gauge            prometheus.GaugeFunc
	errs             *prometheus.CounterVec
	lags             *LagLog

	wake     chan struct{}
	mu       sync.Mutex
	lastLag  time.Duration
	inflight time.Time // write time of the oldest canary not yet seen, zero when none
	seen     time.Time // write time of the newest canary seen on the standby
	// failSince is the time of the first canary write that failed after the last one that
	// succeeded; zero while writes succeed.
	failSince time.Time
	// failing is set when a canary write or standby read failed after the last round trip.
	failing bool
	// started is when the canary was made: the reference of Lag before any round trip.
	started time.Time
}

// CanaryOptions configures a Canary.
type CanaryOptions struct {
	// Interval between canary writes. Default 1s.
	Interval time.Duration
	// Poll is how often the standby is read while a canary is outstanding. Default 10ms.
	Poll   time.Duration
	Logger *zap.Logger
	// Registerer receives smartfeed_replication_lag_seconds and friends; nil registers nothing.
	Registerer prometheus.Registerer
}

// NewCanary returns a Canary over the feed table's primary and standby; call Run.
func NewCanary(primary, standby zen.Table, o CanaryOptions) (*Canary, error) {
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Poll == 0 {
		o.Poll = 10 * time.Millisecond
	}
	if o.Interval <= 0 || o.Poll <= 0 {
		return nil, fmt.Errorf("canary: interval %v and poll %v must be positive", o.Interval, o.Poll)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	c := &Canary{primary: primary, standby: standby, interval: o.Interval, poll: o.Poll, log: o.Logger,
		wake: make(chan struct{}, 1), lags: newLagLog(canaryLagLogSize), started: time.Now()}
	c.hist = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "smartfeed_replication_canary_seconds",
		Help:    "Time for a canary row written on the primary to be readable on the standby.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})
	c.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "smartfeed_replication_lag_seconds",
		Help: "How far the standby is behind the primary: the last canary's lag, or the age of the canary still awaited; " +
			"while canary writes or reads fail, the time since the newest canary seen on the standby was written."},
		func() float64 { return c.Lag().Seconds() })
	c.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_replication_canary_errors_total", Help: "Canary writes or reads that failed, by store."},
		[]string{"store"})
	if o.Registerer != nil {
		for _, m := range []prometheus.Collector{c.hist, c.gauge, c.errs} {
			if err := o.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("register canary metrics: %w", err)
			}
		}
	}
	return c, nil
}

// canaryLagLogSize is how many canary measurements Lags keeps: over an hour at one a second.
const canaryLagLogSize = 4096

// Lags is the log of the canaries' measured lags (the samples of
// smartfeed_replication_canary_seconds, exact).
func (c *Canary) Lags() *LagLog { return c.lags }

// Staleness is how far the standby is known to be behind: the age of the oldest canary not yet
// seen, or the last canary's lag when none is outstanding. While the primary takes no canary
// writes the age stops at the first failed write: the standby can miss nothing written after.
func (c *Canary) Staleness() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.staleness()
}

func (c *Canary) staleness() time.Duration {
	if c.inflight.IsZero() {
		return c.lastLag
	}
	end := time.Now()
	if !c.failSince.IsZero() {
		end = c.failSince // the primary has taken no write since: the standby misses no more
	}
	return max(c.lastLag, end.Sub(c.inflight))
}

// Lag is the exported replication lag: Staleness while canaries make their round trips; after
// a canary write or standby read failed, at least the time since the newest canary seen on the
// standby was written (since the canary started, when none was seen), until a round trip
// succeeds again.
func (c *Canary) Lag() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	lag := c.staleness()
	if c.failing {
		since := c.seen
		if since.IsZero() {
			since = c.started
		}
		lag = max(lag, time.Since(since))
	}
	return lag
}

// Run writes and watches canaries until ctx is done; it returns ctx's error.
func (c *Canary) Run(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.once(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-c.wake:
		}
	}
}

// Flush waits until a canary written after the call is readable on the standby: HBase ships a
// region server's WAL in order, so every write the canary's server took before it is there too.
// It needs Run to be running.
func (c *Canary) Flush(ctx context.Context) error {
	start := time.Now()
	for {
		c.mu.Lock()
		ok := !c.seen.Before(start)
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case c.wake <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("canary flush: %w", ctx.Err())
		case <-time.After(c.poll):
		}
	}
}

// once writes one canary and watches, until the next interval is due, for the oldest canary
// not yet seen on the standby (a newer one seen covers it: HBase ships a region's edits in
// order). A canary is written every round, also while an older one is outstanding, so that a
// primary that stops taking writes is noticed.
func (c *Canary) once(ctx context.Context) {
	now := time.Now()
	v := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))
	wctx, cancel := context.WithTimeout(ctx, c.interval)
	err := c.primary.Apply(wctx, []zen.Mutation{{Key: canaryKey, Value: v}})
	cancel()
	c.mu.Lock()
	if err != nil {
		// A primary that takes no writes makes the standby no staler: Staleness stops
		// counting at the first failure. No round trip vouches for it any more: Lag grows.
		if c.failSince.IsZero() {
			c.failSince = now
		}
		c.failing = true
	} else {
		c.failSince = time.Time{}
		if c.inflight.IsZero() {
			c.inflight = now
		}
	}
	pending := c.inflight
	c.mu.Unlock()
	if err != nil {
		c.errs.WithLabelValues("primary").Inc()
		c.log.Debug("canary write", zap.Error(err))
	}
	if pending.IsZero() {
		return
	}
	deadline := time.Now().Add(c.interval - c.poll)
	for {
		rctx, cancel := context.WithTimeout(ctx, c.interval)
		v, err := c.standby.Get(rctx, canaryKey)
		cancel()
		seenAt := time.Now()
		switch {
		case err == nil && len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= pending.UnixNano():
			written := time.Unix(0, int64(binary.BigEndian.Uint64(v)))
			c.mu.Lock()
			c.lastLag, c.inflight, c.seen, c.failing = seenAt.Sub(pending), time.Time{}, written, false
			c.mu.Unlock()
			c.hist.Observe(seenAt.Sub(pending).Seconds())
			c.lags.add(seenAt.Sub(pending))
			return
		case err != nil && !errors.Is(err, zen.ErrNotFound):
			c.mu.Lock()
			c.failing = true
			c.mu.Unlock()
			c.errs.WithLabelValues("standby").Inc()
			c.log.Debug("canary read", zap.Error(err))
		}
		if seenAt.After(deadline) || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.poll):
		}
	}
}
