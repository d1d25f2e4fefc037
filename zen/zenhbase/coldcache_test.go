package zenhbase

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/zen"
)

// TestColdBatchLooksUpEachRegionOnce: a GetMany of thousands of rows over a table's 16 regions,
// from a client that has looked none of them up yet, looks each region up in hbase:meta about
// once, not once per row: thousands of concurrent meta lookups swamp a region server (a bulk
// load's first batched read timed out whole on a busy machine).
func TestColdBatchLooksUpEachRegionOnce(t *testing.T) {
	s := openStore(t, Options{})
	tb := freshTable(t, s)
	keys := make([][]byte, 3000)
	for i := range keys {
		keys[i] = benchKey(i * 7) // shards i*7%4096: all 16 regions
	}
	before := metaScans(t)
	vals, err := zen.GetMany(t.Context(), tb, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != len(keys) {
		t.Fatalf("%d values for %d keys", len(vals), len(keys))
	}
	// One lookup a region, and a few more for lookups that raced a region's opening.
	if n := metaScans(t) - before; n > 2*16 {
		t.Errorf("%v scans of hbase:meta for %d rows over 16 regions, want one a region", n, len(keys))
	}
}

// metaScans is how many Scan calls the HBase client has made (gohbase_operation_duration_seconds
// by operation): a test that reads only with Gets and Applies scans only hbase:meta, once a
// region lookup.
func metaScans(t *testing.T) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "gohbase_operation_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == "Scan" {
					n += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return n
}
