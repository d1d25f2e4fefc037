// Package zentest holds the shared acceptance suites that every zen backend runs.
package zentest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
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

func tableCAS(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("cas")
	steps := []struct {
		name            string
		expected, value []byte
		wantOK          bool
		wantAfter       []byte // nil = absent
	}{
		{"set on absent expecting a value", []byte("x"), []byte("y"), false, nil},
		{"delete-if-equal on absent", []byte("x"), nil, false, nil},
		{"put if absent", nil, []byte("v1"), true, []byte("v1")},
		{"put if absent again", nil, []byte("v2"), false, []byte("v1")},
		{"swap with wrong expected", []byte("v0"), []byte("v2"), false, []byte("v1")},
		{"swap with a prefix of the value", []byte("v"), []byte("v2"), false, []byte("v1")},
		{"swap", []byte("v1"), []byte("v2"), true, []byte("v2")},
		{"swap to the same value", []byte("v2"), []byte("v2"), true, []byte("v2")},
		{"delete only if absent, present", nil, nil, false, []byte("v2")},
		{"delete-if-equal wrong", []byte("v1"), nil, false, []byte("v2")},
		{"delete-if-equal", []byte("v2"), nil, true, nil},
		{"delete-if-equal again", []byte("v2"), nil, false, nil},
		{"delete only if absent, absent", nil, nil, true, nil},
		{"put 8 bytes if absent", nil, tableCounter(7), true, tableCounter(7)},
		{"swap 8 bytes", tableCounter(7), []byte("short"), true, []byte("short")},
	}
	for _, s := range steps {
		ok, err := tb.CheckAndSet(ctx, k, s.expected, s.value)
		if err != nil {
			t.Fatalf("%s: CheckAndSet: %v", s.name, err)
		}
		if ok != s.wantOK {
			t.Fatalf("%s: CheckAndSet(%q, %q) = %v, want %v", s.name, s.expected, s.value, ok, s.wantOK)
		}
		tableWant(t, tb, "cas", s.wantAfter)
	}
	// A row written by Apply is seen by CheckAndSet and the other way round.
	tableMustApply(t, tb, tablePut("cas", "applied"))
	if ok, err := tb.CheckAndSet(ctx, k, []byte("applied"), []byte("cas")); err != nil || !ok {
		t.Fatalf("CheckAndSet after Apply = %v, %v", ok, err)
	}
	tableWant(t, tb, "cas", []byte("cas"))
	// A delete by Apply makes the row absent for put-if-absent.
	tableMustApply(t, tb, tableDel("cas"))
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte("again")); err != nil || !ok {
		t.Fatalf("put-if-absent after Apply delete = %v, %v", ok, err)
	}
	tableWant(t, tb, "cas", []byte("again"))
}

// tableCASEmpty checks that an empty value is present, not absent.
func tableCASEmpty(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("e")
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, []byte("x")); err != nil || ok {
		t.Fatalf("expecting empty on absent = %v, %v; want false", ok, err)
	}
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte{}); err != nil || !ok {
		t.Fatalf("put empty if absent = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", []byte{})
	if ok, err := tb.CheckAndSet(ctx, k, nil, []byte("x")); err != nil || ok {
		t.Fatalf("put if absent over an empty value = %v, %v; want false", ok, err)
	}
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, []byte("x")); err != nil || !ok {
		t.Fatalf("swap from empty = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", []byte("x"))
	tableMustApply(t, tb, tablePut("e", ""))
	if ok, err := tb.CheckAndSet(ctx, k, []byte{}, nil); err != nil || !ok {
		t.Fatalf("delete if empty = %v, %v; want true", ok, err)
	}
	tableWant(t, tb, "e", nil)
}

func tableIncrement(t *testing.T, tb zen.Table) {
	ctx := tableCtx(t)
	k := []byte("n")
	for _, s := range []struct{ delta, want int64 }{{5, 5}, {-7, -2}, {0, -2}, {1 << 40, 1<<40 - 2}} {
		got, err := tb.Increment(ctx, k, s.delta)
		if err != nil || got != s.want {
			t.Fatalf("Increment(%d) = %d, %v; want %d", s.delta, got, err, s.want)
		}
		tableWant(t, tb, "n", tableCounter(s.want))
	}
	// An 8-byte value written by Apply is a counter.
	tableMustApply(t, tb, zen.Mutation{Key: []byte("m"), Value: tableCounter(-1)})
	if got, err := tb.Increment(ctx, []byte("m"), 3); err != nil || got != 2 {
		t.Fatalf("Increment of an applied counter = %d, %v; want 2", got, err)
	}
	// A value of any other length is not a counter: error, and the value stays.
	for _, v := range []string{"abc", "", "1234567", "123456789"} {
		tableMustApply(t, tb, tablePut("s", v))
		if got, err := tb.Increment(ctx, []byte("s"), 1); err == nil {
			t.Fatalf("Increment of %q = %d, want an error", v, got)
		}
		tableWant(t, tb, "s", []byte(v))
	}
}

