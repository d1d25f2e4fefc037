package hedge

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	calls        prometheus.Counter
	latency      *prometheus.HistogramVec
	issued       *prometheus.CounterVec
	won          prometheus.Counter
	exhausted    prometheus.Counter
	warmups      prometheus.Counter
	warmupErrors prometheus.Counter
	cutoff       prometheus.Gauge
	policy       *prometheus.GaugeVec
	brState      prometheus.Gauge
	brChanges    *prometheus.CounterVec
	routed       *prometheus.CounterVec
	// excused counts the primary reads judged on their time that the breaker did not count,
	// because the process was saturated, by kind (late, beaten, timeout).
	excused *prometheus.CounterVec

	// The children every call touches, looked up once: a label lookup hashes the values and
	// takes the vector's lock on each call.
	latencyOf [2]prometheus.Observer // by Store
	routedAs  [3]prometheus.Counter  // by route
}

// newMetrics makes the Hedger's metrics and registers them on reg (if not nil), with a gauge of
// the scheduling latency sched reports.
func newMetrics(reg prometheus.Registerer, sched func() time.Duration) (*metrics, error) {
	m := &metrics{
		excused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_hedge_breaker_excused_total",
			Help: "Primary reads judged on their time that the circuit breaker did not count because this process was saturated (its goroutine scheduling latency was at least a quarter of the hedge policy's max: short of processors, not the store slow), by verdict: late (answered after max), beaten (by the standby), timeout (past primary_timeout)."}, []string{"verdict"}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_hedge_calls_total", Help: "Hedged reads started."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    ReadLatencyMetric,
			Help:    "Latency of each read, by store (primary, standby), warm-up reads included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"store"}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_hedge_issued_total",
			Help: "Reads sent to the standby, by reason (error, cutoff, breaker: a call past its cutoff whose hedge the budget refused, once the breaker found the primary hung)."}, []string{"reason"}),
		won: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_hedge_won_total", Help: "Calls answered by the standby."}),
		exhausted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_hedge_budget_exhausted_total",
			Help: "Cutoffs passed with no budget left to hedge."}),
		warmups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_hedge_warmup_reads_total", Help: "Warm-up reads sent to the standby."}),
		warmupErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_hedge_warmup_errors_total", Help: "Warm-up reads that failed."}),
		cutoff: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "smartfeed_hedge_cutoff_seconds", Help: "The hedging cutoff last used."}),
		policy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "smartfeed_hedge_policy",
			Help: "Current hedging knobs: mode (0 off, 1 fixed, 2 percentile), delay_seconds, percentile, min_seconds, max_seconds, budget, budget_burst, warmup, min_samples."},
			[]string{"knob"}),
		brState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "smartfeed_hedge_breaker_state", Help: "Circuit breaker on the primary: 0 closed, 1 open, 2 half-open."}),
		brChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_hedge_breaker_transitions_total", Help: "Breaker state changes, by new state."}, []string{"to"}),
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_hedge_routed_total",
			Help: "Calls by the breaker's route: primary (closed), probe (half-open), standby (open: failover, no budget)."},
			[]string{"route"}),
	}
	for _, st := range []Store{Primary, Standby} {
		m.latencyOf[st] = m.latency.WithLabelValues(st.String())
	}
	for rt, name := range [...]string{routePrimary: "primary", routeProbe: "probe", routeStandby: "standby"} {
		m.routedAs[rt] = m.routed.WithLabelValues(name)
	}
	if reg != nil {
		schedGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smartfeed_hedge_sched_latency_seconds",
			Help: "This process's goroutine scheduling latency as the circuit breaker sees it (p99 over the last 0.5-1s): at a quarter of the hedge policy's max or more the process is saturated and the breaker counts no verdict on a read's time."},
			func() float64 { return sched().Seconds() })
		for _, c := range []prometheus.Collector{schedGauge, m.calls, m.latency, m.issued, m.won, m.exhausted,
			m.warmups, m.warmupErrors, m.cutoff, m.policy, m.brState, m.brChanges, m.routed, m.excused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register hedge metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) setPolicy(p Policy) {
	mode := map[Mode]float64{ModeOff: 0, ModeFixed: 1, ModePercentile: 2}[p.Mode]
	for k, v := range map[string]float64{
		"mode": mode, "delay_seconds": p.Delay.Seconds(), "percentile": p.Percentile,
		"min_seconds": p.Min.Seconds(), "max_seconds": p.Max.Seconds(), "budget": p.Budget,
		"budget_burst": p.BudgetBurst, "warmup": p.Warmup, "min_samples": float64(p.MinSamples),
		"primary_timeout_seconds": p.PrimaryTimeout.Seconds(), "breaker_failures": float64(p.BreakerFailures),
		"breaker_slow_rate": p.BreakerSlowRate, "breaker_interval_seconds": p.BreakerInterval.Seconds(), "breaker_window": float64(p.BreakerWindow),
		"breaker_open_for_seconds": p.BreakerOpenFor.Seconds(), "breaker_probes": float64(p.BreakerProbes),
	} {
		m.policy.WithLabelValues(k).Set(v)
	}
}
