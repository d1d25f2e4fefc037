package bench

import (
	"fmt"
	"strings"
	"time"
)

// Replication is implemented by a System whose materialized feed has a standby fed by
// replication; the harness then reports the lag measured during the phases under write load.
type Replication interface {
	// ReplicationLags returns how the standby is fed (Mechanism, Measured) and the lag
	// measurements numbered from `from` on, oldest first, with the number of the next one.
	ReplicationLags(from uint64) (info ReplicationInfo, lags []time.Duration, next uint64)
}

// ReplicationInfo says how the standby is fed and how its lag is measured.
type ReplicationInfo struct {
	// Mechanism is "hbase" (HBase's own replication to the standby cluster) or "app" (feedsvc's
	// change-log replicator).
	Mechanism string `json:"mechanism"`
	// Measured says what one measurement is, e.g. "canary row written every 1s on the primary,
	// polled every 10ms on the standby".
	Measured string `json:"measured_by"`
}

// ReplicationResult is results.json's "replication": the standby's lag during each phase under
// write load, and over all of them.
type ReplicationResult struct {
	ReplicationInfo
	Phases    []ReplicationPhase `json:"phases"`
	UnderLoad Summary            `json:"under_write_load"`
}

// ReplicationPhase is the lag measured during one phase.
type ReplicationPhase struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	Lag     Summary `json:"lag"`
}

// replRecorder cuts a Replication's measurements into phases. Its methods do nothing on a nil
// recorder (a System without a replicated standby).
type replRecorder struct {
	r      Replication
	info   ReplicationInfo
	next   uint64
	start  time.Time
	all    []time.Duration
	phases []ReplicationPhase
}

func newReplRecorder(sys System) *replRecorder {
	r, ok := sys.(Replication)
	if !ok {
		return nil
	}
	return &replRecorder{r: r}
}

// begin starts a phase: what was measured before is left out.
func (r *replRecorder) begin() {
	if r == nil {
		return
	}
	r.info, _, r.next = r.r.ReplicationLags(r.next)
	r.start = time.Now()
}

// end closes the phase begun last under name.
func (r *replRecorder) end(name string) {
	if r == nil {
		return
	}
	var lags []time.Duration
	r.info, lags, r.next = r.r.ReplicationLags(r.next)
	r.all = append(r.all, lags...)
	r.phases = append(r.phases, ReplicationPhase{Phase: name, Seconds: time.Since(r.start).Seconds(), Lag: Summarize(lags)})
}

// result is nil on a nil recorder.
func (r *replRecorder) result() *ReplicationResult {
	if r == nil {
		return nil
	}
	return &ReplicationResult{ReplicationInfo: r.info, Phases: r.phases, UnderLoad: Summarize(r.all)}
}

// replicationMarkdown is the report's section on the standby's lag; empty without one.
func replicationMarkdown(r *ReplicationResult) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	how := map[string]string{
		"hbase": "HBase's own replication (the primary cluster ships its write-ahead log to the standby cluster)",
		"app":   "feedsvc's change-log replicator",
	}[r.Mechanism]
	if how == "" {
		how = r.Mechanism
	}
	p("## Replication to the standby")
	p("")
	p("The standby's feed table is fed by %s. One measurement: %s.", how, r.Measured)
	p("")
	p("| phase (write load) | seconds | measurements | lag p50 | p99 | max |")
	p("|---|---|---|---|---|---|")
	for _, ph := range r.Phases {
		if ph.Lag.N == 0 {
			p("| %s | %.0f | 0 | – | – | – |", ph.Phase, ph.Seconds)
			continue
		}
		p("| %s | %.0f | %d | %s | %s | %s |", ph.Phase, ph.Seconds, ph.Lag.N, lagMs(ph.Lag.P50), lagMs(ph.Lag.P99), lagMs(ph.Lag.Max))
	}
	u := r.UnderLoad
	p("| **all of them** | | %d | **%s** | **%s** | %s |", u.N, lagMs(u.P50), lagMs(u.P99), lagMs(u.Max))
	p("")
	return b.String()
}

// lagMs prints a lag in ms, with decimals below 10 ms (the change log's lag is sub-millisecond).
func lagMs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}
