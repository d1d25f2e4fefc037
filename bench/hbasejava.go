package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// PEResult is the JSON line scripts/hbase-pe.sh prints: HBase's own Java client
// (org.apache.hadoop.hbase.PerformanceEvaluation) timing randomRead, latencies in microseconds.
type PEResult struct {
	Tool          string  `json:"tool"`
	PEVersion     string  `json:"pe_version"`
	ClientVersion string  `json:"client_version"`
	Command       string  `json:"command"`
	Clients       int     `json:"clients"`
	Rows          int     `json:"rows"`
	Warmup        int     `json:"warmup"`
	ValueSize     int     `json:"value_size"`
	Table         string  `json:"table"`
	N             int     `json:"n"`
	MeanUs        float64 `json:"mean_us"`
	MinUs         float64 `json:"min_us"`
	P50Us         float64 `json:"p50_us"`
	P95Us         float64 `json:"p95_us"`
	P99Us         float64 `json:"p99_us"`
	P999Us        float64 `json:"p999_us"`
	MaxUs         float64 `json:"max_us"`
	OpsPerSec     float64 `json:"ops_per_sec"`
	// Offered, Limit, Failed and RowsRead are FeedScan's (scripts/hbase-scan.sh): the reads
	// offered a second, the rows a Scan asked for, the reads that failed, the rows read.
	Offered  float64 `json:"offered_per_sec,omitempty"`
	Limit    int     `json:"limit,omitempty"`
	Failed   int     `json:"failed,omitempty"`
	RowsRead int64   `json:"rows_read,omitempty"`
}

// ParsePE reads the last line scripts/hbase-pe.sh printed.
func ParsePE(out []byte) (PEResult, error) {
	line := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	var r PEResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return PEResult{}, fmt.Errorf("PE result %q: %w", line, err)
	}
	if r.N == 0 || r.P99Us == 0 {
		return PEResult{}, fmt.Errorf("PE measured nothing: %s", line)
	}
	return r, nil
}

// Summary is the PE result as a Summary in milliseconds.
func (p PEResult) Summary() Summary {
	return Summary{N: p.N, P50: p.P50Us / 1000, P99: p.P99Us / 1000, P999: p.P999Us / 1000, Max: p.MaxUs / 1000, Mean: p.MeanUs / 1000}
}

// HBaseJava is zen's reads through gohbase against HBase's own Java client on the same HBase
// in the same run, both one call at a time.
type HBaseJava struct {
	// Server is the ZooKeeper of the HBase measured (the one holding the graph and pools).
	Server string `json:"server"`
	// ZenGet: zen.Graph.Get of objects chosen at random, one at a time, before PE ran;
	// ZenGetAfter: the same after it (PE's writes may leave the server flushing).
	ZenGet      Summary `json:"zen_get"`
	ZenGetAfter Summary `json:"zen_get_after_pe"`
	// ZenTop50: the best 50 of a user's following pool (zen.Pools.Top), one at a time.
	ZenTop50 Summary `json:"zen_top50"`
	// JavaRandomRead: PE randomRead, 1 client, Gets of random rows one after the other.
	JavaRandomRead Summary  `json:"hbase_java_randomread"`
	PE             PEResult `json:"hbase_java_pe"`
	PECommand      string   `json:"pe_command"`
	// JavaUnderFanout is PE randomRead again (its own table), run right after the serving
	// phase with its fanout still writing (Options.UnderFanout): the Java client under
	// the write load GetFeed's p99 is measured under. Absent when it was not measured.
	JavaUnderFanout *Summary  `json:"hbase_java_randomread_under_fanout,omitempty"`
	PEUnderFanout   *PEResult `json:"hbase_java_pe_under_fanout,omitempty"`
	// FeedScans are GetFeed's reads of the feed made by the Java client and by zen. Absent when
	// they were not measured.
	FeedScans *FeedScans `json:"feed_scans,omitempty"`
}

