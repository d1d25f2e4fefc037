package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultIdleCounters are the server's counters of the background work a GetFeed leaves
// behind: its next chunk's preparation (and its retries), and its chunk's materialization job.
// While either moves, the server is still doing work that the window that started it did not
// pay for.
var DefaultIdleCounters = []string{"smartfeed_feed_prepared_total", "smartfeed_feed_materialized_total"}

// MetricsIdle waits for a quiet server by polling its Prometheus /metrics: the server is idle
// when every gauge of Gauges is 0 (work in flight, queue depths) and no counter of Counters has
// moved for Quiet.
type MetricsIdle struct {
	URL      string
	Counters []string
	Gauges   []string
	// Quiet is how long the counters must stand still (longer than the delay after which the
	// server starts a page's background work).
	Quiet time.Duration
	// Poll is the time between two scrapes; Max the longest wait before giving up.
	Poll, Max time.Duration
	Client    *http.Client
}

// Wait returns once the server is idle, or an error when it was not after Max (or could not
// be scraped).
func (m MetricsIdle) Wait(ctx context.Context) error {
	client := m.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	poll := m.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	start := time.Now()
	var last []float64
	var since time.Time
	for {
		counters, busy, err := m.scrape(ctx, client)
		if err != nil {
			return err
		}
		now := time.Now()
		// The counters must have been read twice alike: one scrape says nothing of their motion.
		still := last != nil && slices.Equal(counters, last)
		if busy > 0 || !still {
			since = now
		}
		last = counters
		if busy == 0 && still && now.Sub(since) >= m.Quiet {
			return nil
		}
		if m.Max > 0 && now.Sub(start) >= m.Max {
			return fmt.Errorf("not idle after %v (work in flight %v, counters still moving)", m.Max, busy)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// scrape reads the counters' sums (in Counters' order) and the gauges' sum.
func (m MetricsIdle) scrape(ctx context.Context, client *http.Client) ([]float64, float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("idle: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("idle: scraping the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, 0, fmt.Errorf("idle: scraping the server's metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("idle: reading the server's metrics: %w", err)
	}
	counters := make([]float64, len(m.Counters))
	for i, name := range m.Counters {
		counters[i] = familySum(fams[name])
	}
	var busy float64
	for _, name := range m.Gauges {
		busy += familySum(fams[name])
	}
	return counters, busy, nil
}

// familySum is the sum of a family's series: counters' and gauges' values, histograms' and
// summaries' sample counts.
func familySum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var s float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			s += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			s += float64(m.GetSummary().GetSampleCount())
		}
	}
	return s
}
