// Package zentest holds the shared acceptance suites that every zen backend runs.
package zentest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
)

// RunTable runs the acceptance suite of the zen.Table contract. open must return a fresh, empty
// table for each call (each subtest calls it once).
func RunTable(t *testing.T, open func(t *testing.T) zen.Table) {
	t.Run("GetMissing", func(t *testing.T) { tableGetMissing(t, open(t)) })
	t.Run("ApplyPutDelete", func(t *testing.T) { tableApply(t, open(t)) })
	t.Run("ApplyLastWins", func(t *testing.T) { tableApplyLastWins(t, open(t)) })
	t.Run("Isolation", func(t *testing.T) { tableIsolation(t, open(t)) })
	t.Run("Scan", func(t *testing.T) { tableScan(t, open(t)) })
	t.Run("ScanWide", func(t *testing.T) { tableScanWide(t, open(t)) })
	t.Run("CheckAndSet", func(t *testing.T) { tableCAS(t, open(t)) })
	t.Run("CheckAndSetEmptyValue", func(t *testing.T) { tableCASEmpty(t, open(t)) })
	t.Run("Increment", func(t *testing.T) { tableIncrement(t, open(t)) })
	t.Run("ConcurrentIncrement", func(t *testing.T) { tableConcurrentIncrement(t, open(t)) })
	t.Run("ConcurrentCAS", func(t *testing.T) { tableConcurrentCAS(t, open(t)) })
	t.Run("ConcurrentCASCounter", func(t *testing.T) { tableConcurrentCASCounter(t, open(t)) })
	t.Run("Context", func(t *testing.T) { tableContext(t, open(t)) })
	t.Run("GetMany", func(t *testing.T) { tableGetMany(t, open(t)) })
	t.Run("CheckAndSetMany", func(t *testing.T) { tableCASMany(t, open(t), open(t)) })
	t.Run("ConcurrentCheckAndSetMany", func(t *testing.T) { tableConcurrentCASMany(t, open(t)) })
	t.Run("Carrier", func(t *testing.T) { tableCarrier(t, open(t)) })
	t.Run("ApplyLazy", func(t *testing.T) { tableApplyLazy(t, open(t)) })
}

// tableCarrier checks the optional zen.Carrier: the extra rows land with a compare-and-set that
// holds, not with one that is refused, and always with an increment; a bad extra key fails the
// call and writes nothing; the operation itself keeps CheckAndSet's and Increment's semantics.
func tableCarrier(t *testing.T, tb zen.Table) {
	c, ok := tb.(zen.Carrier)
	if !ok {
		t.Skip("table does not implement zen.Carrier")
	}
	ctx := tableCtx(t)
	ok, err := c.CheckAndSetWith(ctx, []byte("k"), nil, []byte("v1"), []zen.Mutation{tablePut("log1", "a"), tablePut("gone", "x")})
	if err != nil || !ok {
		t.Fatalf("CheckAndSetWith on an absent row = %v, %v; want it to hold", ok, err)
	}
	tableWant(t, tb, "k", []byte("v1"))
	tableWant(t, tb, "log1", []byte("a"))
	ok, err = c.CheckAndSetWith(ctx, []byte("k"), nil, []byte("v2"), []zen.Mutation{tablePut("log2", "b")})
	if err != nil || ok {
		t.Fatalf("CheckAndSetWith expecting absent on a present row = %v, %v; want refused", ok, err)
	}
	tableWant(t, tb, "k", []byte("v1"))
	tableWant(t, tb, "log2", nil)
	ok, err = c.CheckAndSetWith(ctx, []byte("k"), []byte("v1"), nil, []zen.Mutation{tableDel("gone"), tablePut("log3", "c")})
	if err != nil || !ok {
		t.Fatalf("CheckAndSetWith delete = %v, %v; want it to hold", ok, err)
	}
	tableWant(t, tb, "k", nil)
	tableWant(t, tb, "gone", nil)
	tableWant(t, tb, "log3", []byte("c"))
	for i, want := range []int64{5, 3} {
		n, err := c.IncrementWith(ctx, []byte("n"), []int64{5, -2}[i], []zen.Mutation{tablePut(fmt.Sprintf("inc%d", i), "d")})
		if err != nil || n != want {
			t.Fatalf("IncrementWith %d = %d, %v; want %d", i, n, err, want)
		}
		tableWant(t, tb, fmt.Sprintf("inc%d", i), []byte("d"))
	}
	tableWant(t, tb, "n", tableCounter(3))
	if _, err := c.CheckAndSetWith(ctx, []byte("k2"), nil, []byte("v"), []zen.Mutation{{Key: nil, Value: []byte("x")}}); err == nil {
		t.Error("CheckAndSetWith with an empty extra key: no error")
	}
	if _, err := c.IncrementWith(ctx, []byte("n2"), 1, []zen.Mutation{{Key: nil, Value: []byte("x")}}); err == nil {
		t.Error("IncrementWith with an empty extra key: no error")
	}
	tableWant(t, tb, "k2", nil)
	tableWant(t, tb, "n2", nil)
}

