package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrStandbyStale is returned by a StalenessGate's reads while the standby lags the primary by
// more than the bound: its answer would be too old to serve.
var ErrStandbyStale = errors.New("standby too far behind the primary")

// Lagger reports how far a standby is behind its primary (the Replicator's change log or the
// HBase-replication Canary).
type Lagger interface {
	Staleness() time.Duration
}

// StalenessGate wraps the standby's feed table: reads fail with ErrStandbyStale while the
// replication lag exceeds the bound, so a hedged read keeps waiting on the primary (or fails)
// rather than serve a feed older than the operator allows. Writes pass through. The bound is
// live-tunable (SetMaxStaleness, the knobs file's "standby" section); 0 means unbounded.
type StalenessGate struct {
	zen.Table
	lag     Lagger
	max     atomic.Int64 // time.Duration
	refused prometheus.Counter
	nrefuse atomic.Uint64 // the same count, for Status
}

// NewStalenessGate returns a gate over standby with bound maxStaleness (0: unbounded). reg, if
// not nil, receives smartfeed_standby_stale_refusals_total.
func NewStalenessGate(standby zen.Table, lag Lagger, maxStaleness time.Duration, reg prometheus.Registerer) (*StalenessGate, error) {
	g := &StalenessGate{Table: standby, lag: lag, refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smartfeed_standby_stale_refusals_total",
		Help: "Standby reads refused because replication lag exceeded the staleness bound."})}
	if err := g.SetMaxStaleness(maxStaleness); err != nil {
		return nil, err
	}
	if reg != nil {
		if err := reg.Register(g.refused); err != nil {
			return nil, fmt.Errorf("register gate metrics: %w", err)
		}
	}
	return g, nil
}

// SetMaxStaleness sets the bound (0: unbounded).
func (g *StalenessGate) SetMaxStaleness(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("max staleness %v: must not be negative", d)
	}
	g.max.Store(int64(d))
	return nil
}

// MaxStaleness returns the bound (0: unbounded).
func (g *StalenessGate) MaxStaleness() time.Duration { return time.Duration(g.max.Load()) }

func (g *StalenessGate) check() error {
	m := time.Duration(g.max.Load())
	if m == 0 {
		return nil
	}
	if lag := g.lag.Staleness(); lag > m {
		g.refused.Inc()
		g.nrefuse.Add(1)
		return fmt.Errorf("%w: lag %v over the bound %v", ErrStandbyStale, lag.Round(time.Millisecond), m)
	}
	return nil
}

// Get reads the standby unless it is too stale.
func (g *StalenessGate) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return g.Table.Get(ctx, key)
}

// Scan reads the standby unless it is too stale.
func (g *StalenessGate) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return g.Table.Scan(ctx, o)
}

// GetMany reads the standby unless it is too stale, in one call where it supports it.
func (g *StalenessGate) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return zen.GetMany(ctx, g.Table, keys)
}

// ScanMany reads the standby unless it is too stale, in one call where it supports it.
func (g *StalenessGate) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return zen.ScanMany(ctx, g.Table, opts)
}

// CheckAndSetMany writes through to the standby, in one call where it supports it.
func (g *StalenessGate) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	return zen.CheckAndSetMany(ctx, g.Table, conds)
}

// CheckAndSetWith writes through to the standby; it fails with errors.ErrUnsupported, writing
// nothing, when the standby cannot carry extra rows (zen.Carrier).
func (g *StalenessGate) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	c, ok := g.Table.(zen.Carrier)
	if !ok {
		return false, fmt.Errorf("staleness gate: check-and-set with extra rows: %w", errors.ErrUnsupported)
	}
	return c.CheckAndSetWith(ctx, key, expected, value, extra)
}

// IncrementWith writes through to the standby; it fails with errors.ErrUnsupported, writing
// nothing, when the standby cannot carry extra rows (zen.Carrier).
func (g *StalenessGate) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	c, ok := g.Table.(zen.Carrier)
	if !ok {
		return 0, fmt.Errorf("staleness gate: increment with extra rows: %w", errors.ErrUnsupported)
	}
	return c.IncrementWith(ctx, key, delta, extra)
}

// ReplicationStatus is the standby's replication as the failover view shows it.
type ReplicationStatus struct {
	// Mechanism is "hbase" (the Canary measures HBase's own replication), "app" (the change-log
	// Replicator) or empty for another Lagger.
	Mechanism    string
	Lag          time.Duration // the Lagger's staleness now
	MaxStaleness time.Duration // the bound, 0 unbounded
	Refused      bool          // reads are refused now: Lag over a bound
	Refusals     uint64        // reads refused since the gate was made
	Recent       []time.Duration
}

// recentLags is how many of the latest lag measurements Status returns.
const recentLags = 300

// Status reports the lag, the bound and whether reads are refused now, with the latest lag
// measurements when the Lagger keeps them (Canary, Replicator).
func (g *StalenessGate) Status() ReplicationStatus {
	st := ReplicationStatus{Lag: g.lag.Staleness(), MaxStaleness: g.MaxStaleness(), Refusals: g.nrefuse.Load()}
	st.Refused = st.MaxStaleness > 0 && st.Lag > st.MaxStaleness
	switch g.lag.(type) {
	case *Canary:
		st.Mechanism = "hbase"
	case *Replicator:
		st.Mechanism = "app"
	}
	if l, ok := g.lag.(interface{ Lags() *LagLog }); ok {
		st.Recent = l.Lags().Latest(recentLags)
	}
	return st
}
