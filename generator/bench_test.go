package generator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// captureTable records the rows zen.Pools.Insert writes (in a hash map, no ordering cost), so a
// large pool can be built once and loaded into a real store with big Apply batches.
type captureTable struct {
	mu   sync.Mutex
	rows map[string][]byte
}

func (c *captureTable) Get(_ context.Context, key []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.rows[string(key)]
	if !ok {
		return nil, zen.ErrNotFound
	}
	return bytes.Clone(v), nil
}

func (c *captureTable) Apply(_ context.Context, muts []zen.Mutation) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range muts {
		if m.Delete {
			delete(c.rows, string(m.Key))
		} else {
			c.rows[string(m.Key)] = bytes.Clone(m.Value)
		}
	}
	return nil
}

func (c *captureTable) Scan(context.Context, zen.ScanOptions) ([]zen.KV, error) {
	return nil, errors.New("captureTable: no scans")
}

func (c *captureTable) CheckAndSet(_ context.Context, key, expected, value []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.rows[string(key)]
	if (expected == nil && ok) || (expected != nil && (!ok || !bytes.Equal(cur, expected))) {
		return false, nil
	}
	if value == nil {
		delete(c.rows, string(key))
	} else {
		c.rows[string(key)] = bytes.Clone(value)
	}
	return true, nil
}

func (c *captureTable) Increment(context.Context, []byte, int64) (int64, error) {
	return 0, errors.New("captureTable: no counters")
}

// countingTable counts the rows a Table returns (Get and Scan) and the writes it takes.
type countingTable struct {
	zen.Table
	mu           sync.Mutex
	read, writes int64
}

func (c *countingTable) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := c.Table.Get(ctx, key)
	c.mu.Lock()
	c.read++
	c.mu.Unlock()
	return v, err
}

func (c *countingTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	rows, err := c.Table.Scan(ctx, o)
	c.mu.Lock()
	c.read += int64(len(rows))
	c.mu.Unlock()
	return rows, err
}

func (c *countingTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	c.mu.Lock()
	c.writes += int64(len(muts))
	c.mu.Unlock()
	return c.Table.Apply(ctx, muts)
}

func (c *countingTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Table.CheckAndSet(ctx, key, expected, value)
}

func (c *countingTable) reset() (read, writes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	read, writes = c.read, c.writes
	c.read, c.writes = 0, 0
	return read, writes
}