// tableGetMany checks the optional zen.MultiGetter against Get: one entry per key, in order, nil
// for absent rows, empty (not nil) for empty values, duplicates allowed.
func tableGetMany(t *testing.T, tb zen.Table) {
	mg, ok := tb.(zen.MultiGetter)
	if !ok {
		t.Skip("table does not implement zen.MultiGetter")
	}
	tableMustApply(t, tb, tablePut("a", "1"), tablePut("c", ""), tablePut("d", "4"))
	keys := [][]byte{[]byte("d"), []byte("b"), []byte("a"), []byte("c"), []byte("a")}
	for i := range 300 {
		keys = append(keys, []byte(fmt.Sprintf("z%03d", i)))
	}
	got, err := mg.GetMany(tableCtx(t), keys)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]byte, len(keys))
	want[0], want[2], want[3], want[4] = []byte("4"), []byte("1"), []byte{}, []byte("1")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetMany (-want +got):\n%s", diff)
	}
	if got[3] == nil {
		t.Errorf("GetMany: empty value came back nil (absent)")
	}
}

func tableCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tableMustApply(t *testing.T, tb zen.Table, muts ...zen.Mutation) {
	t.Helper()
	if err := tb.Apply(tableCtx(t), muts); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func tablePut(k, v string) zen.Mutation { return zen.Mutation{Key: []byte(k), Value: []byte(v)} }
func tableDel(k string) zen.Mutation    { return zen.Mutation{Key: []byte(k), Delete: true} }

// tableWant checks that key holds want, or is absent when want is nil.
func tableWant(t *testing.T, tb zen.Table, key string, want []byte) {
	t.Helper()
	got, err := tb.Get(tableCtx(t), []byte(key))
	if want == nil {
		if !errors.Is(err, zen.ErrNotFound) {
			t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %q, want %q", key, got, want)
	}
}

func tableCounter(n int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	return b[:]
}

func tableGetMissing(t *testing.T, tb zen.Table) {
	tableWant(t, tb, "nope", nil)
	tableMustApply(t, tb, tablePut("nope\x00", "x"), tablePut("nop", "y"))
	tableWant(t, tb, "nope", nil)
}

func tableApply(t *testing.T, tb zen.Table) {
	tableMustApply(t, tb,
		tablePut("a", "1"),
		tablePut("b\x00\xff", "binary\x00value"),
		tablePut("empty", ""),
		zen.Mutation{Key: []byte("nilvalue")}, // a nil Value is an empty value
		tablePut("c", "3"),
	)
	tableWant(t, tb, "a", []byte("1"))
	tableWant(t, tb, "b\x00\xff", []byte("binary\x00value"))
	tableWant(t, tb, "empty", []byte{})
	tableWant(t, tb, "nilvalue", []byte{})
	tableMustApply(t, tb, tablePut("a", "one"), tableDel("c"), tableDel("never-there"))
	tableWant(t, tb, "a", []byte("one"))
	tableWant(t, tb, "c", nil)
	tableWant(t, tb, "never-there", nil)
	if err := tb.Apply(tableCtx(t), nil); err != nil {
		t.Fatalf("Apply(nil): %v", err)
	}
	// A large batch lands completely.
	var muts []zen.Mutation
	for i := range 500 {
		muts = append(muts, tablePut(fmt.Sprintf("big/%04d", i), fmt.Sprint(i)))
	}
	tableMustApply(t, tb, muts...)
	got, err := tb.Scan(tableCtx(t), zen.ScanOptions{Start: []byte("big/"), Stop: []byte("big0")})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(got) != 500 || string(got[0].Key) != "big/0000" || string(got[499].Value) != "499" {
		t.Fatalf("Scan after a 500-row Apply: %d rows, want 500 from big/0000 to value 499", len(got))
	}
}

// tableApplyLazy: writes under zen.Lazily (Apply, CheckAndSet, CheckAndSetMany, the Carrier's)
// are visible when they return, to reads, scans and compare-and-sets, as without it.
func tableApplyLazy(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	tableMustApply(t, tb, tablePut("lazy/gone", "x"))
	if err := zen.ApplyLazy(ctx, tb, []zen.Mutation{tablePut("lazy/a", "1"), tablePut("lazy/b", "2"), tableDel("lazy/gone")}); err != nil {
		t.Fatalf("ApplyLazy: %v", err)
	}
	tableWant(t, tb, "lazy/a", []byte("1"))
	tableWant(t, tb, "lazy/gone", nil)
	got, err := tb.Scan(ctx, zen.ScanOptions{Start: []byte("lazy/"), Stop: []byte("lazy0")})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(got) != 2 || string(got[1].Value) != "2" {
		t.Fatalf("Scan after ApplyLazy: %d rows, want lazy/a and lazy/b", len(got))
	}
	ok, err := tb.CheckAndSet(ctx, []byte("lazy/b"), []byte("2"), []byte("3"))
	if err != nil || !ok {
		t.Fatalf("CheckAndSet over a lazy write: %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "lazy/b", []byte("3"))
	lctx := zen.Lazily(ctx)
	if ok, err := tb.CheckAndSet(lctx, []byte("lazy/b"), []byte("3"), []byte("4")); err != nil || !ok {
		t.Fatalf("lazy CheckAndSet: %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "lazy/b", []byte("4"))
	if cb, ok := tb.(zen.CondBatcher); ok {
		oks, err := cb.CheckAndSetMany(lctx, []zen.Cond{{Key: []byte("lazy/b"), Expected: []byte("4"), Value: []byte("5")},
			{Key: []byte("lazy/a"), Expected: []byte("wrong"), Value: []byte("x")}})
		if err != nil || len(oks) != 2 || !oks[0] || oks[1] {
			t.Fatalf("lazy CheckAndSetMany: %v, %v; want [true false]", oks, err)
		}
		tableWant(t, tb, "lazy/b", []byte("5"))
		tableWant(t, tb, "lazy/a", []byte("1"))
	}
	if c, ok := tb.(zen.Carrier); ok {
		ok, err := c.CheckAndSetWith(lctx, []byte("lazy/d"), nil, []byte("d"), []zen.Mutation{tablePut("lazy/e", "e")})
		if err == nil && !ok {
			t.Fatal("lazy CheckAndSetWith on an absent row: false")
		}
		if err == nil {
			tableWant(t, tb, "lazy/d", []byte("d"))
			tableWant(t, tb, "lazy/e", []byte("e"))
		}
	}
}

func tableApplyLastWins(t *testing.T, tb zen.Table) {
	tableMustApply(t, tb, tablePut("k1", "first"), tablePut("k1", "second"),
		tablePut("k2", "x"), tableDel("k2"),
		tableDel("k3"), tablePut("k3", "back"))
	tableWant(t, tb, "k1", []byte("second"))
	tableWant(t, tb, "k2", nil)
	tableWant(t, tb, "k3", []byte("back"))
	// Delete then put again at once, many times: a delete must never hide a later put.
	for i := range 20 {
		v := fmt.Sprint(i)
		tableMustApply(t, tb, tableDel("k4"))
		tableMustApply(t, tb, tablePut("k4", v))
		tableWant(t, tb, "k4", []byte(v))
	}
}

func tableIsolation(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	key, val := []byte("iso"), []byte("value")
	if err := tb.Apply(ctx, []zen.Mutation{{Key: key, Value: val}}); err != nil {
		t.Fatal(err)
	}
	val[0], key[0] = 'X', 'X' // the table must have copied both
	tableWant(t, tb, "iso", []byte("value"))
	got, err := tb.Get(ctx, []byte("iso"))
	if err != nil {
		t.Fatal(err)
	}
	got[0] = 'Y'
	tableWant(t, tb, "iso", []byte("value"))
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("Scan = %v, %v", rows, err)
	}
	rows[0].Key[0], rows[0].Value[0] = 'Z', 'Z'
	tableWant(t, tb, "iso", []byte("value"))
}

func tableScan(t *testing.T, tb zen.Table) {
	keys := []string{"a", "a\x00", "ab", "b", "ba", "c", "c\xff", "d"}
	var muts []zen.Mutation
	for _, k := range keys {
		muts = append(muts, tablePut(k, "v"+k))
	}
	tableMustApply(t, tb, muts...)
	b := func(s string) []byte { return []byte(s) }
	rev := func(ks []string) []string { ks = slices.Clone(ks); slices.Reverse(ks); return ks }
	tests := []struct {
		name string
		opts zen.ScanOptions
		want []string
	}{
		{"all", zen.ScanOptions{}, keys},
		{"all reverse", zen.ScanOptions{Reverse: true}, rev(keys)},
		{"start at key", zen.ScanOptions{Start: b("ab")}, keys[2:]},
		{"start between keys", zen.ScanOptions{Start: b("a\x01")}, keys[2:]},
		{"stop at key excluded", zen.ScanOptions{Stop: b("b")}, keys[:3]},
		{"stop between keys", zen.ScanOptions{Stop: b("aa")}, keys[:2]},
		{"start and stop", zen.ScanOptions{Start: b("a\x00"), Stop: b("c")}, keys[1:5]},
		{"start past end", zen.ScanOptions{Start: b("e")}, nil},
		{"stop before first", zen.ScanOptions{Stop: b("a")}, nil},
		{"start equals stop", zen.ScanOptions{Start: b("b"), Stop: b("b")}, nil},
		{"start after stop", zen.ScanOptions{Start: b("c"), Stop: b("b")}, nil},
		{"empty gap", zen.ScanOptions{Start: b("bb"), Stop: b("bc")}, nil},
		{"limit 1", zen.ScanOptions{Limit: 1}, keys[:1]},
		{"limit 3 from start", zen.ScanOptions{Start: b("ab"), Limit: 3}, keys[2:5]},
		{"limit equals rows", zen.ScanOptions{Start: b("c"), Limit: 3}, keys[5:]},
		{"limit beyond rows", zen.ScanOptions{Start: b("c"), Limit: 10}, keys[5:]},
		{"reverse stop at key excluded", zen.ScanOptions{Stop: b("c"), Reverse: true}, rev(keys[:5])},
		{"reverse stop between keys", zen.ScanOptions{Stop: b("bb"), Reverse: true}, rev(keys[:5])},
		{"reverse start at key included", zen.ScanOptions{Start: b("ab"), Reverse: true}, rev(keys[2:])},
		{"reverse start between keys", zen.ScanOptions{Start: b("a\x01"), Reverse: true}, rev(keys[2:])},
		{"reverse prefix of a key", zen.ScanOptions{Start: b("c"), Stop: b("c\xff"), Reverse: true}, []string{"c"}},
		{"reverse start and stop", zen.ScanOptions{Start: b("a\x00"), Stop: b("c"), Reverse: true}, rev(keys[1:5])},
		{"reverse limit 2", zen.ScanOptions{Stop: b("c"), Reverse: true, Limit: 2}, []string{"ba", "b"}},
		{"reverse limit 1 at end", zen.ScanOptions{Reverse: true, Limit: 1}, []string{"d"}},
		{"reverse start equals stop", zen.ScanOptions{Start: b("b"), Stop: b("b"), Reverse: true}, nil},
		{"reverse start after stop", zen.ScanOptions{Start: b("c"), Stop: b("b"), Reverse: true}, nil},
		{"reverse stop before first", zen.ScanOptions{Stop: b("a"), Reverse: true}, nil},
		{"reverse start past end", zen.ScanOptions{Start: b("d\x00"), Reverse: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := tb.Scan(tableCtx(t), tt.opts)
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			var want []zen.KV
			for _, k := range tt.want {
				want = append(want, zen.KV{Key: []byte(k), Value: []byte("v" + k)})
			}
			if diff := cmp.Diff(want, rows, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Scan(%+v) mismatch (-want +got):\n%s", tt.opts, diff)
			}
		})
	}
}

// tableScanWide scans 1,200 rows whose keys begin with IDs spread over every shard, so that a
// sharded backend crosses region boundaries (and scanner batches) in both directions.
func tableScanWide(t *testing.T, tb zen.Table) {
	const n = 1200
	var all []zen.KV
	for i := range n {
		shard := uint64(i*4096/n) ^ uint64(i%7) // spread, not in insertion order
		id := shard<<46 | 1<<36 | uint64(i)
		k := binary.BigEndian.AppendUint64(nil, id)
		k = append(k, byte(i%3))
		all = append(all, zen.KV{Key: k, Value: []byte(fmt.Sprint(i))})
	}
	var muts []zen.Mutation
	for _, kv := range all {
		muts = append(muts, zen.Mutation{Key: kv.Key, Value: kv.Value})
	}
	tableMustApply(t, tb, muts...)
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].Key, all[j].Key) < 0 })
	rev := slices.Clone(all)
	slices.Reverse(rev)
	lo, hi := all[100].Key, all[1000].Key
	type scanCase struct {
		name string
		opts zen.ScanOptions
		want []zen.KV
	}
	tests := []scanCase{
		{"forward", zen.ScanOptions{}, all},
		{"reverse", zen.ScanOptions{Reverse: true}, rev},
		{"forward range", zen.ScanOptions{Start: lo, Stop: hi}, all[100:1000]},
		{"reverse range", zen.ScanOptions{Start: lo, Stop: hi, Reverse: true}, rev[n-1000 : n-100]},
		{"forward limit", zen.ScanOptions{Start: lo, Limit: 700}, all[100:800]},
		{"reverse limit", zen.ScanOptions{Stop: hi, Reverse: true, Limit: 700}, rev[n-1000 : n-300]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tb.Scan(tableCtx(t), tt.opts)
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Scan mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// zen.ScanMany (the table's own ScanMany when it is a zen.MultiScanner) returns what each
	// Scan does, in order: the ranges above, and narrow ones of a few rows each.
	tests = append(tests,
		scanCase{"narrow", zen.ScanOptions{Start: all[10].Key, Stop: all[13].Key}, all[10:13]},
		scanCase{"narrow reverse", zen.ScanOptions{Start: all[600].Key, Stop: all[604].Key, Reverse: true}, rev[n-604 : n-600]},
		scanCase{"narrow limit", zen.ScanOptions{Start: all[1100].Key, Limit: 2}, all[1100:1102]})
	opts := make([]zen.ScanOptions, len(tests))
	for i, tt := range tests {
		opts[i] = tt.opts
	}
	pages, err := zen.ScanMany(tableCtx(t), tb, opts)
	if err != nil {
		t.Fatalf("ScanMany: %v", err)
	}
	if len(pages) != len(tests) {
		t.Fatalf("ScanMany: %d lists for %d scans", len(pages), len(tests))
	}
	for i, tt := range tests {
		if diff := cmp.Diff(tt.want, pages[i]); diff != "" {
			t.Errorf("ScanMany, scan %d (%s) (-want +got):\n%s", i, tt.name, diff)
		}
	}
}

func tableContext(t *testing.T, tb zen.Table) {
	tableMustApply(t, tb, tablePut("here", "v"))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"canceled", canceled, context.Canceled}, {"expired", expired, context.DeadlineExceeded}} {
		ctx := c.ctx
		calls := map[string]error{}
		_, calls["Get"] = tb.Get(ctx, []byte("here"))
		calls["Apply"] = tb.Apply(ctx, []zen.Mutation{{Key: []byte("ctx-apply"), Value: []byte("v")}})
		_, calls["Scan"] = tb.Scan(ctx, zen.ScanOptions{})
		_, calls["CheckAndSet"] = tb.CheckAndSet(ctx, []byte("ctx-cas"), nil, []byte("v"))
		_, calls["Increment"] = tb.Increment(ctx, []byte("ctx-inc"), 1)
		for name, err := range calls {
			if !errors.Is(err, c.want) {
				t.Errorf("%s with a %s context: error %v, want %v", name, c.name, err, c.want)
			}
		}
	}
	for _, k := range []string{"ctx-apply", "ctx-cas", "ctx-inc"} {
		tableWant(t, tb, k, nil)
	}
}
