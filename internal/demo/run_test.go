package demo

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// summaryNumbers reads the counters of the summary line.
func summaryNumbers(t *testing.T, out string) map[string]int {
	t.Helper()
	i := strings.Index(out, "summary:")
	if i < 0 {
		t.Fatalf("no summary line:\n%s", out)
	}
	line := out[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	got := map[string]int{}
	for _, name := range []string{"events", "pool inserts", "GetFeed", "generator timeouts", "fresh pins"} {
		m := regexp.MustCompile(regexp.QuoteMeta(name) + ` (\d+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("summary lacks %q: %s", name, line)
		}
		got[name], _ = strconv.Atoi(m[1])
	}
	return got
}

func TestBar(t *testing.T) {
	for _, tt := range []struct {
		done, total int64
		want        string
	}{{0, 10, "[....]"}, {5, 10, "[##..]"}, {10, 10, "[####]"}, {70, 10, "[####]"}, {-1, 10, "[....]"}, {3, 0, "[####]"}} {
		if got := Bar(tt.done, tt.total, 4); got != tt.want {
			t.Errorf("Bar(%d, %d) = %q, want %q", tt.done, tt.total, got, tt.want)
		}
	}
}

// deadlineOnly is a context whose deadline has passed but whose timer has not fired yet.
type deadlineOnly struct {
	context.Context
	d time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }

// TestDemoEnded: a call failing in the instant between the run's deadline and its timer is the
// run ending, not an error the live line counts.
func TestDemoEnded(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	future, cancelF := context.WithTimeout(context.Background(), time.Hour)
	defer cancelF()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"running, no deadline", context.Background(), false},
		{"running, deadline ahead", future, false},
		{"canceled", canceled, true},
		{"deadline passed, timer not yet fired", deadlineOnly{context.Background(), time.Now().Add(-time.Millisecond)}, true},
	} {
		if got := ended(tc.ctx); got != tc.want {
			t.Errorf("%s: ended = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPercentilesWindow: the live line's GetFeed percentiles count only the calls that ended in
// its window; the summary's (since the zero time) count every call kept.
func TestPercentilesWindow(t *testing.T) {
	now := time.Now()
	s := &stats{}
	// 100 old slow calls (100–199 ms) and 100 recent fast ones (1–100 ms): the window sees only
	// the recent ones.
	for i := range 100 {
		s.lat = append(s.lat, timedLatency{now.Add(-time.Minute), time.Duration(100+i) * time.Millisecond})
		s.lat = append(s.lat, timedLatency{now.Add(-time.Second), time.Duration(1+i) * time.Millisecond})
	}
	for _, tc := range []struct {
		name  string
		since time.Time
		want  []time.Duration
	}{
		{"live window", now.Add(-liveWindow), []time.Duration{51 * time.Millisecond, 100 * time.Millisecond}},
		{"summary", time.Time{}, []time.Duration{100 * time.Millisecond, 198 * time.Millisecond}},
		{"nothing since", now, []time.Duration{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, s.percentiles(tc.since, 50, 99)); diff != "" {
				t.Errorf("percentiles (-want +got):\n%s", diff)
			}
		})
	}
}

// statusFeed answers every GetFeed with one fresh item and the given fresh status.
type statusFeed struct {
	feedv1.FeedServiceClient
	status feedv1.FreshStatus
}

func (f statusFeed) GetFeed(context.Context, *feedv1.GetFeedRequest, ...grpc.CallOption) (*feedv1.GetFeedResponse, error) {
	return &feedv1.GetFeedResponse{FreshStatus: f.status, Items: []*feedv1.FeedItem{{PinId: 1, Fresh: true}}}, nil
}

// TestDemoCountsGeneratorTimeouts checks that the live line counts the first pages whose
// generator call missed its deadline, and only those.
func TestDemoCountsGeneratorTimeouts(t *testing.T) {
	s := &stats{start: time.Now(), readTarget: 10}
	for _, st := range []feedv1.FreshStatus{feedv1.FreshStatus_FRESH_STATUS_INCLUDED, feedv1.FreshStatus_FRESH_STATUS_GENERATOR_TIMEOUT,
		feedv1.FreshStatus_FRESH_STATUS_EMPTY, feedv1.FreshStatus_FRESH_STATUS_GENERATOR_TIMEOUT, feedv1.FreshStatus_FRESH_STATUS_GENERATOR_ERROR} {
		s.read(t.Context(), statusFeed{status: st}, 1, zap.NewNop())
	}
	got := summaryNumbers(t, "summary: "+s.line(0, true))
	if got["generator timeouts"] != 2 || got["fresh pins"] != 5 {
		t.Errorf("after 5 pages, 2 of them generator timeouts: %v", got)
	}
}

// failingCollector is a collector whose every collection fails, as one that asks a Redis that
// is down does.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("redis: connection refused"))
}

// A failing collector (one that asks a Redis that is down) does not zero the counters the
// demo's line reads: the line keeps showing the pool inserts while Redis restarts.
func TestGatherSumBesideFailingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "smartfeed_worker_pool_inserts_total", Help: "h"})
	c.Add(42)
	reg.MustRegister(c, failingCollector{prometheus.NewDesc("pinlater_queue_depth", "h", nil, nil)})
	if _, err := reg.Gather(); err == nil {
		t.Fatal("the failing collector did not fail the gather")
	}
	if got := GatherSum(reg, "smartfeed_worker_pool_inserts_total"); got != 42 {
		t.Errorf("GatherSum = %d beside a failing collector, want 42", got)
	}
}

// TestReadersFor: the demo's reader goroutines grow with the target rate, so 2,000 calls/s are
// offered even when each takes tens of milliseconds.
func TestReadersFor(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want int
	}{{0.5, 4}, {50, 4}, {200, 5}, {2000, 50}, {5000, 64}} {
		if got := readersFor(tc.rate); got != tc.want {
			t.Errorf("readersFor(%v) = %d, want %d", tc.rate, got, tc.want)
		}
	}
}
