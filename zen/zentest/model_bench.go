package zentest

import (
	"context"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// BenchModel runs the model API's hot paths on a backend: a batched pool insert of 100 entries,
// Top(50), the worker's upkeep of a full user's pools, an edge page of 50 and an object Get.
// open must return a fresh, empty store.
func BenchModel(b *testing.B, open func(b *testing.B) zen.Store) {
	b.Run("PoolInsert100", func(b *testing.B) { benchPoolInsert(b, open(b)) })
	b.Run("PoolTop50", func(b *testing.B) { benchPoolTop(b, open(b)) })
	b.Run("PoolUpkeep", func(b *testing.B) { benchPoolUpkeep(b, open(b)) })
	b.Run("EdgePage50", func(b *testing.B) { benchEdgePage(b, open(b)) })
	b.Run("ObjectGet", func(b *testing.B) { benchObjectGet(b, open(b)) })
}

func benchID(b *testing.B, shard uint16, t zen.Type, local uint64) zen.ID {
	id, err := zen.NewID(shard, t, local)
	if err != nil {
		b.Fatal(err)
	}
	return id
}

func benchPools(b *testing.B, s zen.Store) *zen.Pools {
	tb, err := s.Table(context.Background(), "pools")
	if err != nil {
		b.Fatal(err)
	}
	return zen.NewPools(tb, time.Now)
}

func benchPoolInsert(b *testing.B, s zen.Store) {
	ctx, p := context.Background(), benchPools(b, s)
	es := make([]zen.PoolEntry, 100)
	next := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		u := benchID(b, uint16(next%4096), zen.TypeUser, 1+next%1000)
		for i := range es {
			es[i] = zen.PoolEntry{User: u, Source: zen.Source(1 + i%3), Score: float64(next%997) / 997, Pin: benchID(b, uint16(next%4096), zen.TypePin, next), CreatedMs: 1}
			next++
		}
		if n, err := p.Insert(ctx, es); err != nil || n != len(es) {
			b.Fatalf("Insert = %d, %v", n, err)
		}
	}
}

func benchPoolTop(b *testing.B, s zen.Store) {
	ctx, p := context.Background(), benchPools(b, s)
	u := benchID(b, 1, zen.TypeUser, 1)
	es := make([]zen.PoolEntry, 1000)
	for i := range es {
		es[i] = zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: float64(i%101) / 101, Pin: benchID(b, 1, zen.TypePin, uint64(i+1))}
	}
	if _, err := p.Insert(ctx, es); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := p.Top(ctx, u, zen.SourceFollowing, 50)
		if err != nil || len(got) != 50 {
			b.Fatalf("Top = %d, %v", len(got), err)
		}
	}
}

// benchPoolUpkeep: Upkeep of a user whose pools are at the worker's cap (3 sources of 800
// entries, a tenth of the pins in two sources) with 2,000 taken pins' tombstones, as the worker
// runs it after about 1 in 256 inserts: nothing to trim, one read of everything.
func benchPoolUpkeep(b *testing.B, s zen.Store) {
	ctx, p := context.Background(), benchPools(b, s)
	u := benchID(b, 1, zen.TypeUser, 1)
	var es []zen.PoolEntry
	for src := zen.Source(1); src <= 3; src++ {
		for i := range 800 {
			pin := uint64(src)*10_000 + uint64(i) + 1
			if i%10 == 0 && src > 1 {
				pin = uint64(src-1)*10_000 + uint64(i) + 1 // also in the source before
			}
			es = append(es, zen.PoolEntry{User: u, Source: src, Score: float64((i*7919)%1000) / 1000, Pin: benchID(b, 1, zen.TypePin, pin), CreatedMs: time.Now().UnixMilli()})
		}
	}
	var taken []zen.PoolEntry
	for i := range 2000 {
		taken = append(taken, zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: 2, Pin: benchID(b, 1, zen.TypePin, 100_000+uint64(i)), CreatedMs: time.Now().UnixMilli()})
	}
	if _, err := p.Insert(ctx, append(es, taken...)); err != nil {
		b.Fatal(err)
	}
	if got, err := p.Take(ctx, u, taken); err != nil || len(got) != len(taken) {
		b.Fatalf("Take = %d, %v", len(got), err)
	}
	if _, _, err := p.Upkeep(ctx, u, 800, 0); err != nil { // the cross-source duplicates' worse rows
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if exp, trimmed, err := p.Upkeep(ctx, u, 800, 0); err != nil || exp+trimmed != 0 {
			b.Fatalf("Upkeep = %d expired, %d trimmed, %v", exp, trimmed, err)
		}
	}
}

func benchEdgePage(b *testing.B, s zen.Store) {
	ctx := context.Background()
	g, err := zen.NewGraph(ctx, s, nil, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	u := benchID(b, 1, zen.TypeUser, 1)
	for i := range 1000 {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserLikes, To: benchID(b, 2, zen.TypePin, uint64(i+1)), Seq: seq.FromMillis(int64(1700000000000 + i))}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cur := ""
	for b.Loop() {
		es, next, err := g.ListEdges(ctx, u, zen.EdgeUserLikes, cur, 50, true)
		if err != nil || len(es) != 50 {
			b.Fatalf("ListEdges = %d, %v", len(es), err)
		}
		cur = next // walk the 20 pages round and round
	}
}

func benchObjectGet(b *testing.B, s zen.Store) {
	ctx := context.Background()
	g, err := zen.NewGraph(ctx, s, nil, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	o, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"title": "a pin", "board": "241294561224164665", "link": "https://example.com/x", "tags": []string{"a", "b"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Get(ctx, o.ID); err != nil {
			b.Fatal(err)
		}
	}
}
