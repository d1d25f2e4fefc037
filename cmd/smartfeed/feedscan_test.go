package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
)

// scripts/hbase-scan.sh (HBase's own Java client, test/hbase/tools/FeedScan.java) scans the
// row ranges it is given on a real HBase, a page's rows each and nothing outside them, paced and
// in parallel as asked, and prints the line bench.ParsePE reads: what `smartfeed bench
// --storage hbase` compares GetFeed with.
func TestFeedScanScript(t *testing.T) {
	zk := testenv.HBase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("feedscan%d_", time.Now().UnixNano())
	hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	tb, err := hb.Table(ctx, tableFeed)
	if err != nil {
		t.Fatal(err)
	}
	a, err := zen.NewID(7, zen.TypeUser, 11)
	if err != nil {
		t.Fatal(err)
	}
	b := a + 1 // the next local ID on the shard
	var muts []zen.Mutation
	rows := func(u zen.ID, n int) {
		start, _ := feedsvc.FeedRange(u)
		for i := range n {
			muts = append(muts, zen.Mutation{Key: binary.BigEndian.AppendUint64(bytes.Clone(start), uint64(i)), Value: []byte("v")})
		}
	}
	rows(a, 70)
	rows(b, 3)
	// Rows just outside b's range on both sides: another kind of b's rows, and the next user's.
	startB, stopB := feedsvc.FeedRange(b)
	muts = append(muts, zen.Mutation{Key: append(bytes.Clone(startB[:len(startB)-1]), 'e'), Value: []byte("x")},
		zen.Mutation{Key: bytes.Clone(stopB), Value: []byte("x")})
	if err := tb.Apply(ctx, muts); err != nil {
		t.Fatal(err)
	}
	ranges := filepath.Join(t.TempDir(), "ranges.txt")
	var lines bytes.Buffer
	for _, u := range []zen.ID{a, b, a} {
		start, stop := feedsvc.FeedRange(u)
		fmt.Fprintf(&lines, "%x %x\n", start, stop)
	}
	if err := os.WriteFile(ranges, lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "hbase-scan.sh"), "--zk", zk, "--table", hb.HBaseName(tableFeed),
		"--ranges", ranges, "--limit", "58", "--rate", "50", "--threads", "2", "--warmup", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/hbase-scan.sh: %v\n%s", err, stderr.String())
	}
	res, err := bench.ParsePE(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// The warm-up read is a's (58 rows), then a, b, a: 58 + 3 + 58, and nothing outside b's range.
	if res.N != 3 || res.Failed != 0 || res.RowsRead != 58+58+3+58 || res.Limit != 58 || res.Clients != 2 || res.Offered != 50 {
		t.Errorf("FeedScan: %d reads timed, %d failed, %d rows read, limit %d, %d threads, %.0f/s offered; "+
			"want 3, 0, 177, 58, 2, 50\n%s", res.N, res.Failed, res.RowsRead, res.Limit, res.Clients, res.Offered, out)
	}
	if res.P50Us <= 0 || res.P99Us < res.P50Us || res.MaxUs < res.P99Us {
		t.Errorf("latencies out of order: p50 %.0f µs, p99 %.0f µs, max %.0f µs", res.P50Us, res.P99Us, res.MaxUs)
	}
}
