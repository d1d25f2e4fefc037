package zenpebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

func openStore(t testing.TB, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func openTable(t testing.TB, s *Store, name string) zen.Table {
	t.Helper()
	tb, err := s.Table(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestTableMem(t *testing.T) {
	zentest.RunTable(t, func(t *testing.T) zen.Table { return openTable(t, openStore(t, ""), "t") })
}

// TestTableMemYield runs the suite with a pause between the read and the write of every
// CheckAndSet and Increment, so that the concurrency cases would catch a missing lock.
func TestTableMemYield(t *testing.T) {
	zentest.RunTable(t, func(t *testing.T) zen.Table {
		s := openStore(t, "")
		s.afterRead = func() {
			// sleep: the pause between read and write is the window a missing lock would leave open.
			time.Sleep(20 * time.Microsecond)
		}
		return openTable(t, s, "t")
	})
}

func TestTableDisk(t *testing.T) {
	// One store, a table per subtest beside a neighbour table that must stay invisible.
	s := openStore(t, t.TempDir())
	n := 0
	zentest.RunTable(t, func(t *testing.T) zen.Table {
		n++
		nb := openTable(t, s, fmt.Sprintf("t%d", n))
		if err := nb.Apply(t.Context(), []zen.Mutation{{Key: []byte("zzz-neighbour"), Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		n++
		return openTable(t, s, fmt.Sprintf("t%d", n))
	})
}

func TestRandomizedVsModel(t *testing.T) {
	for _, seed := range zentest.Seeds(t, 8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t, "")
			// A neighbouring table with keys on both sides must never leak in.
			for _, name := range []string{"r", "ra", "q"} {
				tb := openTable(t, s, name)
				if err := tb.Apply(t.Context(), []zen.Mutation{{Key: []byte("a"), Value: []byte(name)}, {Key: []byte{0xff, 0xff}, Value: []byte(name)}}); err != nil {
					t.Fatal(err)
				}
			}
			model, _ := zenmem.New().Table(t.Context(), "r")
			zentest.RunRandomized(t, model, openTable(t, s, "r_"), seed, 3000)
		})
	}
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb := openTable(t, s, "objects")
	if err := tb.Apply(t.Context(), []zen.Mutation{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Increment(t.Context(), []byte("c"), 41); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(t.Context(), []byte("k")); err == nil {
		t.Fatal("Get after Close succeeded")
	}
	s2 := openStore(t, dir)
	tb2 := openTable(t, s2, "objects")
	if v, err := tb2.Get(t.Context(), []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after reopen Get = %q, %v", v, err)
	}
	if n, err := tb2.Increment(t.Context(), []byte("c"), 1); err != nil || n != 42 {
		t.Fatalf("after reopen Increment = %d, %v", n, err)
	}
}

func TestBadInput(t *testing.T) {
	s := openStore(t, "")
	for _, name := range []string{"", "Upper", "a-b", "a\x00b", string(make([]byte, 65))} {
		if _, err := s.Table(t.Context(), name); err == nil {
			t.Errorf("Table(%q) succeeded, want an error", name)
		}
	}
	tb := openTable(t, s, "t")
	ctx := t.Context()
	if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte("ok"), Value: []byte("v")}, {Key: nil, Value: []byte("v")}}); err == nil {
		t.Error("Apply with an empty key succeeded")
	}
	if _, err := tb.Get(ctx, []byte("ok")); err == nil {
		t.Error("a refused Apply wrote its valid rows")
	}
	if _, err := tb.Get(ctx, nil); err == nil {
		t.Error("Get(nil) succeeded")
	}
	if _, err := tb.CheckAndSet(ctx, nil, nil, []byte("v")); err == nil {
		t.Error("CheckAndSet(nil key) succeeded")
	}
	if err := tb.Apply(ctx, []zen.Mutation{{Key: make([]byte, MaxKeyLen+1)}}); err == nil {
		t.Error("Apply with an over-long key succeeded")
	}
	if _, err := tb.Increment(ctx, []byte{}, 1); err == nil {
		t.Error("Increment(empty key) succeeded")
	}
	if _, err := tb.Scan(ctx, zen.ScanOptions{Limit: -1}); err == nil {
		t.Error("Scan with a negative limit succeeded")
	}
}

// TestApplyVersusCAS races Apply against CheckAndSet on one row. One goroutine Applies markers
// m0, m1, ...; others move a marker m to m+ by CheckAndSet. Right after Apply(m) returns, the
// row can only hold m or m+: anything else means a CheckAndSet read an older marker and wrote
// over m, the lost update that Apply taking the row's stripe lock prevents.
func TestApplyVersusCAS(t *testing.T) {
	s := openStore(t, "", WithNoSync())
	s.afterRead = func() {
		// sleep: the pause between read and write is the window a missing lock would leave open.
		time.Sleep(20 * time.Microsecond)
	}
	tb := openTable(t, s, "t")
	ctx := t.Context()
	k := []byte("k")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := tb.Get(ctx, k)
				if err != nil || len(v) == 0 || v[len(v)-1] == '+' {
					time.Sleep(10 * time.Microsecond)
					continue
				}
				if _, err := tb.CheckAndSet(ctx, k, v, append(v, '+')); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for i := range 1000 {
		m := fmt.Sprintf("m%d", i)
		if err := tb.Apply(ctx, []zen.Mutation{{Key: k, Value: []byte(m)}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Microsecond) // let a racing CheckAndSet finish its write
		v, err := tb.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != m && string(v) != m+"+" {
			t.Fatalf("after Apply(%s) the row holds %q: a CheckAndSet wrote over a value it did not read", m, v)
		}
	}
}

func benchTable(b *testing.B, dir string, opts ...Option) zen.Table {
	return openTable(b, openStore(b, dir, opts...), "bench")
}

func benchKey(i int) []byte {
	k := make([]byte, 24)
	binary.BigEndian.PutUint64(k, uint64(i%4096)<<46|3<<36|uint64(i))
	binary.BigEndian.PutUint64(k[8:], uint64(i)*0x9e3779b97f4a7c15)
	binary.BigEndian.PutUint64(k[16:], uint64(i))
	return k
}

func benchApply(b *testing.B, tb zen.Table) {
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

func BenchmarkApply100Mem(b *testing.B)      { benchApply(b, benchTable(b, "")) }
func BenchmarkApply100DiskSync(b *testing.B) { benchApply(b, benchTable(b, b.TempDir())) }
func BenchmarkApply100DiskNoSync(b *testing.B) {
	benchApply(b, benchTable(b, b.TempDir(), WithNoSync()))
}

// fillPrefix writes 50 rows under each of 100 8-byte user prefixes plus filler.
func fillPrefix(b *testing.B, tb zen.Table) {
	var muts []zen.Mutation
	for u := range 100 {
		for j := range 50 {
			k := binary.BigEndian.AppendUint64(nil, uint64(u)<<46)
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
	tb := benchTable(b, b.TempDir(), WithNoSync())
	fillPrefix(b, tb)
	b.ReportAllocs()
	u := 0
	for b.Loop() {
		start := binary.BigEndian.AppendUint64(nil, uint64(u%100)<<46)
		stop := binary.BigEndian.AppendUint64(nil, uint64(u%100)<<46+1)
		rows, err := tb.Scan(b.Context(), zen.ScanOptions{Start: start, Stop: stop})
		if err != nil || len(rows) != 50 {
			b.Fatalf("Scan = %d rows, %v", len(rows), err)
		}
		u++
	}
}

func BenchmarkGet(b *testing.B) {
	tb := benchTable(b, b.TempDir(), WithNoSync())
	fillPrefix(b, tb)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := binary.BigEndian.AppendUint64(nil, uint64(i%100)<<46)
		k = binary.BigEndian.AppendUint64(k, uint64(i%50))
		k = binary.BigEndian.AppendUint64(k, uint64(i%50*7))
		if _, err := tb.Get(b.Context(), k); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func benchCAS(b *testing.B, tb zen.Table) {
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

func BenchmarkCheckAndSetDiskSync(b *testing.B) { benchCAS(b, benchTable(b, b.TempDir())) }
func BenchmarkCheckAndSetDiskNoSync(b *testing.B) {
	benchCAS(b, benchTable(b, b.TempDir(), WithNoSync()))
}

// TestStripeByEntity: the rows of one entity (keys sharing their first stripePrefix bytes, the
// ID that starts zen's row keys) share one lock stripe, so a call on many of a user's rows takes
// one; a key shorter than the prefix is hashed whole.
func TestStripeByEntity(t *testing.T) {
	s := openStore(t, "")
	tb := openTable(t, s, "t").(*Table)
	user := []byte{0, 0, 0, 0, 0, 0, 0, 42}
	first := tb.stripe(append(append([]byte{}, user...), "pool|a"...))
	for _, rest := range []string{"", "pool|b", "feed|zzz", "\xff\xff\xff"} {
		if got := tb.stripe(append(append([]byte{}, user...), rest...)); got != first {
			t.Errorf("stripe of user 42's row %q = %d, want %d (the user's)", rest, got, first)
		}
	}
	distinct := map[int]bool{}
	for i := range 64 {
		distinct[tb.stripe([]byte{byte(i)})] = true
	}
	if len(distinct) < 32 {
		t.Errorf("64 one-byte keys took %d stripes, want them spread", len(distinct))
	}
}