// FeedScans are GetFeed's reads of the feed, a page's Scan of each serving-phase reader's feed
// rows (the phase's first readers, in its order), made right after the phase with its fanout
// still running: by HBase's own Java client (test/hbase/tools/FeedScan.java) at the phase's
// offered load and concurrency with GetFeed going on beside it at the same (Options.Beside),
// then by the Java client and by zen (gohbase) one at a time, on the same rows
// (Options.UnderFanout).
type FeedScans struct {
	// Table is the HBase table scanned (the primary's feed table) and Limit the rows a Scan
	// asks for (a page's, feedsvc.PageScanRows).
	Table string `json:"table"`
	Limit int    `json:"limit"`
	// Java: the Java client at the serving phase's offered load and concurrency, GetFeed going on
	// beside it the same way (Options.Beside, ReadResult.BesidePeer); Command is how it was run.
	Java    PEResult `json:"java_loaded"`
	Command string   `json:"java_command"`
	// JavaSerial and Zen: the Java client and zen.Table.Scan, one at a time, the same reads,
	// each after as many untimed ones.
	JavaSerial PEResult `json:"java_one_at_a_time"`
	Zen        Summary  `json:"zen_one_at_a_time"`
}

// HBaseJavaReads times n zen Gets (get) and n/4 Top(50)s (top), one at a time after warmup
// untimed calls of each, then runs pe (HBase's own Java client on the same server, which
// should leave as many calls untimed), then times the Gets again, and returns them side by side.
func HBaseJavaReads(ctx context.Context, server string, n, warmup int, get, top func(ctx context.Context, i int) error,
	pe func(ctx context.Context) (PEResult, string, error)) (*HBaseJava, error) {
	serial := func(n int, f func(ctx context.Context, i int) error) (Summary, error) {
		return Serial(ctx, n, warmup, f)
	}
	r := &HBaseJava{Server: server}
	var err error
	if r.ZenGet, err = serial(n, get); err != nil {
		return nil, fmt.Errorf("zen get: %w", err)
	}
	if r.ZenTop50, err = serial(max(1, n/4), top); err != nil {
		return nil, fmt.Errorf("zen top(50): %w", err)
	}
	if r.PE, r.PECommand, err = pe(ctx); err != nil {
		return nil, fmt.Errorf("hbase java client (PerformanceEvaluation): %w", err)
	}
	r.JavaRandomRead = r.PE.Summary()
	if r.ZenGetAfter, err = serial(n, get); err != nil {
		return nil, fmt.Errorf("zen get after PE: %w", err)
	}
	return r, nil
}

// Serial makes warmup untimed calls of f then n timed ones, one after the other, and returns
// the timed calls' latencies; the first error stops it.
func Serial(ctx context.Context, n, warmup int, f func(ctx context.Context, i int) error) (Summary, error) {
	d := make([]time.Duration, 0, n)
	for i := range warmup + n {
		t := time.Now()
		if err := f(ctx, i); err != nil {
			return Summary{}, err
		}
		if i >= warmup {
			d = append(d, time.Since(t))
		}
	}
	return Summarize(d), nil
}

// hbaseJavaRatios adds the ratios of zen's reads, and of GetFeed, to the Java client's p99.
func hbaseJavaRatios(r *Results) {
	h := r.HBaseJava
	if h == nil {
		return
	}
	j := h.JavaRandomRead.P99
	// The worse of zen's two runs, before and after PE.
	r.Ratios["hbase_get_p99_vs_java"] = ratio(max(h.ZenGet.P99, h.ZenGetAfter.P99), j)
	r.Ratios["hbase_top50_p99_vs_java"] = ratio(h.ZenTop50.P99, j)
	r.Ratios["getfeed_p99_vs_hbase_java"] = ratio(r.Reads.GetFeed.P99, j)
	if h.JavaUnderFanout != nil {
		r.Ratios["getfeed_p99_vs_hbase_java_under_fanout"] = ratio(r.Reads.GetFeed.P99, h.JavaUnderFanout.P99)
	}
	if fs := h.FeedScans; fs != nil {
		if b := r.Reads.BesidePeer; b != nil && fs.Java.N > 0 {
			r.Ratios["getfeed_p99_vs_hbase_java_feed_scan"] = ratio(b.P99, fs.Java.Summary().P99)
		}
		if fs.JavaSerial.N > 0 && fs.Zen.N > 0 {
			r.Ratios["hbase_feed_scan_p99_vs_java"] = ratio(fs.Zen.P99, fs.JavaSerial.Summary().P99)
		}
	}
}

