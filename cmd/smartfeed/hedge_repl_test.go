package main

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

func TestPrintReplication(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *feedv1.Replication
		want string
	}{
		{"hbase, healthy", &feedv1.Replication{Mechanism: "hbase", LagMs: 182.4, MaxStalenessMs: 30000, StaleRefusals: 0,
			RecentCount: 120, RecentP50Ms: 190, RecentP99Ms: 410, RecentMaxMs: 512},
			`standby fed by    HBase replication (canary row every 1 s)
replication lag   182 ms
staleness bound   30s
standby reads     served
refused as stale  0 since start
recent lag        p50 190 ms, p99 410 ms, max 512 ms (last 120 measurements)
`},
		{"hbase, stale: refused", &feedv1.Replication{Mechanism: "hbase", LagMs: 42150, MaxStalenessMs: 30000, StandbyRefused: true,
			StaleRefusals: 17, RecentCount: 3, RecentP50Ms: 250, RecentP99Ms: 2200, RecentMaxMs: 2200},
			`standby fed by    HBase replication (canary row every 1 s)
replication lag   42.2s
staleness bound   30s
standby reads     REFUSED: lag over the bound, hedges and failover wait for the primary
refused as stale  17 since start
recent lag        p50 250 ms, p99 2200 ms, max 2200 ms (last 3 measurements)
`},
		{"change log, unbounded, nothing measured", &feedv1.Replication{Mechanism: "app", LagMs: 0.4},
			`standby fed by    change-log replicator
replication lag   0.40 ms
staleness bound   none (standby reads never refused)
standby reads     served
refused as stale  0 since start
recent lag        no measurement yet
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printReplication(&b, tc.in)
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
