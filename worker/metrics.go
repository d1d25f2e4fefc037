package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	inserts  prometheus.Counter
	chunks   prometheus.Counter
	inline   prometheus.Counter
	resumed  prometheus.Counter
	rebuilds prometheus.Counter
	skipped  *prometheus.CounterVec
	tasks    *prometheus.CounterVec
	removed  *prometheus.CounterVec
	unknown  *prometheus.CounterVec
	delay    prometheus.Histogram
	laneWait prometheus.Histogram

	featureHits, featureMisses prometheus.Counter
	activeHits, activeMisses   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promauto.With(reg)
	m := &metrics{
		inserts: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_pool_inserts_total",
			Help: "Pool entries added or improved by the worker."}),
		chunks: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_chunks_enqueued_total",
			Help: "Fanout chunk tasks enqueued."}),
		inline: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_inline_lists_total",
			Help: "Receiver lists delivered inside their fanout task (at most Config.InlineReceivers receivers)."}),
		resumed: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_lists_resumed_total",
			Help: "Receiver lists a fanout task resumed at its checkpoint (a previous run died mid-list)."}),
		rebuilds: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_rebuilds_started_total",
			Help: "Pool rebuilds started for users returning after inactivity."}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_receivers_skipped_total",
			Help: "Receivers a fanout skipped, by reason (inactive, deleted)."}, []string{"reason"}),
		tasks: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_tasks_done_total",
			Help: "Worker tasks completed, by task type."}, []string{"type"}),
		removed: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_pool_removed_total",
			Help: "Pool entries removed by upkeep, by cause (unfollow, pin_delete)."}, []string{"cause"}),
		unknown: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_unknown_objects_total",
			Help: "Task runs that named an object this store never had (failed, then dead-lettered), by task type."}, []string{"type"}),
		delay: f.NewHistogram(prometheus.HistogramOpts{Name: FanoutDelayMetric,
			Help: "Time from a pin's created_ms to the end of each fanout task that delivered it: the fanout task " +
				"(its inline receiver lists) and each chunk task of a larger list. Its p99 is the fanout lag a follower sees.",
			Buckets: fanoutDelayBuckets}),
		laneWait: f.NewHistogram(prometheus.HistogramOpts{Name: "smartfeed_worker_lane_wait_seconds",
			Help:    "Time a fanout delivery waited for a background lane shared with the pages' background work (Options.Lanes; only in a process that also serves pages).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	features := f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_feature_cache_lookups_total",
		Help: "Receiver scoring features (affinity, interest follows) the fanout looked up in its cache, by result (hit, miss: read from the store)."},
		[]string{"result"})
	m.featureHits, m.featureMisses = features.WithLabelValues("hit"), features.WithLabelValues("miss")
	active := f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_active_cache_lookups_total",
		Help: "Receivers' last-active rows the fanout looked up in its cache (worker.active_ttl), by result (hit, miss: read from the store)."},
		[]string{"result"})
	m.activeHits, m.activeMisses = active.WithLabelValues("hit"), active.WithLabelValues("miss")
	return m, nil
}

// FanoutDelayMetric is the histogram of the fanout delay: from a pin's created_ms to the end of
// each fanout task that delivered it. Its p99 is the fanout lag a follower sees.
const FanoutDelayMetric = "smartfeed_worker_fanout_delay_seconds"

// fanoutDelayBuckets are the fanout delay histogram's bounds: 5 ms to about 11 minutes, each 1.5×
// the last, finer than doubling because the live line and dashboards read its p99.
var fanoutDelayBuckets = prometheus.ExponentialBuckets(0.005, 1.5, 30)

// observeDelay records the fanout delay of a pin created at createdMs, as of now; a created_ms in
// the future (another machine's clock) counts as no delay.
func (m *metrics) observeDelay(now time.Time, createdMs int64) {
	m.delay.Observe(max(0, float64(now.UnixMilli()-createdMs)/1000))
}
