package zenhbase

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tsuna/gohbase"
)

// Collectors returns the metrics of the HBase client under every Store of the process, for the
// process's registry: gohbase_operation_duration_seconds (by operation and result),
// gohbase_rpc_retries_total (calls sent again, by reason), gohbase_region_reestablish_seconds
// (how long regions were unavailable after their server died or they moved) and
// gohbase_region_relocations_total (regions found on another server).
func Collectors() []prometheus.Collector { return gohbase.Collectors() }
