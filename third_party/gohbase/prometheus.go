// Copyright (C) 2021  The GoHBase Authors.  All rights reserved.
// This file is part of GoHBase.
// Use of this source code is governed by the Apache License 2.0
// that can be found in the COPYING file.

package gohbase

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/tsuna/gohbase/region"
)

var operationDurationSeconds = promauto.NewHistogramVec(
	prometheus.HistogramOpts{
		Namespace: "gohbase",
		Name:      "operation_duration_seconds",
		Help:      "Time in seconds for operation to complete",
		Buckets:   prometheus.ExponentialBuckets(0.001, 4, 10),
	},
	[]string{"operation", "result"},
)

var rpcRetries = promauto.NewCounterVec(
	prometheus.CounterOpts{
		Namespace: "gohbase",
		Name:      "rpc_retries_total",
		Help: "RPCs sent again after a failure, by reason: retryable (the region server " +
			"asked for a retry), server (the connection to the region server failed), " +
			"not_serving (the region was unavailable, closed or moved)",
	},
	[]string{"reason"},
)

var regionReestablishSeconds = promauto.NewHistogram(
	prometheus.HistogramOpts{
		Namespace: "gohbase",
		Name:      "region_reestablish_seconds",
		Help: "Time in seconds from a region becoming unavailable (its region server " +
			"lost, or the region closed or moved) until the client has found it again",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	},
)

var regionRelocations = promauto.NewCounter(
	prometheus.CounterOpts{
		Namespace: "gohbase",
		Name:      "region_relocations_total",
		Help:      "Regions found on another region server after the client lost them",
	},
)

// Collectors returns the client's metrics, the region clients' included, which every client of
// the process shares, for an application that serves a registry of its own instead of
// Prometheus's default one (where they are registered too). (SmartFeed addition, see
// SMARTFEED.md.)
func Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{operationDurationSeconds, rpcRetries,
		regionReestablishSeconds, regionRelocations}, region.PrometheusCollectors()...)
}
