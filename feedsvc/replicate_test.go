package feedsvc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += value(m)
		}
		return sum
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func newRepl(t *testing.T, o ReplicatorOptions) (*Replicator, zen.Table, *faults.Table, *prometheus.Registry) {
	t.Helper()
	p, _ := zenmem.New().Table(t.Context(), "feed")
	s, _ := zenmem.New().Table(t.Context(), "feed")
	st := faults.Wrap(s, 1)
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	r, err := NewReplicator(p, st, o)
	if err != nil {
		t.Fatal(err)
	}
	return r, p, st, reg
}

func run(t *testing.T, r *Replicator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func flush(t *testing.T, r *Replicator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every kind of write reaches the standby, in order, with the lag measured.
func TestReplicatorCopiesWrites(t *testing.T) {
	r, p, s, reg := newRepl(t, ReplicatorOptions{})
	run(t, r)
	ctx := t.Context()
	for i := range 50 {
		k := fmt.Appendf(nil, "k%02d", i%10) // rewrites of one key must land in order
		if err := r.Apply(ctx, []zen.Mutation{{Key: k, Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CheckAndSet(ctx, []byte("cas"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.CheckAndSet(ctx, []byte("cas"), nil, []byte("y")); ok {
		t.Fatal("second CheckAndSet wrote")
	}
	if _, err := r.CheckAndSet(ctx, []byte("k00"), []byte("v40"), nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := r.Increment(ctx, []byte("n"), 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Apply(ctx, []zen.Mutation{{Key: []byte("k01"), Delete: true}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	flush(t, r)
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Errorf("flush took %v, want well under a few hundred ms", took)
	}
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby differs from primary (-primary +standby):\n%s", diff)
	}
	if n := metricValue(t, reg, "smartfeed_feed_replication_lag_seconds"); n != 56 {
		t.Errorf("lag samples = %v, want one per replicated write (56)", n)
	}
	if v := r.Staleness(); v != 0 {
		t.Errorf("staleness after flush = %v, want 0", v)
	}
}

// A standby outage holds the writes, shows as staleness, and they land in order once it ends.
func TestReplicatorSurvivesStandbyOutage(t *testing.T) {
	r, p, s, reg := newRepl(t, ReplicatorOptions{})
	run(t, r)
	if err := s.Set(faults.Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := r.Apply(t.Context(), []zen.Mutation{{Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatalf("a standby outage failed a primary write: %v", err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if st := r.Staleness(); st < 10*time.Millisecond {
		t.Errorf("staleness during the outage = %v", st)
	}
	if g := metricValue(t, reg, "smartfeed_feed_replication_staleness_seconds"); g <= 0 {
		t.Errorf("exported staleness = %v", g)
	}
	if err := s.Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby after the outage (-primary +standby):\n%s", diff)
	}
	if n := metricValue(t, reg, "smartfeed_feed_replication_retries_total"); n == 0 {
		t.Error("no retries counted")
	}
}

// A full queue drops writes (counted) instead of blocking the primary; Resync repairs.
func TestReplicatorDropAndResync(t *testing.T) {
	r, p, s, reg := newRepl(t, ReplicatorOptions{QueueSize: 2})
	// Not running: the queue fills.
	u := userID(t, 1)
	for i := range 5 {
		if err := r.Apply(t.Context(), []zen.Mutation{{Key: itemKey(u, position{Seq: uint64(i + 1)}), Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := metricValue(t, reg, "smartfeed_feed_replication_dropped_total"); n != 3 {
		t.Errorf("dropped = %v, want 3", n)
	}
	// A stray standby row the primary lacks goes too.
	if err := s.Apply(t.Context(), []zen.Mutation{{Key: pinKey(u, pinID(9)), Value: []byte("stale")}}); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	flush(t, r)
	n, err := Resync(t.Context(), p, s, u)
	if err != nil || n != 4 {
		t.Errorf("Resync = %d, %v; want 4 rows changed", n, err)
	}
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby after resync (-primary +standby):\n%s", diff)
	}
}