// loadPool fills user's pools in t with n pins over the three sources: rows are built by
// zen.Pools.Insert into a captureTable, then written to t with Table.Apply in sorted batches.
func loadPool(b *testing.B, t zen.Table, user zen.ID, n int, now time.Time) {
	b.Helper()
	ctx := context.Background()
	capt := &captureTable{rows: make(map[string][]byte, 2*n)}
	cp := zen.NewPools(capt, func() time.Time { return now })
	srcs := []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated}
	const batch = 10000
	for lo := 0; lo < n; lo += batch {
		es := make([]zen.PoolEntry, 0, batch)
		for i := lo; i < min(lo+batch, n); i++ {
			es = append(es, zen.PoolEntry{
				User: user, Source: srcs[i%3], Score: float64((i*7919)%n) / float64(n),
				Pin: pinID(b, uint64(i+1)), Author: authorID(b, uint64(i%1000)), Board: boardID(b, uint64(i%500+1)),
				CreatedMs: now.Add(-time.Hour).UnixMilli(),
			})
		}
		if _, err := cp.Insert(ctx, es); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]string, 0, len(capt.rows))
	for k := range capt.rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	const applyBatch = 50000
	for lo := 0; lo < len(keys); lo += applyBatch {
		muts := make([]zen.Mutation, 0, applyBatch)
		for _, k := range keys[lo:min(lo+applyBatch, len(keys))] {
			muts = append(muts, zen.Mutation{Key: []byte(k), Value: capt.rows[k]})
		}
		if err := t.Apply(ctx, muts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerateChunk measures GenerateChunk on the Pebble backend for pools of 100, 10,000
// and 1,000,000 pins (one user, three sources). Each iteration generates a chunk (timed on its
// own for p50/p99) and then settles it undelivered, which puts its pins back, so the pool size
// stays constant. The chunk size is 10 (base_chunk, the clock does not move).
func BenchmarkGenerateChunk(b *testing.B) {
	for _, size := range []int{100, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("pool=%d", size), func(b *testing.B) {
			ctx := context.Background()
			store, err := zenpebble.Open(b.TempDir(), zenpebble.WithNoSync())
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			pt, err := store.Table(ctx, "pools")
			if err != nil {
				b.Fatal(err)
			}
			st, err := store.Table(ctx, "genstate")
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			user := testUser(b)
			loadPool(b, pt, user, size, now)
			counted := &countingTable{Table: pt}
			g, err := New(Params{Pools: zen.NewPools(counted, func() time.Time { return now }), State: st, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			// Warm-up outside the timer: the first call sweeps the pools for expired pins once.
			c, err := g.GenerateChunk(ctx, user, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Settle(ctx, user, c.ID, true); err != nil {
				b.Fatal(err)
			}
			// Baseline: the store's own cost of reading the n best (3 sources × Top(20)), with
			// the same store state, so growth that is not the generator's shows up here too.
			var base []time.Duration
			for range 1000 {
				start := time.Now()
				for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
					if _, err := g.pools.Top(ctx, user, src, 20); err != nil {
						b.Fatal(err)
					}
				}
				base = append(base, time.Since(start))
			}
			sort.Slice(base, func(i, j int) bool { return base[i] < base[j] })
			var lat []time.Duration
			var rowsRead int64
			counted.reset()
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				c, err := g.GenerateChunk(ctx, user, Options{})
				lat = append(lat, time.Since(start))
				r, _ := counted.reset()
				rowsRead += r
				if err != nil {
					b.Fatal(err)
				}
				if len(c.Items) != min(10, size-50) {
					b.Fatalf("chunk of %d pins", len(c.Items))
				}
				if err := g.Settle(ctx, user, c.ID, false); err != nil {
					b.Fatal(err)
				}
				counted.reset()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(rowsRead)/float64(len(lat)), "pool-rows-read/op")
			b.ReportMetric(float64(base[len(base)/2].Microseconds()), "top-only-p50-µs")
		})
	}
}

// BenchmarkGenerateChunkSynced measures a full-size chunk (50 pins, a first visit's size) from a
// pool of 1,000 pins on Pebble with fsync on, as production runs it: the cost of the writes a
// chunk makes (claims, takes, records, state) shows here, where the NoSync benchmark above hides
// it. Each chunk is settled undelivered (outside the timer), so the pool keeps its size.
func BenchmarkGenerateChunkSynced(b *testing.B) {
	ctx := context.Background()
	store, err := zenpebble.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	pt, err := store.Table(ctx, "pools")
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Table(ctx, "genstate")
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	user := testUser(b)
	loadPool(b, pt, user, 1000, now)
	g, err := New(Params{Pools: zen.NewPools(pt, func() time.Time { return now }), State: st, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	gen := func() Chunk {
		c, err := g.GenerateChunk(ctx, user, Options{Max: 50})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	// Warm-up: the first visit sweeps once; settling it undelivered makes every later chunk
	// owed the same 50 pins.
	if err := g.Settle(ctx, user, gen().ID, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c := gen()
		b.StopTimer()
		if len(c.Items) != 50 {
			b.Fatalf("chunk of %d pins", len(c.Items))
		}
		if err := g.Settle(ctx, user, c.ID, false); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkFirstVisit measures a first visit's GenerateChunk (50 pins) from a pool of 1,000 pins
// on Pebble with fsync on: no state row yet, so the expiry sweep is due, as it is on every
// returning user's first page of the hour. Between iterations (outside the timer) the chunk is
// settled undelivered, the background sweep is waited for, and the state row deleted.
func BenchmarkFirstVisit(b *testing.B) {
	ctx := context.Background()
	store, err := zenpebble.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	pt, err := store.Table(ctx, "pools")
	if err != nil {
		b.Fatal(err)
	}
	st, err := store.Table(ctx, "genstate")
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	user := testUser(b)
	loadPool(b, pt, user, 1000, now)
	g, err := New(Params{Pools: zen.NewPools(pt, func() time.Time { return now }), State: st, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	reset := func(c Chunk) {
		if w, ok := any(g).(interface{ Wait() }); ok {
			w.Wait()
		}
		if err := g.Settle(ctx, user, c.ID, false); err != nil {
			b.Fatal(err)
		}
		if err := st.Apply(ctx, []zen.Mutation{{Key: userKey(user, tagState), Delete: true}}); err != nil {
			b.Fatal(err)
		}
	}
	c, err := g.GenerateChunk(ctx, user, Options{Max: 50})
	if err != nil {
		b.Fatal(err)
	}
	reset(c)
	b.ReportAllocs()
	for b.Loop() {
		c, err := g.GenerateChunk(ctx, user, Options{Max: 50})
		b.StopTimer()
		if err != nil || len(c.Items) != 50 {
			b.Fatalf("chunk of %d pins, %v", len(c.Items), err)
		}
		reset(c)
		b.StartTimer()
	}
}