// SetHBaseJava records h in r with its ratios.
func (r *Results) SetHBaseJava(h *HBaseJava) {
	r.HBaseJava = h
	hbaseJavaRatios(r)
}

// hbaseJavaMarkdown is the report's section for HBaseJava; besidePeer is GetFeed beside the Java
// client's feed scans (nil: not measured).
func hbaseJavaMarkdown(h *HBaseJava, besidePeer *Summary) string {
	if h == nil {
		return ""
	}
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }
	p("## zen on HBase against HBase's own Java client")
	p("")
	p("Same HBase (%s), same run, one call at a time, the first %d calls of each not timed. The Java client is `%s` %s (PE's jar; "+
		"the HBase client classes are %s), `randomRead` with 1 client over %d rows of %d bytes that PE wrote just before: `%s`. "+
		"zen reads the bench's users and boards (Get) and their following pools (Top).",
		h.Server, h.PE.Warmup, h.PE.Tool, h.PE.PEVersion, h.PE.ClientVersion, h.PE.Rows, h.PE.ValueSize, h.PECommand)
	p("")
	p("| reads | calls | p50 | p99 | p99.9 | mean |")
	p("|---|---|---|---|---|---|")
	for _, row := range []struct {
		name string
		s    Summary
	}{{"zen Get (gohbase), before PE", h.ZenGet}, {"zen Top(50) of a pool (gohbase scan), before PE", h.ZenTop50},
		{"HBase Java client Get (PE randomRead)", h.JavaRandomRead}, {"zen Get (gohbase), after PE", h.ZenGetAfter}} {
		p("| %s | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms |", row.name, row.s.N, row.s.P50, row.s.P99, row.s.P999, row.s.Mean)
	}
	if s := h.JavaUnderFanout; s != nil {
		p("| HBase Java client Get (PE randomRead), fanout running as in the serving phase | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms |", s.N, s.P50, s.P99, s.P999, s.Mean)
	}
	p("")
	p("The rows above ran one after the other with nothing else running, except the last (when present), which ran right after the serving phase " +
		"with its fanout still writing: the write load GetFeed's p99 was measured under (`getfeed_p99_vs_hbase_java_under_fanout`).")
	p("")
	if fs := h.FeedScans; fs != nil {
		p("GetFeed's own reads of the feed (`%s`), made right after the serving phase with its fanout still running: a Scan of each of the phase's "+
			"first %d readers' feed rows, in its order, up to %d rows in one RPC, after %d not timed. First by HBase's Java client (%s, "+
			"test/hbase/tools/FeedScan.java: `%s`) offered at %.0f/s with at most %d in flight, as the phase offered GetFeed, while GetFeed went on "+
			"beside it the same way over the same readers (`getfeed_p99_vs_hbase_java_feed_scan`: both measured in the same stretch of time); then one at a "+
			"time by the Java client and by zen's gohbase Scan, nothing beside them but the fanout (`hbase_feed_scan_p99_vs_java`).",
			fs.Table, fs.Java.Rows, fs.Limit, fs.Java.Warmup, fs.Java.ClientVersion, fs.Command, fs.Java.Offered, fs.Java.Clients)
		p("")
		p("| reads | calls | p50 | p99 | p99.9 | mean | achieved/s |")
		p("|---|---|---|---|---|---|---|")
		if b := besidePeer; b != nil {
			p("| GetFeed beside the Java client, same load | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms | |", b.N, b.P50, b.P99, b.P999, b.Mean)
		}
		for _, row := range []struct {
			name string
			run  PEResult
		}{{fmt.Sprintf("HBase Java client Scan of a feed page, %.0f/s offered, %d in flight", fs.Java.Offered, fs.Java.Clients), fs.Java},
			{"HBase Java client Scan of a feed page, one at a time", fs.JavaSerial}} {
			s := row.run.Summary()
			p("| %s | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms | %.0f |", row.name, s.N, s.P50, s.P99, s.P999, s.Mean, row.run.OpsPerSec)
		}
		z := fs.Zen
		p("| zen Scan of a feed page (gohbase), one at a time | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms | |", z.N, z.P50, z.P99, z.P999, z.Mean)
		p("")
	}
	return b.String()
}
