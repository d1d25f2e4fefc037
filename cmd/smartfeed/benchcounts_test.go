package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// countsBy sums a counter family by one label, over the series' other labels.
func TestCountsBy(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"outcome", "fresh"})
	reg.MustRegister(c)
	c.WithLabelValues("ok", "included").Add(2)
	c.WithLabelValues("failed", "included").Add(3)
	c.WithLabelValues("ok", "recent").Add(5)
	if diff := cmp.Diff(map[string]uint64{"included": 5, "recent": 5}, countsBy(reg, "x_total", "fresh")); diff != "" {
		t.Errorf("by fresh (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]uint64{"ok": 7, "failed": 3}, countsBy(reg, "x_total", "outcome")); diff != "" {
		t.Errorf("by outcome (-want +got):\n%s", diff)
	}
	if got := countsBy(reg, "absent_total", "fresh"); len(got) != 0 {
		t.Errorf("absent family: %v, want empty", got)
	}
}
