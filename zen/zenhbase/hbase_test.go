package zenhbase

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsuna/gohbase/hrpc"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// Tests run against the real HBase named by SMARTFEED_HBASE_ZK; each uses fresh tables
// (prefix zt<start time>_) and drops them when it ends.

var tableSeq atomic.Int64

func openStore(t testing.TB, opts Options) *Store {
	t.Helper()
	zk := testenv.HBase(t)
	if opts.TablePrefix == "" {
		opts.TablePrefix = fmt.Sprintf("zt%d_", time.Now().UnixNano())
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = 2 * time.Millisecond
		opts.CreateTimeout = 45 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, zk, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// freshTable creates a new table and drops it at the end of the test.
func freshTable(t testing.TB, s *Store) zen.Table {
	t.Helper()
	name := fmt.Sprintf("t%d", tableSeq.Add(1))
	tb, err := s.Table(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Drop(ctx, name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return tb
}

func TestTable(t *testing.T) {
	s := openStore(t, Options{})
	zentest.RunTable(t, func(t *testing.T) zen.Table { return freshTable(t, s) })
}

func TestRandomizedVsModel(t *testing.T) {
	s := openStore(t, Options{})
	for _, seed := range zentest.Seeds(t, 3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			model, _ := zenmem.New().Table(t.Context(), "r")
			zentest.RunRandomized(t, model, freshTable(t, s), seed, 600)
		})
	}
}

// TestPreSplit reads hbase:meta: a new table has one region per 256 shards, starting at the
// split keys.
func TestPreSplit(t *testing.T) {
	s := openStore(t, Options{})
	tb := freshTable(t, s).(*Table)
	prefix := string(tb.name) + ","
	sc, err := hrpc.NewScanRangeStr(t.Context(), "hbase:meta", string(tb.name), string(tb.name)+"-",
		hrpc.Families(map[string][]string{"info": {"regioninfo"}}))
	if err != nil {
		t.Fatal(err)
	}
	scanner := s.client.Scan(sc)
	defer scanner.Close()
	var starts []string
	for {
		r, err := scanner.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		row := string(r.Cells[0].Row) // table,startkey,regionid.encoded.
		if !strings.HasPrefix(row, prefix) {
			continue
		}
		starts = append(starts, row[len(prefix):])
	}
	if len(starts) != 16 {
		t.Fatalf("%d regions, want 16", len(starts))
	}
	for i, sk := range SplitKeys(256, 4096) {
		if got := starts[i+1][:8]; got != string(sk) {
			t.Errorf("region %d starts at %x, want %x", i+1, got, sk)
		}
	}
}

// TestBatchedCalls: an Apply and a GetMany of batchFrom calls or more go through the patched
// gohbase's SendBatch, grouped by region server over the pre-split regions. Every row lands and
// reads back, absent rows read nil, a key repeated in a batch keeps its last mutation, and a
// delete in a batch deletes. The first round meets a cold region cache (the calls go through
// SendRPC's lookups), the second a warm one (multi requests sent at once); so does a GetMany
// below batchFrom.
func TestBatchedCalls(t *testing.T) {
	s := openStore(t, Options{})
	tb := freshTable(t, s)
	ctx := t.Context()
	const n = 600
	want := map[string][]byte{}
	var keys [][]byte
	for round := range 2 {
		var muts []zen.Mutation
		for i := range n {
			k := benchKey(i*7 + round) // shards i*7%4096: all 16 regions
			if round == 1 && i%10 == 0 {
				old := benchKey((i + 1) * 7) // written in round 0
				muts = append(muts, zen.Mutation{Key: old, Delete: true})
				delete(want, string(old))
			}
			muts = append(muts, zen.Mutation{Key: k, Value: []byte("first")})
			v := []byte(fmt.Sprintf("r%d-%d", round, i))
			muts = append(muts, zen.Mutation{Key: k, Value: v})
			want[string(k)] = v
			keys = append(keys, k)
		}
		if err := tb.Apply(ctx, muts); err != nil {
			t.Fatalf("round %d: apply: %v", round, err)
		}
		for i := range 50 {
			keys = append(keys, benchKey(1_000_000+i)) // never written
		}
		for _, ks := range [][][]byte{keys, keys[:batchFrom-1], keys[len(keys)-batchFrom:]} {
			vals, err := zen.GetMany(ctx, tb, ks)
			if err != nil {
				t.Fatalf("round %d: get many %d: %v", round, len(ks), err)
			}
			for i, k := range ks {
				if w := want[string(k)]; string(vals[i]) != string(w) {
					t.Fatalf("round %d, get many %d: %x = %q, want %q", round, len(ks), k, vals[i], w)
				}
			}
		}
	}
}

// TestDeleteThenPut: a delete never hides a write made right after it (NEW_VERSION_BEHAVIOR).
// Check-and-set calls skip gohbase's batching, so they land within the same millisecond often.
func TestDeleteThenPut(t *testing.T) {
	s := openStore(t, Options{})
	tb := freshTable(t, s)
	ctx := t.Context()
	k := []byte("k")
	for i := range 300 {
		v := []byte(fmt.Sprint(i))
		if ok, err := tb.CheckAndSet(ctx, k, nil, v); err != nil || !ok {
			t.Fatalf("round %d: put-if-absent = %v, %v", i, ok, err)
		}
		if ok, err := tb.CheckAndSet(ctx, k, v, nil); err != nil || !ok {
			t.Fatalf("round %d: delete-if-equal = %v, %v", i, ok, err)
		}
	}
}

func TestIncrementNonCounterFails(t *testing.T) {
	s := openStore(t, Options{CallTimeout: 3 * time.Second})
	tb := freshTable(t, s)
	if err := tb.Apply(t.Context(), []zen.Mutation{{Key: []byte("x"), Value: []byte("abc")}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := tb.Increment(t.Context(), []byte("x"), 1); err == nil {
		t.Fatal("Increment of a 3-byte value succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Increment error took %v: it was retried until the timeout", d)
	}
}

func TestCallTimeout(t *testing.T) {
	// No HBase listens on this port: a call whose context has no deadline must end at the
	// default call timeout instead of retrying for ever.
	start := time.Now()
	_, err := Open(context.Background(), "127.0.0.1:1", Options{CallTimeout: 500 * time.Millisecond})
	if err == nil {
		t.Fatal("Open of a dead quorum succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open of a dead quorum took %v, want about the 500ms call timeout", d)
	}
}

func benchKey(i int) []byte {
	k := make([]byte, 24)
	binary.BigEndian.PutUint64(k, uint64(i%4096)<<46|3<<36|uint64(i))
	binary.BigEndian.PutUint64(k[8:], uint64(i)*0x9e3779b97f4a7c15)
	binary.BigEndian.PutUint64(k[16:], uint64(i))
	return k
}

func BenchmarkApply100(b *testing.B) {
	tb := freshTable(b, openStore(b, Options{}))
	b.ReportAllocs()
	val := make([]byte, 64)
	i := 0
	for b.Loop() {
		muts := make([]zen.Mutation, 100)
		for j := range muts {
			muts[j] = zen.Mutation{Key: benchKey(i), Value: val}
			i++
		}
		if err := tb.Apply(b.Context(), muts); err != nil {
			b.Fatal(err)
		}
	}
}

func fillPrefix(b *testing.B, tb zen.Table) {
	var muts []zen.Mutation
	for u := range 20 {
		for j := range 50 {
			k := binary.BigEndian.AppendUint64(nil, uint64(u*200)<<46)
			k = binary.BigEndian.AppendUint64(k, uint64(j))
			k = binary.BigEndian.AppendUint64(k, uint64(j*7))
			muts = append(muts, zen.Mutation{Key: k, Value: make([]byte, 64)})
		}
	}
	if err := tb.Apply(b.Context(), muts); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkScan50(b *testing.B) {
	tb := freshTable(b, openStore(b, Options{}))
	fillPrefix(b, tb)
	b.ReportAllocs()
	u := 0
	for b.Loop() {
		start := binary.BigEndian.AppendUint64(nil, uint64(u%20*200)<<46)
		stop := binary.BigEndian.AppendUint64(nil, uint64(u%20*200)<<46+1)
		rows, err := tb.Scan(b.Context(), zen.ScanOptions{Start: start, Stop: stop})
		if err != nil || len(rows) != 50 {
			b.Fatalf("Scan = %d rows, %v", len(rows), err)
		}
		u++
	}
}

// BenchmarkGet reads one row at a time, with the tests' write flush interval (2 ms) and with
// gohbase's default, which production runs with (20 ms): reads must not pay either.
func BenchmarkGet(b *testing.B) {
	for _, flush := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		b.Run(fmt.Sprintf("flush=%v", flush), func(b *testing.B) {
			tb := freshTable(b, openStore(b, Options{FlushInterval: flush, CreateTimeout: 45 * time.Second}))
			fillPrefix(b, tb)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := binary.BigEndian.AppendUint64(nil, uint64(i%20*200)<<46)
				k = binary.BigEndian.AppendUint64(k, uint64(i%50))
				k = binary.BigEndian.AppendUint64(k, uint64(i%50*7))
				if _, err := tb.Get(b.Context(), k); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkGetMany reads n rows in one call, half of them absent. n=200 is the worker's read of
// a task's receivers (two rows each), whose per-Get client cost a fanout pays per receiver;
// n=20 and n=1 are the read path's sizes, which must not wait for a write flush.
func BenchmarkGetMany(b *testing.B) {
	tb := freshTable(b, openStore(b, Options{FlushInterval: time.Millisecond}))
	var muts []zen.Mutation
	for i := range 1000 {
		muts = append(muts, zen.Mutation{Key: benchKey(2 * i), Value: make([]byte, 8)})
	}
	if err := tb.Apply(b.Context(), muts); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 20, 200} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			keys := make([][]byte, n)
			i := 0
			for b.Loop() {
				for j := range keys {
					keys[j] = benchKey(i % 2000)
					i++
				}
				vals, err := zen.GetMany(b.Context(), tb, keys)
				if err != nil || len(vals) != len(keys) {
					b.Fatalf("GetMany = %d values, %v", len(vals), err)
				}
			}
		})
	}
}

func BenchmarkCheckAndSet(b *testing.B) {
	tb := freshTable(b, openStore(b, Options{}))
	b.ReportAllocs()
	k := benchKey(1)
	var cur []byte
	i := 0
	for b.Loop() {
		next := binary.BigEndian.AppendUint64(nil, uint64(i))
		ok, err := tb.CheckAndSet(b.Context(), k, cur, next)
		if err != nil || !ok {
			b.Fatalf("CheckAndSet = %v, %v", ok, err)
		}
		cur = next
		i++
	}
}
