package zen_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func TestObjectLifecycle(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	board := mustID(t, 3429, zen.TypeBoard, 1337)
	in := map[string]any{"title": "cats", "board": board.String(), "future_field": map[string]any{"x": 1}}
	o, err := g.Create(ctx, zen.TypePin, board, in)
	if err != nil {
		t.Fatal(err)
	}
	if o.ID.Type() != zen.TypePin || o.ID.Shard() != 3429 || o.ID.Local() != 1 || o.Version != 1 {
		t.Fatalf("created %d (shard %d local %d) v%d", o.ID, o.ID.Shard(), o.ID.Local(), o.Version)
	}
	in["title"] = "mutated after create" // the graph must not share the caller's map
	got, err := g.Get(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"title": "cats", "board": board.String(), "active": true, "future_field": map[string]any{"x": json.Number("1")}}
	if diff := cmp.Diff(want, got.Data); diff != "" {
		t.Errorf("Get data (-want +got):\n%s", diff)
	}
	if id, ok := zen.DataID(got.Data, "board"); !ok || id != board {
		t.Errorf("DataID(board) = %d, %v", id, ok)
	}

	up, err := g.Update(ctx, o.ID, func(d map[string]any) error { d["title"] = "dogs"; return nil })
	if err != nil || up.Version != 2 || up.Data["title"] != "dogs" {
		t.Fatalf("Update = v%d %v, %v", up.Version, up.Data, err)
	}
	// An error from fn aborts without writing.
	boom := errors.New("boom")
	if _, err := g.Update(ctx, o.ID, func(d map[string]any) error { d["title"] = "x"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update with failing fn: %v", err)
	}
	got, _ = g.Get(ctx, o.ID)
	if got.Version != 2 || got.Data["title"] != "dogs" || got.Data["future_field"] == nil {
		t.Errorf("after failed update: v%d %v", got.Version, got.Data)
	}

	if err := g.Delete(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, o.ID); err != nil {
		t.Errorf("second Delete: %v (want idempotent)", err)
	}
	if _, err := g.Get(ctx, o.ID); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Get deleted: %v, want ErrNotFound", err)
	}
	if _, err := g.Update(ctx, o.ID, func(map[string]any) error { return nil }); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Update deleted: %v, want ErrNotFound", err)
	}
	missing := mustID(t, 3429, zen.TypePin, 999)
	if err := g.Delete(ctx, missing); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Delete missing: %v, want ErrNotFound", err)
	}
	if _, err := g.Get(ctx, 1<<63); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Get invalid id: %v, want ErrNotFound", err)
	}
}

func TestObjectDefaultsOnRead(t *testing.T) {
	// An object written before "active" existed (raw row without it) reads with the default.
	ctx := context.Background()
	s := zenmem.New()
	g := newGraph(t, s, newClock())
	id := mustID(t, 7, zen.TypeUser, 1)
	tb, _ := s.Table(ctx, zen.TableObjects)
	row := append([]byte{0, 0, 0, 0, 0, 0, 0, 4}, `{"name":"old","extra":[1,2]}`...)
	if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte{byte(id >> 56), byte(id >> 48), byte(id >> 40), byte(id >> 32), byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, Value: row}}); err != nil {
		t.Fatal(err)
	}
	o, err := g.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := zen.Object{ID: id, Version: 4, Data: map[string]any{"name": "old", "extra": []any{json.Number("1"), json.Number("2")}, "active": true}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCreateRejects(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	if _, err := g.Create(ctx, 0, 0, nil); err == nil {
		t.Error("type 0: no error")
	}
	if _, err := g.Create(ctx, 1024, 0, nil); err == nil {
		t.Error("type 1024: no error")
	}
	if _, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"bad": math.NaN()}); err == nil {
		t.Error("unencodable data: no error")
	}
	if _, err := g.Create(ctx, zen.TypePin, 1<<63, nil); err == nil {
		t.Error("invalid near: no error")
	}
	// Refused input consumed no ID: the next pin is local 1.
	o, err := g.Create(ctx, zen.TypePin, mustID(t, 1, zen.TypeBoard, 1), nil)
	if err != nil || o.ID.Local() != 1 {
		t.Errorf("first pin after refusals: local %d, %v", o.ID.Local(), err)
	}
}

