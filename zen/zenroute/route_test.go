package zenroute_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenroute"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// splitMap puts shards 0–23 and 41–4095 on "default" and 24–40 on "other": the model suite's
// shards 1, 2, 7 and 3429 land on both sides, and so do the randomized table suite's keys
// (00 00… on shard 0, 00 61…/00 62… on shard 24, 00 ff… on shard 63, ASCII past the map).
func splitMap(t testing.TB) *zen.ShardMap {
	t.Helper()
	m, err := zen.NewShardMap([]zen.ShardRange{
		{From: 0, To: 1, Store: "default", Open: true},
		{From: 2, To: 2, Store: "other", Open: true},
		{From: 3, To: 23, Store: "default", Open: true},
		{From: 24, To: 40, Store: "other", Open: true},
		{From: 41, To: 3428, Store: "default", Open: true},
		{From: 3429, To: 3429, Store: "other", Open: true},
		{From: 3430, To: 4095, Store: "default", Open: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newRouted(t testing.TB, m *zen.ShardMap, o zenroute.Options) (*zenroute.Store, map[string]zen.Store) {
	t.Helper()
	backs := map[string]zen.Store{"default": zenmem.New(), "other": zenmem.New()}
	s, err := zenroute.New(backs, m, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, backs
}

// TestTable runs the table acceptance suite over a routed table split across two stores.
func TestTable(t *testing.T) {
	zentest.RunTable(t, func(t *testing.T) zen.Table {
		s, _ := newRouted(t, splitMap(t), zenroute.Options{})
		tb, err := s.Table(t.Context(), zen.TableEdges)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	})
}

// TestTableRandomized compares random table operations on a routed table (whose keys fall on
// both stores, interleaved) with one zenmem table.
func TestTableRandomized(t *testing.T) {
	for _, seed := range zentest.Seeds(t, 4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s, _ := newRouted(t, splitMap(t), zenroute.Options{})
			tb, err := s.Table(t.Context(), zen.TableObjects)
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := zenmem.New().Table(t.Context(), "t")
			zentest.RunRandomized(t, ref, tb, seed, 3000)
		})
	}
}

// TestModel runs the whole zen API acceptance suite over two stores split by shard.
func TestModel(t *testing.T) {
	zentest.RunModel(t, func(t *testing.T) zen.Store {
		s, _ := newRouted(t, splitMap(t), zenroute.Options{})
		return s
	})
}

// TestModelRandomized compares random zen operations on the routed store with zenmem.
func TestModelRandomized(t *testing.T) {
	for _, seed := range zentest.Seeds(t, 2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s, _ := newRouted(t, splitMap(t), zenroute.Options{})
			zentest.RunModelRandomized(t, zenmem.New(), s, seed, 1000)
		})
	}
}

func idKey(shard uint16, local uint64) []byte {
	id, _ := zen.NewID(shard, zen.TypeUser, local)
	return binary.BigEndian.AppendUint64(nil, uint64(id))
}

// TestRouting checks where rows land: by shard, unrouted tables on the default store, and a scan
// across stores in key order both ways with limits.
func TestRouting(t *testing.T) {
	ctx := t.Context()
	s, backs := newRouted(t, splitMap(t), zenroute.Options{})
	tb, err := s.Table(ctx, zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	var muts []zen.Mutation
	for _, sh := range []uint16{0, 1, 2, 3, 24, 3429, 4095} {
		muts = append(muts, zen.Mutation{Key: idKey(sh, 1), Value: []byte(fmt.Sprint(sh))})
	}
	if err := tb.Apply(ctx, muts); err != nil {
		t.Fatal(err)
	}
	shardsOn := func(store string) []uint32 {
		it, _ := backs[store].Table(ctx, zen.TableObjects)
		kvs, err := it.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []uint32
		for _, kv := range kvs {
			out = append(out, zen.KeyShard(kv.Key))
		}
		return out
	}
	if diff := cmp.Diff([]uint32{0, 1, 3, 4095}, shardsOn("default")); diff != "" {
		t.Errorf("default store shards (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{2, 24, 3429}, shardsOn("other")); diff != "" {
		t.Errorf("other store shards (-want +got):\n%s", diff)
	}
	shardsOf := func(kvs []zen.KV) []uint32 {
		var out []uint32
		for _, kv := range kvs {
			out = append(out, zen.KeyShard(kv.Key))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		o    zen.ScanOptions
		want []uint32
	}{
		{"all", zen.ScanOptions{}, []uint32{0, 1, 2, 3, 24, 3429, 4095}},
		{"reverse", zen.ScanOptions{Reverse: true}, []uint32{4095, 3429, 24, 3, 2, 1, 0}},
		{"limit", zen.ScanOptions{Limit: 3}, []uint32{0, 1, 2}},
		{"reverse limit", zen.ScanOptions{Reverse: true, Limit: 2}, []uint32{4095, 3429}},
		{"bounded", zen.ScanOptions{Start: idKey(2, 0), Stop: idKey(3429, 1)}, []uint32{2, 3, 24}},
		{"inside one shard", zen.ScanOptions{Start: idKey(24, 0), Stop: idKey(25, 0)}, []uint32{24}},
	} {
		kvs, err := tb.Scan(ctx, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, shardsOf(kvs)); diff != "" {
			t.Errorf("%s: shards (-want +got):\n%s", tc.name, diff)
		}
	}
	// An unrouted table is the default store's own.
	feed, _ := s.Table(ctx, "feed")
	if err := feed.Apply(ctx, []zen.Mutation{{Key: idKey(2, 9), Value: []byte("f")}}); err != nil {
		t.Fatal(err)
	}
	df, _ := backs["default"].Table(ctx, "feed")
	if v, err := df.Get(ctx, idKey(2, 9)); err != nil || string(v) != "f" {
		t.Errorf("unrouted row on default = %q, %v", v, err)
	}
	// Extra rows on another store: refused as unsupported, nothing written.
	c := tb.(zen.Carrier)
	_, err = c.CheckAndSetWith(ctx, idKey(1, 5), nil, []byte("v"), []zen.Mutation{{Key: idKey(2, 5), Value: []byte("x")}})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("cross-store CheckAndSetWith err = %v, want ErrUnsupported", err)
	}
	if _, err := tb.Get(ctx, idKey(1, 5)); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("cross-store CheckAndSetWith wrote its key: %v", err)
	}
	// A map naming an unknown store is refused and changes nothing.
	bad, _ := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 4095, Store: "nowhere", Open: true}})
	if err := s.Swap(ctx, bad); err == nil {
		t.Error("Swap to a map with an unknown store: no error")
	}
}

