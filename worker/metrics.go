package worker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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

	featureHits, featureMisses prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		inserts: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_pool_inserts_total",
			Help: "Pool entries added or improved by the worker."}),
		chunks: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_chunks_enqueued_total",
			Help: "Fanout chunk tasks enqueued."}),
		inline: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_inline_lists_total",
			Help: "Receiver lists delivered inside their fanout task (at most Config.InlineReceivers receivers)."}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_fanout_lists_resumed_total",
			Help: "Receiver lists a fanout task resumed at its checkpoint (a previous run died mid-list)."}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_rebuilds_started_total",
			Help: "Pool rebuilds started for users returning after inactivity."}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_receivers_skipped_total",
			Help: "Receivers a fanout skipped, by reason (inactive, deleted)."}, []string{"reason"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_tasks_done_total",
			Help: "Worker tasks completed, by task type."}, []string{"type"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_pool_removed_total",
			Help: "Pool entries removed by upkeep, by cause (unfollow, pin_delete)."}, []string{"cause"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_unknown_objects_total",
			Help: "Task runs that named an object this store never had (failed, then dead-lettered), by task type."}, []string{"type"}),
	}
	features := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_worker_feature_cache_lookups_total",
		Help: "Receiver scoring features (affinity, interest follows) the fanout looked up in its cache, by result (hit, miss: read from the store)."},
		[]string{"result"})
	m.featureHits, m.featureMisses = features.WithLabelValues("hit"), features.WithLabelValues("miss")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.inserts, m.chunks, m.inline, m.resumed, m.rebuilds, m.skipped, m.tasks, m.removed, m.unknown, features} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register worker metrics: %w", err)
		}
	}
	return m, nil
}
