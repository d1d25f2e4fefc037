package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// HBaseJavaReads times n calls of each zen read after the warm-up, takes PE's figures as they
// came, and the ratios and the report section follow from them.
func TestHBaseJavaReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gets, tops int
		get := func(context.Context, int) error {
			gets++
			if gets <= 10 { // the warm-up: slow, and not timed
				// sleep: a warm-up call takes 20 ms on the bubble's clock, so a timed one would show.
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}
		top := func(context.Context, int) error { tops++; return nil }
		pe := PEResult{Tool: "org.apache.hadoop.hbase.PerformanceEvaluation", PEVersion: "2.6.1", ClientVersion: "2.6.2", Command: "randomRead",
			Clients: 1, Rows: 110, Warmup: 10, ValueSize: 100, N: 99, MeanUs: 400, P50Us: 150, P99Us: 4000, P999Us: 9000, MaxUs: 9000}
		h, err := HBaseJavaReads(context.Background(), "127.0.0.1:2181", 100, 10, get, top,
			func(context.Context) (PEResult, string, error) { return pe, "scripts/hbase-pe.sh --rows 110", nil })
		if err != nil {
			t.Fatal(err)
		}
		if gets != 220 || tops != 35 || h.ZenGet.N != 100 || h.ZenGetAfter.N != 100 || h.ZenTop50.N != 25 {
			t.Errorf("calls: %d gets (%d + %d timed), %d tops (%d timed); want 220 (100 + 100), 35 (25)", gets, h.ZenGet.N, h.ZenGetAfter.N, tops, h.ZenTop50.N)
		}
		// In the bubble a timed call takes no time and a warm-up call exactly 20 ms.
		if h.ZenGet.Max >= 20 {
			t.Errorf("a warm-up call was timed: max %.2f ms", h.ZenGet.Max)
		}
		if want := (Summary{N: 99, P50: 0.15, P99: 4, P999: 9, Max: 9, Mean: 0.4}); h.JavaRandomRead != want {
			t.Errorf("Java summary %+v, want %+v", h.JavaRandomRead, want)
		}
		r := &Results{Ratios: map[string]float64{}, Reads: ReadResult{GetFeed: Summary{P99: 12}}}
		r.SetHBaseJava(h)
		if got := r.Ratios["getfeed_p99_vs_hbase_java"]; got != 3 {
			t.Errorf("getfeed_p99_vs_hbase_java = %v, want 12/4 = 3", got)
		}
		if got, want := r.Ratios["hbase_get_p99_vs_java"], max(h.ZenGet.P99, h.ZenGetAfter.P99)/4; got != want {
			t.Errorf("hbase_get_p99_vs_java = %v, want %v", got, want)
		}
		if _, ok := r.Ratios["getfeed_p99_vs_hbase_java_under_fanout"]; ok {
			t.Error("a ratio to the Java client under fanout with no such measurement")
		}
		// Measured again with the fanout running (Options.UnderFanout): its own ratio and row.
		h.JavaUnderFanout = &Summary{N: 99, P50: 0.3, P99: 6, P999: 20, Max: 20, Mean: 0.9}
		r.SetHBaseJava(h)
		if got := r.Ratios["getfeed_p99_vs_hbase_java_under_fanout"]; got != 2 {
			t.Errorf("getfeed_p99_vs_hbase_java_under_fanout = %v, want 12/6 = 2", got)
		}
		if got := r.Ratios["getfeed_p99_vs_hbase_java"]; got != 3 {
			t.Errorf("getfeed_p99_vs_hbase_java = %v after the measurement under fanout, want 3 kept", got)
		}
		if _, ok := r.Ratios["getfeed_p99_vs_hbase_java_feed_scan"]; ok {
			t.Error("a ratio to the Java client's feed scans with no such measurement")
		}
		// GetFeed's own reads of the feed, by the Java client loaded and one at a time, and by zen.
		loaded := PEResult{Tool: "FeedScan", ClientVersion: "2.6.2", Command: "feedScan", Clients: 32, Rows: 3000, Warmup: 500, N: 3000,
			MeanUs: 900, P50Us: 700, P99Us: 4000, P999Us: 9000, MaxUs: 12000, OpsPerSec: 199, Offered: 200, Limit: 58}
		serial := loaded
		serial.Clients, serial.Offered, serial.P50Us, serial.P99Us, serial.OpsPerSec = 1, 0, 500, 2000, 1400
		h.FeedScans = &FeedScans{Table: "b_feed", Limit: 58, Java: loaded, Command: "scripts/hbase-scan.sh --table b_feed", JavaSerial: serial,
			Zen: Summary{N: 3000, P50: 0.6, P99: 3, P999: 5, Max: 6, Mean: 0.7}}
		r.SetHBaseJava(h)
		if _, ok := r.Ratios["getfeed_p99_vs_hbase_java_feed_scan"]; ok {
			t.Error("a ratio of GetFeed beside the Java client with no GetFeed measured beside it")
		}
		// GetFeed measured beside the loaded Java client (Options.Beside): the ratio is of those two,
		// not of the serving phase's GetFeed.
		r.Reads.BesidePeer = &Summary{N: 2900, P50: 1, P99: 8, P999: 10, Max: 11, Mean: 1.5}
		r.SetHBaseJava(h)
		if got := r.Ratios["getfeed_p99_vs_hbase_java_feed_scan"]; got != 2 {
			t.Errorf("getfeed_p99_vs_hbase_java_feed_scan = %v, want 8/4 = 2", got)
		}
		if got := r.Ratios["hbase_feed_scan_p99_vs_java"]; got != 1.5 {
			t.Errorf("hbase_feed_scan_p99_vs_java = %v, want 3/2 = 1.5", got)
		}
		md := Markdown(r, "")
		for _, want := range []string{"## zen on HBase against HBase's own Java client",
			"| HBase Java client Scan of a feed page, 200/s offered, 32 in flight | 3000 | 0.700 ms | 4.000 ms | 9.000 ms | 0.900 ms | 199 |",
			"| HBase Java client Scan of a feed page, one at a time | 3000 | 0.500 ms | 2.000 ms |",
			"| zen Scan of a feed page (gohbase), one at a time | 3000 | 0.600 ms | 3.000 ms |",
			"| GetFeed beside the Java client, same load | 2900 | 1.000 ms | 8.000 ms |",
			"first 3000 readers' feed rows, in its order, up to 58 rows in one RPC, after 500 not timed",
			"`scripts/hbase-scan.sh --table b_feed`", "getfeed_p99_vs_hbase_java_feed_scan", "hbase_feed_scan_p99_vs_java", "| HBase Java client Get (PE randomRead) | 99 | 0.150 ms | 4.000 ms |",
			"| HBase Java client Get (PE randomRead), fanout running as in the serving phase | 99 | 0.300 ms | 6.000 ms |",
			"`scripts/hbase-pe.sh --rows 110`", "hbase_get_p99_vs_java", "getfeed_p99_vs_hbase_java_under_fanout"} {
			if !strings.Contains(md, want) {
				t.Errorf("report lacks %q", want)
			}
		}

		// PE failing fails the measurement (the bench notes it); nothing half-measured is kept.
		if _, err := HBaseJavaReads(context.Background(), "zk", 10, 0, get, top, func(context.Context) (PEResult, string, error) {
			return PEResult{}, "pe", errors.New("no java")
		}); err == nil || !strings.Contains(err.Error(), "no java") {
			t.Errorf("PE failure: err = %v", err)
		}
	})
}

// ParsePE reads the line scripts/hbase-pe.sh printed in a real run (after its log lines, when
// they share the stream).
func TestParsePE(t *testing.T) {
	out := `[04:29:13 hbase-pe] PE randomRead: 10000 Gets
{"tool":"org.apache.hadoop.hbase.PerformanceEvaluation","pe_version":"2.6.1","client_version":"2.6.2","command":"randomRead","clients":1,"rows":3000,"warmup":1000,"value_size":100,"table":"smartfeed_pe","n":1999,"mean_us":417.23,"min_us":85.00,"p50_us":140.00,"p95_us":1313.00,"p99_us":5671.00,"p999_us":24030.00,"max_us":44194.00,"ops_per_sec":1775}
`
	r, err := ParsePE([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.N != 1999 || r.P50Us != 140 || r.P99Us != 5671 || r.Warmup != 1000 || r.PEVersion != "2.6.1" {
		t.Errorf("parsed %+v", r)
	}
	for _, bad := range []string{"", "PE failed", `{"n":0,"p99_us":0}`} {
		if _, err := ParsePE([]byte(bad)); err == nil {
			t.Errorf("ParsePE(%q): no error", bad)
		}
	}
}