// TestFence checks the write fence: writes to fenced shards wait and then follow the new map,
// or fail with ErrFenced after FenceWait; reads of fenced shards and writes to other shards go on;
// Swap waits for the writes in flight under the previous map.
func TestFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		base := splitMap(t)
		s, backs := newRouted(t, base, zenroute.Options{FenceWait: 300 * time.Millisecond})
		tb, _ := s.Table(ctx, zen.TableObjects)
		if err := tb.Apply(ctx, []zen.Mutation{{Key: idKey(5, 1), Value: []byte("old")}}); err != nil {
			t.Fatal(err)
		}
		fenced, err := base.With(5, 6, func(r *zen.ShardRange) { r.Fenced = true })
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Swap(ctx, fenced); err != nil {
			t.Fatal(err)
		}
		// Reads of the fenced shard, and writes to another shard, do not wait.
		start := time.Now()
		if v, err := tb.Get(ctx, idKey(5, 1)); err != nil || string(v) != "old" {
			t.Errorf("read of a fenced shard = %q, %v", v, err)
		}
		if err := tb.Apply(ctx, []zen.Mutation{{Key: idKey(7, 1), Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("unfenced operations took %v", d)
		}
		// A write to the fenced shard fails after FenceWait when the fence stays.
		start = time.Now()
		_, err = tb.Increment(ctx, idKey(6, 1), 1)
		if !errors.Is(err, zenroute.ErrFenced) {
			t.Fatalf("write under a fence that stays: err %v, want ErrFenced", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("fenced write failed after %v, before FenceWait", d)
		}
		// A write that waits goes to the new store once the switch lifts the fence.
		moved, _ := base.With(5, 6, func(r *zen.ShardRange) { r.Store = "other" })
		done := make(chan error, 1)
		go func() { done <- tb.Apply(ctx, []zen.Mutation{{Key: idKey(5, 1), Value: []byte("new")}}) }()
		synctest.Wait() // the write waits at the fence
		if err := s.Swap(ctx, moved); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("write waiting on the fence: %v", err)
		}
		other, _ := backs["other"].Table(ctx, zen.TableObjects)
		if v, err := other.Get(ctx, idKey(5, 1)); err != nil || string(v) != "new" {
			t.Errorf("write after the switch on the target = %q, %v", v, err)
		}
		def, _ := backs["default"].Table(ctx, zen.TableObjects)
		if v, _ := def.Get(ctx, idKey(5, 1)); string(v) != "old" {
			t.Errorf("write after the switch reached the source: %q", v)
		}
	})
}

// slowTable delays Apply until release is closed, to hold a write in flight.
type slowTable struct {
	zen.Table
	entered chan struct{}
	release chan struct{}
}