func TestGetMany(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	var ids []zen.ID
	for i := range 20 {
		o, err := g.Create(ctx, zen.TypeUser, 0, map[string]any{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if err := g.Delete(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	q := append([]zen.ID{mustID(t, 1, zen.TypeUser, 9999), 1 << 63, ids[0]}, ids...)
	got, err := g.GetMany(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 19 {
		t.Fatalf("GetMany: %d objects, want 19", len(got))
	}
	if _, ok := got[ids[3]]; ok {
		t.Error("deleted object returned")
	}
	for i, id := range ids {
		if i != 3 && got[id].Data["n"] != json.Number(itoa(i)) {
			t.Errorf("object %d: %v", i, got[id].Data)
		}
	}
}

// TestLiveManyMatchesGetMany: LiveMany names exactly the objects GetMany returns, whatever
// their "active" field holds (absent, true, false, not a bool) and for absent or invalid IDs.
func TestLiveManyMatchesGetMany(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	var ids []zen.ID
	for _, data := range []map[string]any{
		{"n": 1}, {"active": true}, {"active": false}, {"active": "no"}, {"active": nil},
		{"active": 0}, {"nested": map[string]any{"active": false}}, {"active": true, "x": []any{1, 2}},
	} {
		o, err := g.Create(ctx, zen.TypePin, mustID(t, 1, zen.TypeBoard, 1), data)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if err := g.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	q := append([]zen.ID{mustID(t, 1, zen.TypePin, 99999), 1 << 63, ids[0]}, ids...)
	objs, err := g.GetMany(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	want := map[zen.ID]bool{}
	for id := range objs {
		want[id] = true
	}
	got, err := g.LiveMany(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LiveMany (-GetMany +LiveMany):\n%s", diff)
	}
}

// TestLiveCache: with the cache on, LiveMany still sees at once a delete made through the same
// Graph, and a delete made through another Graph on the same store once the ttl has passed.
func TestLiveCache(t *testing.T) {
	ctx := context.Background()
	clk := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clk }
	s := zenmem.New()
	g, err := zen.NewGraph(ctx, s, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := zen.NewGraph(ctx, s, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	g.CacheLiveness(time.Second, 100)
	var ids []zen.ID
	for range 3 {
		o, err := g.Create(ctx, zen.TypePin, mustID(t, 1, zen.TypeBoard, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	live := func() map[zen.ID]bool {
		t.Helper()
		m, err := g.LiveMany(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	steps := []struct {
		name string
		act  func()
		want map[zen.ID]bool
	}{
		{"all live", func() {}, map[zen.ID]bool{ids[0]: true, ids[1]: true, ids[2]: true}},
		{"deleted here: seen at once", func() {
			if err := g.Delete(ctx, ids[0]); err != nil {
				t.Fatal(err)
			}
		}, map[zen.ID]bool{ids[1]: true, ids[2]: true}},
		{"deleted elsewhere: cached until the ttl", func() {
			if err := other.Delete(ctx, ids[1]); err != nil {
				t.Fatal(err)
			}
		}, map[zen.ID]bool{ids[1]: true, ids[2]: true}},
		{"after the ttl", func() { clk = clk.Add(time.Second) }, map[zen.ID]bool{ids[2]: true}},
	}
	for _, st := range steps {
		st.act()
		if diff := cmp.Diff(st.want, live()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestConcurrentUpdates: every CAS-retried increment lands once.
func TestConcurrentUpdates(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	o, err := g.Create(ctx, zen.TypeBoard, 0, map[string]any{"n": 0})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				_, err := g.Update(ctx, o.ID, func(d map[string]any) error {
					n, _ := d["n"].(json.Number).Int64()
					d["n"] = n + 1
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _ := g.Get(ctx, o.ID)
	if got.Data["n"] != json.Number("200") || got.Version != 201 {
		t.Errorf("after 200 concurrent updates: n=%v version %d", got.Data["n"], got.Version)
	}
}

// TestIDAllocationConcurrent: many goroutines on two graphs over one store get unique,
// per-(shard, type) dense local IDs.
func TestIDAllocationConcurrent(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	g1, g2 := newGraph(t, s, newClock()), newGraph(t, s, newClock())
	const workers, each = 16, 100
	var (
		mu   sync.Mutex
		seen = map[zen.ID]bool{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		g := g1
		if w%2 == 1 {
			g = g2
		}
		wg.Go(func() {
			for range each {
				id, err := g.NewLocalID(ctx, 42, zen.TypePin)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != workers*each {
		t.Fatalf("%d ids, want %d", len(seen), workers*each)
	}
	for id := range seen {
		if id.Shard() != 42 || id.Type() != zen.TypePin || id.Local() < 1 || id.Local() > workers*each {
			t.Fatalf("id %d out of the dense range", id)
		}
	}
	// Another type on the same shard has its own counter.
	b, _ := g1.NewLocalID(ctx, 42, zen.TypeBoard)
	if b.Local() != 1 {
		t.Errorf("first board local = %d, want 1", b.Local())
	}
}

func TestMapKey(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	alice, bob := mustID(t, 1, zen.TypeUser, 1), mustID(t, 2, zen.TypeUser, 2)
	for _, tc := range []struct {
		name string
		kind string
		key  string
		id   zen.ID
		want bool
	}{
		{"first claim", "username", "alice", alice, true},
		{"same owner again", "username", "alice", alice, true},
		{"taken", "username", "alice", bob, false},
		{"other kind", "email", "alice", bob, true},
		{"other key", "username", "bob", bob, true},
	} {
		got, err := g.MapKey(ctx, tc.kind, tc.key, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("%s: MapKey = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if id, err := g.LookupKey(ctx, "username", "alice"); err != nil || id != alice {
		t.Errorf("LookupKey(alice) = %d, %v", id, err)
	}
	if _, err := g.LookupKey(ctx, "username", "carol"); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("LookupKey(carol) = %v, want ErrNotFound", err)
	}
	if ok, _ := g.UnmapKey(ctx, "username", "alice", bob); ok {
		t.Error("UnmapKey by a non-owner succeeded")
	}
	if ok, _ := g.UnmapKey(ctx, "username", "alice", alice); !ok {
		t.Error("UnmapKey by the owner failed")
	}
	if ok, _ := g.MapKey(ctx, "username", "alice", bob); !ok {
		t.Error("MapKey after unmap failed")
	}
	for _, bad := range [][2]string{{"", "k"}, {"a\x00b", "k"}, {"username", ""}, {"username", string(make([]byte, 1025))}} {
		if _, err := g.MapKey(ctx, bad[0], bad[1], alice); err == nil {
			t.Errorf("MapKey(%q, %d bytes): no error", bad[0], len(bad[1]))
		}
	}
	if _, err := g.MapKey(ctx, "username", "zed", 0); err == nil {
		t.Error("MapKey to id 0: no error")
	}
}

func TestMapKeyConcurrent(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins []zen.ID
	)
	for i := range 16 {
		id := mustID(t, uint16(i), zen.TypeUser, 1)
		wg.Go(func() {
			ok, err := g.MapKey(ctx, "username", "popular", id)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				wins = append(wins, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d winners for one username: %v", len(wins), wins)
	}
	if got, _ := g.LookupKey(ctx, "username", "popular"); got != wins[0] {
		t.Errorf("LookupKey = %d, winner %d", got, wins[0])
	}
}

func TestDataID(t *testing.T) {
	pin := mustID(t, 3429, zen.TypePin, 7075733)
	data := map[string]any{
		"number": json.Number("241294492511762325"), "string": "241294492511762325", "id": pin,
		"uint64": uint64(pin), "float": float64(68719476737), "bad": "x", "type0": json.Number("1"),
		"fraction": 1.5, "negative": -1.0, "bool": true,
	}
	got := map[string]zen.ID{}
	for k := range data {
		if id, ok := zen.DataID(data, k); ok {
			got[k] = id
		}
	}
	if _, ok := zen.DataID(data, "absent"); ok {
		t.Error("absent field read as an ID")
	}
	want := map[string]zen.ID{"number": pin, "string": pin, "id": pin, "uint64": pin, "float": 68719476737}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestMapKeyRowOnModShard checks that a mod-shard map row leads with its mod shard's base, so on
// HBase the username and email maps spread over the shard-split regions.
func TestMapKeyRowOnModShard(t *testing.T) {
	ctx := t.Context()
	s := zenmem.New()
	g, err := zen.NewGraph(ctx, s, zen.DefaultShardMap(), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := zen.NewID(3429, zen.TypeUser, 733)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"foo", "1.2.3.4", "user@example.com"} {
		if ok, err := g.MapKey(ctx, "email", key, id); err != nil || !ok {
			t.Fatalf("MapKey(%q) = %v, %v", key, ok, err)
		}
	}
	tb, _ := s.Table(ctx, zen.TableModShard)
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range rows {
		got = append(got, int(binary.BigEndian.Uint64(r.Key[:8])>>46))
	}
	// "foo" → 1240, "1.2.3.4" → 1537, "user@example.com" → 2479 (docs/data-model.md §4), in key order.
	if diff := cmp.Diff([]int{1240, 1537, 2479}, got); diff != "" {
		t.Errorf("mod shards of the map rows (-want +got):\n%s", diff)
	}
}
