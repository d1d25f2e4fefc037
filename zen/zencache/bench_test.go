package zencache

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// countingStore counts the calls that reach the store's tables.
type countingStore struct {
	zen.Store
	reads *atomic.Int64
}

func (s countingStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingTable{Table: t, reads: s.reads}, nil
}

type countingTable struct {
	zen.Table
	reads *atomic.Int64
}

func (t countingTable) Get(ctx context.Context, k []byte) ([]byte, error) {
	t.reads.Add(1)
	return t.Table.Get(ctx, k)
}

func (t countingTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	t.reads.Add(1)
	return t.Table.Scan(ctx, o)
}

func (t countingTable) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	t.reads.Add(1)
	return t.Table.(zen.MultiGetter).GetMany(ctx, keys)
}

// BenchmarkGraphReads: GetObjects of a page of 50 pins and a 50-edge page of a board, on
// Pebble and on the real HBase, with and without the join cache on the real Redis (warm: the
// cached case measures hits). It reports store calls per operation.
func BenchmarkGraphReads(b *testing.B) {
	b.Run("pebble", func(b *testing.B) {
		p, err := zenpebble.Open(b.TempDir(), zenpebble.WithNoSync())
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		benchGraphReads(b, p)
	})
	b.Run("hbase", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := zenhbase.Open(ctx, testenv.HBase(b), zenhbase.Options{TablePrefix: fmt.Sprintf("zcb%d_", time.Now().UnixNano()),
			FlushInterval: time.Millisecond, CreateTimeout: 45 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		benchGraphReads(b, h)
	})
}

func benchGraphReads(b *testing.B, p zen.Store) {
	addr, prefix := testenv.RedisKeyPrefix(b, "zcbench")
	ctx := context.Background()
	seedGraph, err := zen.NewGraph(ctx, p, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	board, err := seedGraph.Create(ctx, zen.TypeBoard, 0, map[string]any{"name": "b"})
	if err != nil {
		b.Fatal(err)
	}
	var ids []zen.ID
	for i := range 50 {
		o, err := seedGraph.Create(ctx, zen.TypePin, board.ID, map[string]any{"title": fmt.Sprint(i), "active": true})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, o.ID)
		if err := seedGraph.AddEdge(ctx, zen.Edge{From: board.ID, Type: zen.EdgeBoardPins, To: o.ID}); err != nil {
			b.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, cached := range []bool{false, true} {
		var reads atomic.Int64
		var st zen.Store = countingStore{Store: p, reads: &reads}
		name := "store"
		if cached {
			name = "cache"
			c, err := Wrap(st, rdb, Options{Prefix: prefix + ":"})
			if err != nil {
				b.Fatal(err)
			}
			st = c
		}
		g, err := zen.NewGraph(ctx, st, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("GetObjects50/"+name, func(b *testing.B) {
			b.ReportAllocs()
			_, _ = g.GetMany(ctx, ids) // warm
			reads.Store(0)
			for b.Loop() {
				if _, err := g.GetMany(ctx, ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(reads.Load())/float64(b.N), "storecalls/op")
		})
		b.Run("EdgePage50/"+name, func(b *testing.B) {
			b.ReportAllocs()
			_, _, _ = g.ListEdges(ctx, board.ID, zen.EdgeBoardPins, "", 50, true)
			reads.Store(0)
			for b.Loop() {
				if _, _, err := g.ListEdges(ctx, board.ID, zen.EdgeBoardPins, "", 50, true); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(reads.Load())/float64(b.N), "storecalls/op")
		})
	}
}
