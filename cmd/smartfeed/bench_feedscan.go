package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
)

// benchFeedScanReads and benchFeedScanWarmup: GetFeed's reads of the feed made by the Java
// client and by zen (feedScanner) under fanout, for the serving phase's first readers in its
// order, each timed after the first benchFeedScanWarmup.
const benchFeedScanReads, benchFeedScanWarmup = 3000, 500

// feedScanner makes GetFeed's reads of the feed (a page's Scan of each reader's feed rows:
// feedsvc.FeedRange, feedsvc.PageScanRows) on the primary's "feed" table: with script
// (scripts/hbase-scan.sh, HBase's own Java client) and with zen's Scan.
type feedScanner struct {
	fs     *bench.FeedScans
	table  zen.Table
	ranges []zen.ScanOptions
	file   string // the ranges, one "START STOP" in hex a line, for the script
	script string
	h      config.HBase
	logw   io.Writer
}

// newFeedScanner prepares the reads of readers (the serving phase's, in its order; the first
// benchFeedScanReads of them). Close removes its file.
func newFeedScanner(ctx context.Context, sys *benchSystem, h config.HBase, script string, readers []uint64, pageSize int,
	logw io.Writer) (*feedScanner, error) {
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("--hbase-scan: %w", err)
	}
	readers = readers[:min(len(readers), benchFeedScanReads)]
	if len(readers) == 0 {
		return nil, errors.New("no readers to scan")
	}
	st, err := sys.a.stores.get(ctx, storePrimary)
	if err != nil {
		return nil, err
	}
	hb, ok := st.(*zenhbase.Store)
	if !ok {
		return nil, fmt.Errorf("the primary store is a %T, not HBase", st)
	}
	table, err := hb.Table(ctx, tableFeed)
	if err != nil {
		return nil, err
	}
	sc := &feedScanner{fs: &bench.FeedScans{Table: hb.HBaseName(tableFeed), Limit: feedsvc.PageScanRows(pageSize)}, table: table,
		ranges: make([]zen.ScanOptions, len(readers)), script: script, h: h, logw: logw}
	f, err := os.CreateTemp("", "smartfeed-feedscan-*.txt")
	if err != nil {
		return nil, err
	}
	sc.file = f.Name()
	w := bufio.NewWriter(f)
	for i, u := range readers {
		start, stop := feedsvc.FeedRange(zen.ID(u))
		sc.ranges[i] = zen.ScanOptions{Start: start, Stop: stop, Limit: sc.fs.Limit}
		fmt.Fprintf(w, "%x %x\n", start, stop)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		sc.Close()
		return nil, fmt.Errorf("feed scan ranges: %w", err)
	}
	return sc, nil
}

// Close removes the ranges file.
func (sc *feedScanner) Close() { _ = os.Remove(sc.file) }

// java runs the script over the ranges at rate (0: one after the other) with at most threads
// in flight, after benchFeedScanWarmup untimed reads.
func (sc *feedScanner) java(ctx context.Context, rate float64, threads int) (bench.PEResult, string, error) {
	args := []string{"--zk", strings.Split(sc.h.PrimaryZK, ",")[0], "--table", sc.fs.Table, "--ranges", sc.file,
		"--limit", fmt.Sprint(sc.fs.Limit), "--rate", fmt.Sprint(rate), "--threads", fmt.Sprint(threads), "--warmup", fmt.Sprint(benchFeedScanWarmup)}
	return runJavaScript(ctx, sc.h, sc.script, args, sc.logw)
}

// loaded is the Java client at the serving phase's offered rate and concurrency (fs.Java).
func (sc *feedScanner) loaded(ctx context.Context, opts bench.Options) error {
	var err error
	sc.fs.Java, sc.fs.Command, err = sc.java(ctx, opts.ReadRate, opts.Concurrency)
	return err
}

// serial is the Java client, then zen's Scan, one at a time (fs.JavaSerial, fs.Zen).
func (sc *feedScanner) serial(ctx context.Context) error {
	var err error
	if sc.fs.JavaSerial, _, err = sc.java(ctx, 0, 1); err != nil {
		return err
	}
	sc.fs.Zen, err = bench.Serial(ctx, len(sc.ranges), benchFeedScanWarmup, func(ctx context.Context, i int) error {
		_, err := sc.table.Scan(ctx, sc.ranges[i%len(sc.ranges)])
		return err
	})
	if err != nil {
		return fmt.Errorf("zen feed scans: %w", err)
	}
	return nil
}
