package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeRepl hands out its measurements in steps: each call to ReplicationLags first makes the
// next step's measurements visible, as if they had been taken since the last call.
type fakeRepl struct {
	info  ReplicationInfo
	steps [][]time.Duration
	taken []time.Duration
}

func (f *fakeRepl) ReplicationLags(from uint64) (ReplicationInfo, []time.Duration, uint64) {
	if len(f.steps) > 0 {
		f.taken, f.steps = append(f.taken, f.steps[0]...), f.steps[1:]
	}
	from = min(from, uint64(len(f.taken)))
	return f.info, append([]time.Duration(nil), f.taken[from:]...), uint64(len(f.taken))
}

// replSystem is a System (methods unused here) that is also a Replication.
type replSystem struct {
	System
	*fakeRepl
}

func msd(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestReplicationRecorderCutsPhases(t *testing.T) {
	info := ReplicationInfo{Mechanism: "hbase", Measured: "canary"}
	for _, tc := range []struct {
		name   string
		steps  [][]time.Duration // measurements appearing before each call: begin, end, begin, end...
		phases []string
		want   *ReplicationResult
	}{{
		name:   "measurements before a phase begins are left out",
		steps:  [][]time.Duration{msd(900, 800), msd(100, 300, 200), msd(5000), msd(400)},
		phases: []string{"fanout", "serving"},
		want: &ReplicationResult{ReplicationInfo: info, Phases: []ReplicationPhase{
			{Phase: "fanout", Lag: Summary{N: 3, P50: 200, P99: 300, P999: 300, Max: 300, Mean: 200}},
			{Phase: "serving", Lag: Summary{N: 1, P50: 400, P99: 400, P999: 400, Max: 400, Mean: 400}},
		}, UnderLoad: Summary{N: 4, P50: 200, P99: 400, P999: 400, Max: 400, Mean: 250}},
	}, {
		name:   "a phase without a measurement",
		steps:  [][]time.Duration{nil, nil, nil, msd(150)},
		phases: []string{"fanout", "serving"},
		want: &ReplicationResult{ReplicationInfo: info, Phases: []ReplicationPhase{
			{Phase: "fanout"},
			{Phase: "serving", Lag: Summary{N: 1, P50: 150, P99: 150, P999: 150, Max: 150, Mean: 150}},
		}, UnderLoad: Summary{N: 1, P50: 150, P99: 150, P999: 150, Max: 150, Mean: 150}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newReplRecorder(replSystem{fakeRepl: &fakeRepl{info: info, steps: tc.steps}})
			for _, p := range tc.phases {
				rec.begin()
				rec.end(p)
			}
			got := rec.result()
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(ReplicationPhase{}, "Seconds")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// A System without a replicated standby: no recorder, no section.
	var plain struct{ System }
	rec := newReplRecorder(plain)
	rec.begin()
	rec.end("fanout")
	if got := rec.result(); got != nil {
		t.Errorf("result without a Replication = %+v, want nil", got)
	}
}

func TestReplicationReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *ReplicationResult
		want string
	}{
		{"no standby", nil, ""},
		{"hbase", &ReplicationResult{
			ReplicationInfo: ReplicationInfo{Mechanism: "hbase", Measured: "a canary row"},
			Phases: []ReplicationPhase{
				{Phase: "fanout", Seconds: 21.4, Lag: Summary{N: 20, P50: 180.4, P99: 310, Max: 312}},
				{Phase: "serving", Seconds: 10, Lag: Summary{N: 9, P50: 240, P99: 650.5, Max: 650.5}},
			},
			UnderLoad: Summary{N: 29, P50: 200, P99: 650.5, Max: 650.5}},
			`## Replication to the standby

The standby's feed table is fed by HBase's own replication (the primary cluster ships its write-ahead log to the standby cluster). One measurement: a canary row.

| phase (write load) | seconds | measurements | lag p50 | p99 | max |
|---|---|---|---|---|---|
| fanout | 21 | 20 | 180 ms | 310 ms | 312 ms |
| serving | 10 | 9 | 240 ms | 650 ms | 650 ms |
| **all of them** | | 29 | **200 ms** | **650 ms** | 650 ms |

`},
		{"change log, sub-millisecond", &ReplicationResult{
			ReplicationInfo: ReplicationInfo{Mechanism: "app", Measured: "one write"},
			Phases: []ReplicationPhase{{Phase: "fanout", Seconds: 20},
				{Phase: "serving", Seconds: 10, Lag: Summary{N: 3, P50: 0.42, P99: 2.5, Max: 12}}},
			UnderLoad: Summary{N: 3, P50: 0.42, P99: 2.5, Max: 12}},
			`## Replication to the standby

The standby's feed table is fed by feedsvc's change-log replicator. One measurement: one write.

| phase (write load) | seconds | measurements | lag p50 | p99 | max |
|---|---|---|---|---|---|
| fanout | 20 | 0 | – | – | – |
| serving | 10 | 3 | 0.42 ms | 2.50 ms | 12 ms |
| **all of them** | | 3 | **0.42 ms** | **2.50 ms** | 12 ms |

`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, replicationMarkdown(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			full := Markdown(&Results{Replication: tc.in, Ratios: map[string]float64{}}, "")
			if has := strings.Contains(full, "## Replication to the standby"); has != (tc.in != nil) {
				t.Errorf("report has the replication section: %v, want %v", has, tc.in != nil)
			}
		})
	}
}

// results.json carries "replication" when measured and leaves it out otherwise.
func TestReplicationInResultsJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *ReplicationResult
		want map[string]any
	}{
		{"absent", nil, nil},
		{"hbase", &ReplicationResult{ReplicationInfo: ReplicationInfo{Mechanism: "hbase", Measured: "canary"},
			Phases:    []ReplicationPhase{{Phase: "fanout", Seconds: 2, Lag: Summary{N: 1, P50: 100, P99: 100, P999: 100, Max: 100, Mean: 100}}},
			UnderLoad: Summary{N: 1, P50: 100, P99: 100, P999: 100, Max: 100, Mean: 100}},
			map[string]any{"mechanism": "hbase", "measured_by": "canary",
				"phases": []any{map[string]any{"phase": "fanout", "seconds": 2.0, "lag": map[string]any{
					"n": 1.0, "p50_ms": 100.0, "p99_ms": 100.0, "p999_ms": 100.0, "max_ms": 100.0, "mean_ms": 100.0}}},
				"under_write_load": map[string]any{"n": 1.0, "p50_ms": 100.0, "p99_ms": 100.0, "p999_ms": 100.0, "max_ms": 100.0, "mean_ms": 100.0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(&Results{Replication: tc.in})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Replication map[string]any `json:"replication"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Replication); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