func (s *slowTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	close(s.entered)
	<-s.release
	return s.Table.Apply(ctx, muts)
}

type slowStore struct {
	zen.Store
	t *slowTable
}

func (s slowStore) Table(ctx context.Context, name string) (zen.Table, error) {
	inner, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	s.t.Table = inner
	return s.t, nil
}

// TestSwapWaitsForInflightWrites checks that Swap returns only after a write that started under
// the previous map has landed, so a fence cannot miss it.
func TestSwapWaitsForInflightWrites(t *testing.T) {
	ctx := t.Context()
	slow := &slowTable{entered: make(chan struct{}), release: make(chan struct{})}
	backs := map[string]zen.Store{"default": slowStore{Store: zenmem.New(), t: slow}, "other": zenmem.New()}
	base := zen.DefaultShardMap()
	s, err := zenroute.New(backs, base, zenroute.Options{Routed: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := s.Table(ctx, "t")
	var wg sync.WaitGroup
	wg.Go(func() { _ = tb.Apply(ctx, []zen.Mutation{{Key: idKey(5, 1), Value: []byte("v")}}) })
	<-slow.entered
	fenced, _ := base.With(5, 5, func(r *zen.ShardRange) { r.Fenced = true })
	swapped := make(chan struct{})
	go func() { _ = s.Swap(ctx, fenced); close(swapped) }()
	select {
	case <-swapped:
		t.Fatal("Swap returned while a write under the previous map was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(slow.release)
	select {
	case <-swapped:
	case <-time.After(5 * time.Second):
		t.Fatal("Swap did not return after the in-flight write finished")
	}
	wg.Wait()
}

// TestLease checks the router's lease on its map: without a valid lease a shard-keyed write
// waits, then fails with ErrNotCurrent having written nothing (reads go on); an extension lets a
// waiting write through; and a write that was on its way when the lease lapsed (the process
// stalled in it) is not acknowledged: it fails with ErrLeaseLapsed.
func TestLease(t *testing.T) {
	ctx := t.Context()
	slow := &slowTable{entered: make(chan struct{}), release: make(chan struct{})}
	mem := zenmem.New()
	backs := map[string]zen.Store{"default": slowStore{Store: mem, t: slow}, "other": zenmem.New()}
	lease := zenroute.NewLease()
	s, err := zenroute.New(backs, zen.DefaultShardMap(), zenroute.Options{Routed: []string{"t"},
		FenceWait: 200 * time.Millisecond, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := s.Table(ctx, "t")
	raw, _ := mem.Table(ctx, "t")

	// No lease yet: the write waits FenceWait and fails; nothing reached the store.
	start := time.Now()
	_, err = tb.Increment(ctx, idKey(5, 1), 1)
	if !errors.Is(err, zenroute.ErrNotCurrent) || !errors.Is(err, zenroute.ErrFenced) || !errors.Is(err, zen.ErrUnavailable) {
		t.Fatalf("write without a lease: err %v, want ErrNotCurrent (ErrFenced, zen.ErrUnavailable)", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("write without a lease failed after %v, before FenceWait", d)
	}
	if _, err := raw.Get(ctx, idKey(5, 1)); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("a write without a lease reached the store: %v", err)
	}
	if _, err := tb.Get(ctx, idKey(5, 1)); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("read without a lease: %v, want ErrNotFound", err)
	}

	// A write waiting for the lease goes through once it is extended.
	done := make(chan error, 1)
	go func() {
		_, err := tb.Increment(ctx, idKey(5, 2), 1)
		done <- err
	}()
	lease.Extend(time.Now().Add(time.Minute))
	if err := <-done; err != nil {
		t.Fatalf("write once the lease was extended: %v", err)
	}

	// A write in flight while the lease lapses fails, though the store took it.
	s2lease := zenroute.NewLease()
	s2, err := zenroute.New(backs, zen.DefaultShardMap(), zenroute.Options{Routed: []string{"t"}, Lease: s2lease})
	if err != nil {
		t.Fatal(err)
	}
	tb2, _ := s2.Table(ctx, "t")
	s2lease.Extend(time.Now().Add(100 * time.Millisecond))
	go func() { done <- tb2.Apply(ctx, []zen.Mutation{{Key: idKey(5, 3), Value: []byte("v")}}) }()
	<-slow.entered
	for s2lease.Valid() {
		time.Sleep(5 * time.Millisecond) // the lease runs out on its own: poll for it
	}
	close(slow.release)
	if err := <-done; !errors.Is(err, zenroute.ErrLeaseLapsed) || !errors.Is(err, zen.ErrUnavailable) {
		t.Fatalf("write during which the lease lapsed: err %v, want ErrLeaseLapsed", err)
	}
}
