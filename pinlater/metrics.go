package pinlater

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the per-task counters shared by Client and Server. A client and a server given the
// same registerer share one set of collectors.
type metrics struct {
	enqueued   *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	processed  *prometheus.CounterVec
	failed     *prometheus.CounterVec
	retried    *prometheus.CounterVec
	archived   *prometheus.CounterVec
	deferred   *prometheus.CounterVec
	panics     *prometheus.CounterVec
	orphaned   *prometheus.CounterVec
	reclaimed  *prometheus.CounterVec // by queue only: the reclaimer does not decode the task
	duration   *prometheus.HistogramVec
	wait       *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	l := []string{"queue", "type"}
	counter := func(name, help string) (*prometheus.CounterVec, error) {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pinlater", Name: name, Help: help}, l)
		return register(reg, c)
	}
	m := &metrics{}
	var err error
	for _, c := range []struct {
		dst        **prometheus.CounterVec
		name, help string
	}{
		{&m.enqueued, "tasks_enqueued_total", "Tasks enqueued."},
		{&m.duplicates, "tasks_duplicate_total", "Enqueues dropped because a task with the same ID exists."},
		{&m.rejected, "tasks_rejected_total", "Enqueues refused because the queue is draining."},
		{&m.processed, "tasks_processed_total", "Task runs that succeeded."},
		{&m.failed, "tasks_failed_total", "Task runs that failed (retried or archived)."},
		{&m.retried, "tasks_retried_total", "Failed runs that will be retried."},
		{&m.archived, "tasks_archived_total", "Failed runs that sent the task to the dead (archived) set."},
		{&m.deferred, "tasks_rate_limited_total", "Runs put off by the queue's rate limit."},
		{&m.panics, "tasks_panics_total", "Handler panics recovered."},
		{&m.orphaned, "tasks_orphaned_total", "Runs whose worker died mid-task (lease expired); the task runs again."},
	} {
		if *c.dst, err = counter(c.name, c.help); err != nil {
			return nil, err
		}
	}
	m.reclaimed, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pinlater", Name: "tasks_reclaimed_total",
		Help: "Tasks put back in their queue because their lease had ended with no live worker holding them (reclaim.go)."}, []string{"queue"}))
	if err != nil {
		return nil, err
	}
	m.duration, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "pinlater", Name: "task_duration_seconds", Help: "Handler run time.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, l))
	if err != nil {
		return nil, err
	}
	m.wait, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "pinlater", Name: "task_queue_latency_seconds", Help: "Time from enqueue (or due time) to the start of a run.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
	}, l))
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
