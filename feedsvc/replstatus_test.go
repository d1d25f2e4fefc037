package feedsvc

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

type fixedLag time.Duration

func (f fixedLag) Staleness() time.Duration { return time.Duration(f) }

// The failover view's replication: lag, bound, refused or not, and the latest measurements.
func TestReplicationStatus(t *testing.T) {
	ctx := t.Context()
	p, _ := zenmem.New().Table(ctx, "feed")
	s, _ := zenmem.New().Table(ctx, "feed")
	canary := func(lag time.Duration, measured ...time.Duration) Lagger {
		c, err := NewCanary(p, s, CanaryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.lastLag = lag
		c.lags.add(measured...)
		return c
	}
	repl := func(measured ...time.Duration) Lagger {
		r, err := NewReplicator(p, s, ReplicatorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.lags.add(measured...)
		return r
	}
	many := make([]time.Duration, 400) // more than the 300 shown: the oldest 100 (1 s each) are left out
	for i := range many {
		many[i] = time.Second
		if i >= 100 {
			many[i] = time.Duration(i-99) * time.Millisecond // 1..300 ms
		}
	}
	for _, tc := range []struct {
		name  string
		lag   Lagger
		bound time.Duration
		reads int // standby reads tried before the status is taken
		want  *feedv1.Replication
	}{
		{"hbase, healthy", canary(180*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond), 30 * time.Second, 1,
			&feedv1.Replication{Mechanism: "hbase", LagMs: 180, MaxStalenessMs: 30000, RecentCount: 3, RecentP50Ms: 200, RecentP99Ms: 300, RecentMaxMs: 300}},
		{"hbase, over the bound: refused", canary(2*time.Second, 2*time.Second), time.Second, 2,
			&feedv1.Replication{Mechanism: "hbase", LagMs: 2000, MaxStalenessMs: 1000, StandbyRefused: true, StaleRefusals: 2,
				RecentCount: 1, RecentP50Ms: 2000, RecentP99Ms: 2000, RecentMaxMs: 2000}},
		{"unbounded: never refused", canary(time.Minute), 0, 1,
			&feedv1.Replication{Mechanism: "hbase", LagMs: 60000}},
		{"change log, the latest 300 only", repl(many...), time.Second, 0,
			&feedv1.Replication{Mechanism: "app", MaxStalenessMs: 1000, RecentCount: 300, RecentP50Ms: 150, RecentP99Ms: 297, RecentMaxMs: 300}},
		{"another lagger", fixedLag(5 * time.Millisecond), time.Second, 0,
			&feedv1.Replication{LagMs: 5, MaxStalenessMs: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate, err := NewStalenessGate(s, tc.lag, tc.bound, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range tc.reads {
				_, _ = gate.Get(ctx, []byte("k"))
			}
			svc, err := New(Deps{Primary: p, Standby: gate, StandbyGate: gate, Generator: newFakeGen(1), Enqueuer: &fakeQueue{}}, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			got, err := NewAdminServer(svc, nil, nil).GetReplication(ctx, &feedv1.GetReplicationRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("GetReplication (-want +got):\n%s", diff)
			}
		})
	}
	svc, err := New(Deps{Primary: p, Standby: s, Generator: newFakeGen(1), Enqueuer: &fakeQueue{}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdminServer(svc, nil, nil).GetReplication(ctx, &feedv1.GetReplicationRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("without a gate: %v, want FailedPrecondition", err)
	}
}