func tableConcurrentIncrement(t *testing.T, tb zen.Table) {
	const workers, each = 8, 40
	ctx := tableCtx(t)
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				n, err := tb.Increment(ctx, []byte("ctr"), 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[n] {
					mu.Unlock()
					errs <- fmt.Errorf("value %d returned twice", n)
					return
				}
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := int64(1); i <= workers*each; i++ {
		if !seen[i] {
			t.Fatalf("no Increment returned %d", i)
		}
	}
	tableWant(t, tb, "ctr", tableCounter(workers*each))
}

// tableRace runs fn in n goroutines released together and returns how many reported true.
func tableRace(t *testing.T, n int, fn func(i int) (bool, error)) []int {
	t.Helper()
	start := make(chan struct{})
	var mu sync.Mutex
	var winners []int
	var errs []error
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				winners = append(winners, i)
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return winners
}

func tableConcurrentCAS(t *testing.T, tb zen.Table) {
	const n = 16
	ctx := tableCtx(t)
	k := []byte("race")
	val := func(i int) []byte { return fmt.Appendf(nil, "w%02d", i) }
	for round := range 5 {
		tableMustApply(t, tb, zen.Mutation{Key: k, Delete: true})
		w := tableRace(t, n, func(i int) (bool, error) { return tb.CheckAndSet(ctx, k, nil, val(i)) })
		if len(w) != 1 {
			t.Fatalf("round %d: put-if-absent winners %v, want exactly one", round, w)
		}
		tableWant(t, tb, "race", val(w[0]))
		cur := val(w[0])
		w = tableRace(t, n, func(i int) (bool, error) { return tb.CheckAndSet(ctx, k, cur, val(100+i)) })
		if len(w) != 1 {
			t.Fatalf("round %d: swap winners %v, want exactly one", round, w)
		}
		cur = val(100 + w[0])
		tableWant(t, tb, "race", cur)
		w = tableRace(t, n, func(int) (bool, error) { return tb.CheckAndSet(ctx, k, cur, nil) })
		if len(w) != 1 {
			t.Fatalf("round %d: delete-if-equal winners %v, want exactly one", round, w)
		}
		tableWant(t, tb, "race", nil)
	}
}

// tableConcurrentCASCounter counts with read + CheckAndSet loops: a lost update would lose a count.
func tableConcurrentCASCounter(t *testing.T, tb zen.Table) {
	const workers, each = 4, 15
	ctx := tableCtx(t)
	k := []byte("cas-ctr")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				for {
					cur, err := tb.Get(ctx, k)
					var next []byte
					switch {
					case errors.Is(err, zen.ErrNotFound):
						cur, next = nil, []byte("1")
					case err != nil:
						errs <- err
						return
					default:
						var n int
						fmt.Sscan(string(cur), &n)
						next = fmt.Append(nil, n+1)
					}
					ok, err := tb.CheckAndSet(ctx, k, cur, next)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tableWant(t, tb, "cas-ctr", fmt.Append(nil, workers*each))
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

// RunRandomized replays the same n random operations (seeded) on a and b, which must start
// empty, and fails at the first result that differs. Keys come from a small alphabet so that
// scans, batches and compare-and-sets keep hitting the same rows. Use the reference model
// (zenmem) as a and the backend under test as b.
func RunRandomized(t *testing.T, a, b zen.Table, seed uint64, n int) {
	t.Helper()
	ctx := tableCtx(t)
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	key := func() []byte {
		k := make([]byte, 1+r.IntN(3))
		for i := range k {
			k[i] = "ab\x00\xff"[r.IntN(4)]
		}
		return k
	}
	bound := func() []byte {
		if r.IntN(4) == 0 {
			return nil
		}
		return key()
	}
	values := [][]byte{{}, []byte("x"), []byte("yy"), []byte("1234567"), []byte("123456789"),
		tableCounter(0), tableCounter(-1), tableCounter(42)}
	value := func() []byte { return values[r.IntN(len(values))] }
	type result struct {
		Value []byte
		Rows  []zen.KV
		OK    bool
		N     int64
		Err   string // "" = none, "notfound", "error"
	}
	errKind := func(err error) string {
		switch {
		case err == nil:
			return ""
		case errors.Is(err, zen.ErrNotFound):
			return "notfound"
		default:
			return "error"
		}
	}
	run := func(tb zen.Table, op int, args []any) result {
		switch op {
		case 0:
			v, err := tb.Get(ctx, args[0].([]byte))
			return result{Value: v, Err: errKind(err)}
		case 1:
			return result{Err: errKind(tb.Apply(ctx, args[0].([]zen.Mutation)))}
		case 2:
			rows, err := tb.Scan(ctx, args[0].(zen.ScanOptions))
			return result{Rows: rows, Err: errKind(err)}
		case 3:
			ok, err := tb.CheckAndSet(ctx, args[0].([]byte), args[1].([]byte), args[2].([]byte))
			return result{OK: ok, Err: errKind(err)}
		default:
			v, err := tb.Increment(ctx, args[0].([]byte), args[1].(int64))
			return result{N: v, Err: errKind(err)}
		}
	}
	for i := range n {
		op := r.IntN(5)
		var args []any
		switch op {
		case 0:
			args = []any{key()}
		case 1:
			var muts []zen.Mutation
			for range 1 + r.IntN(4) {
				muts = append(muts, zen.Mutation{Key: key(), Value: value(), Delete: r.IntN(3) == 0})
			}
			args = []any{muts}
		case 2:
			args = []any{zen.ScanOptions{Start: bound(), Stop: bound(), Reverse: r.IntN(2) == 0, Limit: r.IntN(5)}}
		case 3:
			k := key()
			var expected []byte
			switch r.IntN(3) {
			case 0: // nil: only if absent
			case 1:
				expected = value()
			default: // the current value, so that swaps succeed often
				if v, err := a.Get(ctx, k); err == nil {
					expected = v
				} else {
					expected = value()
				}
			}
			var v []byte
			if r.IntN(3) > 0 {
				v = value()
			}
			args = []any{k, expected, v}
		default:
			args = []any{key(), int64(r.IntN(11) - 5)}
		}
		ra, rb := run(a, op, args), run(b, op, args)
		if diff := cmp.Diff(ra, rb, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("seed %d op %d: %s%q: results differ (-model +backend):\n%s",
				seed, i, [...]string{"Get", "Apply", "Scan", "CheckAndSet", "Increment"}[op], args, diff)
		}
	}
	full := func(tb zen.Table) []zen.KV {
		rows, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatalf("final Scan: %v", err)
		}
		return rows
	}
	if diff := cmp.Diff(full(a), full(b), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("seed %d: final contents differ (-model +backend):\n%s", seed, diff)
	}
}

// tableCASMany checks the optional zen.CondBatcher against sequential CheckAndSets on a second
// table (ref) holding the same rows: the same results, in order, and the same rows afterwards.
func tableCASMany(t *testing.T, tb, ref zen.Table) {
	cb, ok := tb.(zen.CondBatcher)
	if !ok {
		t.Skip("table does not implement zen.CondBatcher")
	}
	ctx := tableCtx(t)
	seed := []zen.Mutation{tablePut("a", "1"), tablePut("e", ""), tablePut("d", "4"), tablePut("c8", "")}
	tableMustApply(t, tb, seed...)
	tableMustApply(t, ref, seed...)
	b := func(s string) []byte { return []byte(s) }
	// check runs conds on both tables and compares results and contents.
	check := func(name string, conds []zen.Cond) {
		t.Helper()
		got, err := cb.CheckAndSetMany(ctx, conds)
		if err != nil {
			t.Fatalf("%s: CheckAndSetMany: %v", name, err)
		}
		want := make([]bool, len(conds))
		for i, c := range conds {
			if want[i], err = ref.CheckAndSet(ctx, c.Key, c.Expected, c.Value); err != nil {
				t.Fatalf("%s: CheckAndSet %d: %v", name, i, err)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: results (-sequential CheckAndSet +CheckAndSetMany):\n%s", name, diff)
		}
		wantRows, err := ref.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gotRows, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantRows, gotRows); diff != "" {
			t.Fatalf("%s: rows (-sequential CheckAndSet +CheckAndSetMany):\n%s", name, diff)
		}
	}
	got, err := cb.CheckAndSetMany(ctx, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("CheckAndSetMany(nil) = %v, %v; want no results", got, err)
	}
	check("fixed", []zen.Cond{
		{Key: b("new"), Expected: nil, Value: b("n1")},        // put if absent: wins
		{Key: b("a"), Expected: nil, Value: b("x")},           // put if absent, present: loses
		{Key: b("d"), Expected: b("0"), Value: b("x")},        // wrong expected
		{Key: b("d"), Expected: b("4"), Value: b("5")},        // swap (after a loss on the same key)
		{Key: b("e"), Expected: b(""), Value: b("was empty")}, // swap from empty
		{Key: b("gone"), Expected: b(""), Value: b("x")},      // expecting empty on absent
		{Key: b("c8"), Expected: b(""), Value: nil},           // delete if empty
		{Key: b("a"), Expected: b("1"), Value: nil},           // delete if equal
		{Key: b("none"), Expected: nil, Value: nil},           // delete if absent, absent: holds
		{Key: b("empty"), Expected: nil, Value: b("")},        // put an empty value
		{Key: b("empty"), Expected: nil, Value: b("x")},       // ...which is present
		// The same key several times: each sees what the earlier ones left.
		{Key: b("k"), Expected: nil, Value: b("v1")},
		{Key: b("k"), Expected: b("v1"), Value: b("v2")},
		{Key: b("k"), Expected: nil, Value: b("v3")},
		{Key: b("k"), Expected: b("v2"), Value: nil},
		{Key: b("k"), Expected: b("v2"), Value: b("v4")},
		{Key: b("k"), Expected: nil, Value: b("v5")},
		{Key: b("new"), Expected: b("n1"), Value: b("n2")},
	})
	tableWant(t, tb, "k", b("v5"))
	tableWant(t, tb, "empty", []byte{})
	tableWant(t, tb, "a", nil)
	// Random rounds over a few keys: expected values are the current one, a stale one, absent
	// or empty; values are puts (some empty) and deletes.
	rng := rand.New(rand.NewPCG(7, 11))
	vals := [][]byte{nil, {}, b("p"), b("q"), b("r"), tableCounter(3)}
	for round := range 20 {
		conds := make([]zen.Cond, 1+rng.IntN(40))
		for i := range conds {
			k := fmt.Appendf(nil, "r%d", rng.IntN(8))
			var exp []byte
			if rng.IntN(2) == 0 {
				cur, err := ref.Get(ctx, k)
				if err == nil {
					exp = cur
				}
			} else {
				exp = vals[rng.IntN(len(vals))]
			}
			conds[i] = zen.Cond{Key: k, Expected: exp, Value: vals[rng.IntN(len(vals))]}
		}
		check(fmt.Sprintf("round %d", round), conds)
	}
	// A bad key fails the call before any write.
	before, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CheckAndSetMany(ctx, []zen.Cond{{Key: b("zz"), Value: b("x")}, {Key: nil, Value: b("x")}}); err == nil {
		t.Fatalf("CheckAndSetMany with an empty key: no error")
	}
	after, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("a refused CheckAndSetMany wrote (-before +after):\n%s", diff)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cb.CheckAndSetMany(cctx, []zen.Cond{{Key: b("zz"), Value: b("x")}}); err == nil {
		t.Fatalf("CheckAndSetMany with a cancelled context: no error")
	}
	tableWant(t, tb, "zz", nil)
}

// tableConcurrentCASMany races CheckAndSetMany calls against single CheckAndSets on the same
// keys: every key has exactly one winner, and holds the winner's value.
func tableConcurrentCASMany(t *testing.T, tb zen.Table) {
	cb, ok := tb.(zen.CondBatcher)
	if !ok {
		t.Skip("table does not implement zen.CondBatcher")
	}
	const keys, many, single = 12, 4, 8
	ctx := tableCtx(t)
	key := func(k int) []byte { return fmt.Appendf(nil, "m%02d", k) }
	for round := range 4 {
		var dels []zen.Mutation
		for k := range keys {
			dels = append(dels, zen.Mutation{Key: key(k), Delete: true})
		}
		tableMustApply(t, tb, dels...)
		var mu sync.Mutex
		winners := make([][]string, keys)
		win := func(k int, who string) {
			mu.Lock()
			defer mu.Unlock()
			winners[k] = append(winners[k], who)
		}
		tableRace(t, many+single*keys, func(i int) (bool, error) {
			if i < many {
				// Each batch names the keys in its own order, some twice.
				conds := make([]zen.Cond, 0, keys+2)
				who := fmt.Sprintf("many%d", i)
				for j := range keys {
					conds = append(conds, zen.Cond{Key: key((j + i*5) % keys), Value: []byte(who)})
				}
				conds = append(conds, zen.Cond{Key: key(i), Value: []byte(who)}, zen.Cond{Key: key(i + 1), Value: []byte(who)})
				got, err := cb.CheckAndSetMany(ctx, conds)
				if err != nil {
					return false, err
				}
				for j, ok := range got {
					if ok {
						k, _ := strconv.Atoi(string(conds[j].Key[1:]))
						win(k, who)
					}
				}
				return false, nil
			}
			k, who := (i-many)%keys, fmt.Sprintf("single%d", i)
			ok, err := tb.CheckAndSet(ctx, key(k), nil, []byte(who))
			if ok {
				win(k, who)
			}
			return false, err
		})
		for k := range keys {
			if len(winners[k]) != 1 {
				t.Fatalf("round %d: key %s: winners %v, want exactly one", round, key(k), winners[k])
			}
			tableWant(t, tb, string(key(k)), []byte(winners[k][0]))
		}
	}
}
