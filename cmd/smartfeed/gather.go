package main

import (
	"context"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/internal/demo"
	"github.com/smartfeed/smartfeed/zen"
)

// The commands' shared readers of the process's metrics and terminal, and the edge writer of
// the synthetic graphs: package demo's, under the names the bench and the tests use.

// gatherSum sums every series of the named counter or gauge in reg (demo.GatherSum).
func gatherSum(reg prometheus.Gatherer, name string) int64 { return demo.GatherSum(reg, name) }

// gatherSeries returns the series of the named metric family in reg (demo.GatherSeries).
func gatherSeries(reg prometheus.Gatherer, name string) []*dto.Metric {
	return demo.GatherSeries(reg, name)
}

// labelValue is the value of m's label name (demo.LabelValue).
func labelValue(m *dto.Metric, name string) string { return demo.LabelValue(m, name) }

// isTerminal reports whether w is a terminal (demo.IsTerminal).
func isTerminal(w io.Writer) bool { return demo.IsTerminal(w) }

// bar draws a progress bar (demo.Bar).
func bar(done, total int64, width int) string { return demo.Bar(done, total, width) }

// addBoth writes an edge and its inverse (demo.AddBoth).
func addBoth(ctx context.Context, g demo.GraphWriter, e zen.Edge) error {
	return demo.AddBoth(ctx, g, e)
}

// fmtMs formats d in milliseconds with one decimal (demo.FmtMs).
func fmtMs(d time.Duration) string { return demo.FmtMs(d) }
