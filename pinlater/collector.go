package pinlater

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CollectTimeout bounds the Redis time of one scrape of the queue collector: past it the scrape
// goes on without the queue series.
const CollectTimeout = time.Second

// Collector exports queue gauges (size by state, latency, paused, rate) for Prometheus, read from
// Redis at each scrape. It never fails a scrape: when Redis does not answer within
// CollectTimeout the queue series are left out of that scrape and
// smartfeed_metrics_collect_errors_total{collector="pinlater_queues"} is incremented, so the
// process's other series are still served during a Redis outage.
func (a *Admin) Collector() prometheus.Collector {
	return &queueCollector{a: a, timeout: CollectTimeout}
}

// queueCollector is the Prometheus collector Admin.Collector returns.
type queueCollector struct {
	a       *Admin
	timeout time.Duration
	errs    atomic.Uint64
	// reading is set while a read of the queues is under way; a read that outlived its scrape
	// keeps it set, so a Redis that hangs holds at most one reader.
	reading atomic.Bool
}

var (
	descSize    = prometheus.NewDesc("pinlater_queue_size", "Tasks in the queue by state.", []string{"queue", "state"}, nil)
	descLatency = prometheus.NewDesc("pinlater_queue_latency_seconds", "Age of the oldest pending task.", []string{"queue"}, nil)
	descPaused  = prometheus.NewDesc("pinlater_queue_paused", "1 if the queue is paused.", []string{"queue"}, nil)
	descRate    = prometheus.NewDesc("pinlater_queue_rate_limit", "Rate limit in jobs/s (-1 = none).", []string{"queue"}, nil)
	descErrors  = prometheus.NewDesc("smartfeed_metrics_collect_errors_total",
		"Scrapes that left out a collector's series because its source failed or did not answer in time.",
		nil, prometheus.Labels{"collector": "pinlater_queues"})
)

// Describe sends the queue gauges' and the error counter's descriptors.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSize
	ch <- descLatency
	ch <- descPaused
	ch <- descRate
	ch <- descErrors
}

// read returns the queues' stats, or an error when Redis fails or takes longer than the
// collector's timeout (the read then finishes in the background, its result dropped).
func (c *queueCollector) read() ([]QueueStats, error) {
	if !c.reading.CompareAndSwap(false, true) {
		return nil, errors.New("read queues: an earlier read is still waiting for Redis")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	type result struct {
		qs  []QueueStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer c.reading.Store(false)
		qs, err := c.a.Queues(ctx)
		done <- result{qs, err}
	}()
	select {
	case r := <-done:
		return r.qs, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("read queues: no answer from Redis within %v", c.timeout)
	}
}

// Collect reads the queues once and sends their gauges, and the scrape error count.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	qs, err := c.read()
	if err != nil {
		c.errs.Add(1)
	}
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.errs.Load()))
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, q := range qs {
		for _, s := range []struct {
			state string
			n     int
		}{{"pending", q.Pending}, {"active", q.Active}, {"scheduled", q.Scheduled}, {"retry", q.Retry}, {"dead", q.Dead}} {
			ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(s.n), q.Name, s.state)
		}
		ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, q.Latency.Seconds(), q.Name)
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, b(q.Paused), q.Name)
		ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, q.Rate, q.Name)
	}
}
