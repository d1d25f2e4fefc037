package zen_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shards.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadShardMap(t *testing.T) {
	m, err := zen.LoadShardMap(writeFile(t, `{"ranges": [
		{"from": 2048, "to": 4095, "store": "pools-b", "open": true},
		{"from": 0, "to": 2047, "store": "pools-a", "open": false}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []zen.ShardRange{{From: 0, To: 2047, Store: "pools-a"}, {From: 2048, To: 4095, Store: "pools-b", Open: true}}
	if diff := cmp.Diff(want, m.Ranges()); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		shard uint16
		store string
		open  bool
	}{{0, "pools-a", false}, {2047, "pools-a", false}, {2048, "pools-b", true}, {4095, "pools-b", true}} {
		s, err := m.StoreFor(tc.shard)
		if err != nil || s != tc.store || m.IsOpen(tc.shard) != tc.open {
			t.Errorf("shard %d: store %q %v open %v, want %q open %v", tc.shard, s, err, m.IsOpen(tc.shard), tc.store, tc.open)
		}
	}
	if _, err := m.StoreFor(4096); err == nil {
		t.Error("StoreFor(4096): no error for an unmapped shard")
	}
	if got := len(m.OpenShards()); got != 2048 {
		t.Errorf("open shards = %d, want 2048", got)
	}
}

func TestLoadShardMapRejects(t *testing.T) {
	for name, body := range map[string]string{
		"not json":      `{`,
		"unknown field": `{"ranges": [{"from": 0, "to": 1, "store": "a", "opne": true}]}`,
		"from above to": `{"ranges": [{"from": 5, "to": 1, "store": "a", "open": true}]}`,
		"no store":      `{"ranges": [{"from": 0, "to": 1, "open": true}]}`,
		"overlap":       `{"ranges": [{"from": 0, "to": 10, "store": "a", "open": true}, {"from": 10, "to": 20, "store": "b"}]}`,
		"none open":     `{"ranges": [{"from": 0, "to": 10, "store": "a"}]}`,
		"shard too big": `{"ranges": [{"from": 0, "to": 65536, "store": "a", "open": true}]}`,
	} {
		if _, err := zen.LoadShardMap(writeFile(t, body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := zen.LoadShardMap(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestDefaultShardMap(t *testing.T) {
	m := zen.DefaultShardMap()
	if diff := cmp.Diff([]zen.ShardRange{{From: 0, To: 4095, Store: "default", Open: true}}, m.Ranges()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if len(m.OpenShards()) != 4096 || m.IsOpen(4096) {
		t.Errorf("open shards %d, IsOpen(4096) %v", len(m.OpenShards()), m.IsOpen(4096))
	}
}

// TestPlacement: new objects only on open shards; a pin goes to its board's shard when open.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	m, err := zen.NewShardMap([]zen.ShardRange{
		{From: 0, To: 9, Store: "old", Open: false},
		{From: 10, To: 12, Store: "new", Open: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := zen.NewGraph(ctx, zenmem.New(), m, newClock().Now)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]int{}
	for range 30 {
		o, err := g.Create(ctx, zen.TypeUser, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen[o.ID.Shard()]++
	}
	if diff := cmp.Diff(map[uint16]int{10: 10, 11: 10, 12: 10}, seen); diff != "" {
		t.Errorf("round-robin placement (-want +got):\n%s", diff)
	}
	openBoard := mustID(t, 11, zen.TypeBoard, 5)
	pin, err := g.Create(ctx, zen.TypePin, openBoard, nil)
	if err != nil || pin.ID.Shard() != 11 {
		t.Errorf("pin near open board: shard %d, %v; want 11", pin.ID.Shard(), err)
	}
	closedBoard := mustID(t, 3, zen.TypeBoard, 5)
	pin, err = g.Create(ctx, zen.TypePin, closedBoard, nil)
	if err != nil || !m.IsOpen(pin.ID.Shard()) {
		t.Errorf("pin near closed board: shard %d, %v; want an open shard", pin.ID.Shard(), err)
	}
}

func TestShardMapGapsAndStores(t *testing.T) {
	for name, rs := range map[string][]zen.ShardRange{
		"gap at 0":      {{From: 1, To: 9, Store: "a", Open: true}},
		"gap inside":    {{From: 0, To: 9, Store: "a", Open: true}, {From: 11, To: 20, Store: "b"}},
		"gap after one": {{From: 0, To: 0, Store: "a", Open: true}, {From: 2, To: 2, Store: "a"}},
	} {
		if _, err := zen.NewShardMap(rs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	m, err := zen.ParseShardMap([]byte(`{"ranges": [{"from": 0, "to": 9, "store": "a", "open": true}, {"from": 10, "to": 4095, "store": "b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckStores("a", "b"); err != nil {
		t.Errorf("CheckStores(a, b): %v", err)
	}
	if err := m.CheckStores("a"); err == nil {
		t.Error("CheckStores(a): no error for store b")
	}
	b, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := zen.ParseShardMap(b)
	if err != nil || !back.Equal(m) {
		t.Errorf("round trip %s: %v, equal %v", b, err, back.Equal(m))
	}
	if m.Equal(zen.DefaultShardMap()) {
		t.Error("two different maps compare equal")
	}
}

// A live swap: objects created after SetShards follow the new map.
func TestGraphSetShards(t *testing.T) {
	ctx := context.Background()
	g, err := zen.NewGraph(ctx, zenmem.New(), zen.DefaultShardMap(), newClock().Now)
	if err != nil {
		t.Fatal(err)
	}
	m, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 99, Store: "default"}, {From: 100, To: 101, Store: "default", Open: true}, {From: 102, To: 4095, Store: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	g.SetShards(m)
	for range 10 {
		o, err := g.Create(ctx, zen.TypeUser, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s := o.ID.Shard(); s != 100 && s != 101 {
			t.Fatalf("after SetShards a user landed on shard %d, want 100 or 101", s)
		}
	}
	g.SetShards(nil)
	if g.Shards() != m {
		t.Error("SetShards(nil) replaced the map")
	}
}

func TestShardMapWith(t *testing.T) {
	base, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 99, Store: "a", Open: true}, {From: 100, To: 199, Store: "b", Open: true}})
	if err != nil {
		t.Fatal(err)
	}
	fence := func(r *zen.ShardRange) { r.Fenced = true }
	for _, tc := range []struct {
		name     string
		from, to uint16
		fn       func(r *zen.ShardRange)
		want     []zen.ShardRange
	}{
		{"inside one range", 10, 19, fence, []zen.ShardRange{
			{From: 0, To: 9, Store: "a", Open: true}, {From: 10, To: 19, Store: "a", Open: true, Fenced: true},
			{From: 20, To: 99, Store: "a", Open: true}, {From: 100, To: 199, Store: "b", Open: true}}},
		{"across two ranges", 90, 109, func(r *zen.ShardRange) { r.Store = "c" }, []zen.ShardRange{
			{From: 0, To: 89, Store: "a", Open: true}, {From: 90, To: 109, Store: "c", Open: true},
			{From: 110, To: 199, Store: "b", Open: true}}},
		{"merges equal neighbours", 100, 199, func(r *zen.ShardRange) { r.Store = "a" }, []zen.ShardRange{
			{From: 0, To: 199, Store: "a", Open: true}}},
		{"fn cannot move bounds", 0, 0, func(r *zen.ShardRange) { r.From, r.To = 5, 50; r.Fenced = true }, []zen.ShardRange{
			{From: 0, To: 0, Store: "a", Open: true, Fenced: true}, {From: 1, To: 99, Store: "a", Open: true},
			{From: 100, To: 199, Store: "b", Open: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := base.With(tc.from, tc.to, tc.fn)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, m.Ranges()); diff != "" {
				t.Errorf("ranges (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := base.With(150, 200, fence); err == nil {
		t.Error("With past the last shard: no error")
	}
	if _, err := base.With(5, 4, fence); err == nil {
		t.Error("With from above to: no error")
	}
	m, err := zen.ParseShardMap([]byte(`{"ranges": [{"from": 0, "to": 9, "store": "a", "open": true, "fenced": true}]}`))
	if err != nil || !m.Ranges()[0].Fenced {
		t.Fatalf("parse fenced map: %v, %v", m, err)
	}
	b, _ := m.MarshalJSON()
	if got := string(b); got != `{"ranges":[{"from":0,"to":9,"store":"a","open":true,"fenced":true}]}` {
		t.Errorf("marshal = %s", got)
	}
}

func TestShardKeyRange(t *testing.T) {
	for _, s := range []uint16{0, 1, 7, 4095, 65534} {
		id, err := zen.NewID(s, zen.TypeUser, 1)
		if err != nil {
			t.Fatal(err)
		}
		key := binary.BigEndian.AppendUint64(nil, uint64(id))
		if got := zen.KeyShard(key); got != uint32(s) {
			t.Errorf("KeyShard(id on %d) = %d", s, got)
		}
		start, stop := zen.ShardKeyRange(s, s)
		if bytes.Compare(key, start) < 0 || bytes.Compare(key, stop) >= 0 {
			t.Errorf("shard %d: key %x outside [%x, %x)", s, key, start, stop)
		}
		if (s > 0 && zen.KeyShard(start) != uint32(s)) || zen.KeyShard(stop) != uint32(s)+1 {
			t.Errorf("shard %d: bounds %x %x map to shards %d %d", s, start, stop, zen.KeyShard(start), zen.KeyShard(stop))
		}
	}
	if _, stop := zen.ShardKeyRange(0, zen.MaxShard); stop != nil {
		t.Errorf("stop past the last shard = %x, want nil", stop)
	}
	if got := zen.KeyShard([]byte{0x00, 0x00, 0x40}); got != 1 {
		t.Errorf("KeyShard of a short key = %d, want 1", got)
	}
	if start, _ := zen.ShardKeyRange(1, 1); !bytes.Equal(start, []byte{0x00, 0x00, 0x40}) {
		t.Errorf("start of shard 1 = %x, want the trimmed 000040", start)
	}
}

// TestShardMapWithRandom: for random maps and random ranges, With changes exactly the shards of
// the range, as fn says, and leaves every other shard as it was.
func TestShardMapWithRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	stores := []string{"a", "b", "c"}
	for round := range 2000 {
		var ranges []zen.ShardRange
		for from := 0; from < 300; {
			to := min(from+r.IntN(60), 299)
			ranges = append(ranges, zen.ShardRange{From: uint16(from), To: uint16(to), Store: stores[r.IntN(3)],
				Open: r.IntN(2) == 0 || from == 0, Fenced: r.IntN(4) == 0})
			from = to + 1
		}
		m, err := zen.NewShardMap(ranges)
		if err != nil {
			t.Fatal(err)
		}
		from := uint16(r.IntN(300))
		to := from + uint16(r.IntN(300-int(from)))
		store, fenced := stores[r.IntN(3)], r.IntN(2) == 0
		got, err := m.With(from, to, func(x *zen.ShardRange) { x.Store, x.Fenced = store, fenced })
		if err != nil {
			t.Fatalf("round %d: With(%d, %d): %v", round, from, to, err)
		}
		for s := range uint16(300) {
			old, _ := m.RangeFor(s)
			want := old
			if s >= from && s <= to {
				want.Store, want.Fenced = store, fenced
			}
			g, ok := got.RangeFor(s)
			if !ok || g.Store != want.Store || g.Open != want.Open || g.Fenced != want.Fenced {
				t.Fatalf("round %d: With(%d, %d) shard %d = %+v, want %+v", round, from, to, s, g, want)
			}
		}
		rs := got.Ranges()
		for i := 1; i < len(rs); i++ {
			if rs[i-1].Store == rs[i].Store && rs[i-1].Open == rs[i].Open && rs[i-1].Fenced == rs[i].Fenced {
				t.Fatalf("round %d: equal neighbours left unmerged: %+v %+v", round, rs[i-1], rs[i])
			}
		}
	}
}
