package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zencache"
)

// GraphReadResult is one read of the graph API measured with the join cache off or on:
// GetObjects of a page of 50 pins, or a 50-edge page of a board, repeated on the same rows
// (the cache warm), with the calls that reached the store per read.
type GraphReadResult struct {
	Read          string  `json:"read"` // "get_objects_50" or "edge_page_50"
	Cache         bool    `json:"cache"`
	Latency       Summary `json:"latency"`
	StoreCallsPer float64 `json:"store_calls_per_read"`
}

// GraphReadsN is how many times each read is measured.
const GraphReadsN = 500

// countingStore counts the read calls that reach a store's tables.
type countingStore struct {
	zen.Store
	calls *atomic.Int64
}

func (s countingStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingTable{Table: t, calls: s.calls}, nil
}

type countingTable struct {
	zen.Table
	calls *atomic.Int64
}

func (t countingTable) Get(ctx context.Context, k []byte) ([]byte, error) {
	t.calls.Add(1)
	return t.Table.Get(ctx, k)
}

func (t countingTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	t.calls.Add(1)
	return t.Table.Scan(ctx, o)
}

func (t countingTable) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	t.calls.Add(1)
	return zen.GetMany(ctx, t.Table, keys)
}

// GraphReads measures the join cache (zen/zencache, on Redis) against the store alone: it
// seeds a board of 50 pins in store, then times GetObjects of the 50 pins and the board's first
// page of 50 edges, each GraphReadsN times, through a graph on the store and through a graph on
// the store behind the cache (warmed by one read first), counting the calls that reach the
// store. namespace keeps its cache keys apart.
func GraphReads(ctx context.Context, store zen.Store, rdb redis.UniversalClient, namespace string) ([]GraphReadResult, error) {
	seed, err := zen.NewGraph(ctx, store, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("graph reads: %w", err)
	}
	board, err := seed.Create(ctx, zen.TypeBoard, 0, map[string]any{"name": "graph reads"})
	if err != nil {
		return nil, fmt.Errorf("graph reads: %w", err)
	}
	ids := make([]zen.ID, 0, 50)
	for i := range 50 {
		o, err := seed.Create(ctx, zen.TypePin, board.ID, map[string]any{"title": fmt.Sprint(i), "active": true})
		if err != nil {
			return nil, fmt.Errorf("graph reads: %w", err)
		}
		ids = append(ids, o.ID)
		if err := seed.AddEdge(ctx, zen.Edge{From: board.ID, Type: zen.EdgeBoardPins, To: o.ID}); err != nil {
			return nil, fmt.Errorf("graph reads: %w", err)
		}
	}
	var out []GraphReadResult
	for _, cached := range []bool{false, true} {
		var calls atomic.Int64
		var st zen.Store = countingStore{Store: store, calls: &calls}
		if cached {
			c, err := zencache.Wrap(st, rdb, zencache.Options{Prefix: namespace + ":graphreads:"})
			if err != nil {
				return nil, fmt.Errorf("graph reads: %w", err)
			}
			st = c
		}
		g, err := zen.NewGraph(ctx, st, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("graph reads: %w", err)
		}
		for _, r := range []struct {
			name string
			read func() error
		}{
			{"get_objects_50", func() error { _, err := g.GetMany(ctx, ids); return err }},
			{"edge_page_50", func() error {
				_, _, err := g.ListEdges(ctx, board.ID, zen.EdgeBoardPins, "", 50, true)
				return err
			}},
		} {
			if err := r.read(); err != nil { // warm
				return nil, fmt.Errorf("graph reads %s: %w", r.name, err)
			}
			calls.Store(0)
			var l Latencies
			for range GraphReadsN {
				t := time.Now()
				if err := r.read(); err != nil {
					return nil, fmt.Errorf("graph reads %s: %w", r.name, err)
				}
				l.Add(time.Since(t))
			}
			out = append(out, GraphReadResult{Read: r.name, Cache: cached, Latency: l.Summary(),
				StoreCallsPer: ratio(float64(calls.Load()), GraphReadsN)})
		}
	}
	return out, nil
}

// graphReadsMarkdown is the report's section on the join cache.
func graphReadsMarkdown(rs []GraphReadResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Graph reads: the join cache\n\n")
	fmt.Fprintf(&b, "GetObjects of 50 pins and a board's first page of 50 edges, %d times each on the same rows, through the store alone and through the join cache on Redis (`--cache`, warm), with the read calls that reached the store.\n\n", GraphReadsN)
	b.WriteString("| read | cache | p50 | p99 | store calls per read |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		cache := "off"
		if r.Cache {
			cache = "on"
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f ms | %.3f ms | %.2f |\n", r.Read, cache, r.Latency.P50, r.Latency.P99, r.StoreCallsPer)
	}
	b.WriteString("\n")
	return b.String()
}
