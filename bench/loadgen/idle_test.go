package loadgen

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestMetricsIdleWaitsForGaugesAndCounters: the wait ends at the first scrape with the gauges
// at 0 and the counters as the scrape before; a server that never gets there makes it fail
// after Max.
func TestMetricsIdleWaitsForGaugesAndCounters(t *testing.T) {
	// scrape n: in flight 2, 1, 0, 0...; the counter 5, 6, 7, 7, 7...
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		i := n.Add(1)
		fmt.Fprintf(w, "# TYPE bg_in_flight gauge\nbg_in_flight %d\n# TYPE work_total counter\nwork_total{kind=\"a\"} %d\nwork_total{kind=\"b\"} 1\n",
			max(0, 3-i), 4+min(i, 3))
	}))
	defer srv.Close()
	m := MetricsIdle{URL: srv.URL, Counters: []string{"work_total"}, Gauges: []string{"bg_in_flight"}, Poll: time.Millisecond, Max: time.Minute}
	if err := m.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	// 1-2: gauge busy; 3: counter moved (6 → 7); 4: counter still, gauge 0: idle.
	if got := n.Load(); got != 4 {
		t.Errorf("%d scrapes, want 4", got)
	}
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE bg_in_flight gauge\nbg_in_flight 1\n")
	}))
	defer busy.Close()
	m.URL, m.Max = busy.URL, 20*time.Millisecond
	if err := m.Wait(t.Context()); err == nil {
		t.Error("a server always busy: no error")
	}
}
