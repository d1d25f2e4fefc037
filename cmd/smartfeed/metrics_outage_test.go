package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
)

// scrape GETs the admin /metrics once and returns its status, its families by name and how long
// it took.
func scrape(t *testing.T, a *app) (int, map[string]*dto.MetricFamily, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := http.Get("http://" + a.adminAddr() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, took
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return resp.StatusCode, fams, took
}

// collectErrors is smartfeed_metrics_collect_errors_total{collector="pinlater_queues"}, or -1.
func collectErrors(fams map[string]*dto.MetricFamily) float64 {
	for _, m := range fams["smartfeed_metrics_collect_errors_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "collector" && l.GetValue() == "pinlater_queues" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestMetricsDuringRedisOutage scrapes /metrics of a whole process while its Redis is killed
// (kill -9) and while it is paused (SIGSTOP, a hung server): each scrape answers 200 with every
// series that does not come from Redis, leaves the queue series out, counts the failure in
// smartfeed_metrics_collect_errors_total{collector="pinlater_queues"}, and takes about the
// collector's bound, not Redis's timeouts. Once Redis is back the queue series return.
func TestMetricsDuringRedisOutage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fail, mend func(*testenv.RedisProc)
	}{
		{"killed", (*testenv.RedisProc).Kill, (*testenv.RedisProc).Start},
		{"paused", (*testenv.RedisProc).Pause, (*testenv.RedisProc).Resume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := testenv.StartRedis(t)
			a, _ := startAllWith(t, func(c *config.Config) { c.Redis.Addr = rp.Addr() })
			// Mend Redis before the app's own cleanup stops it (cleanups run last first).
			mended := false
			t.Cleanup(func() {
				if !mended {
					tc.mend(rp)
				}
			})

			code, fams, _ := scrape(t, a)
			if code != http.StatusOK || fams["pinlater_queue_size"] == nil {
				t.Fatalf("before the outage: status %d, pinlater_queue_size present: %v", code, fams["pinlater_queue_size"] != nil)
			}
			before := collectErrors(fams)
			if before != 0 {
				t.Fatalf("before the outage: collect errors = %v, want 0", before)
			}
			others := []string{"go_goroutines", "process_resident_memory_bytes", "smartfeed_hedge_policy"}

			tc.fail(rp)
			for i := range 2 {
				code, fams, took := scrape(t, a)
				if code != http.StatusOK {
					t.Fatalf("scrape %d during the outage: status %d, want 200", i, code)
				}
				for _, name := range others {
					if fams[name] == nil {
						t.Errorf("scrape %d during the outage: %s missing", i, name)
					}
				}
				if fams["pinlater_queue_size"] != nil {
					t.Errorf("scrape %d during the outage: pinlater_queue_size served (stale values)", i)
				}
				if got := collectErrors(fams); got != float64(i+1) {
					t.Errorf("scrape %d during the outage: collect errors = %v, want %d", i, got, i+1)
				}
				if bound := pinlater.CollectTimeout + 500*time.Millisecond; took > bound {
					t.Errorf("scrape %d during the outage took %v, want at most %v", i, took, bound)
				}
				t.Logf("scrape %d during the outage: 200 in %v, %d families", i, took, len(fams))
			}

			tc.mend(rp)
			mended = true
			// The reader left over from the outage may still be waiting for its answer: the next
			// scrapes count it as an error until it is done.
			deadline := time.Now().Add(30 * time.Second)
			for {
				code, fams, _ := scrape(t, a)
				if code == http.StatusOK && fams["pinlater_queue_size"] != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("30 s after the outage: status %d, queue series still missing", code)
				}
				time.Sleep(100 * time.Millisecond) // polling the scrape itself, the thing under test
			}
		})
	}
}
