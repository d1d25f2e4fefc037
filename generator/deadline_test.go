package generator

import (
	"context"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// syncedTable is a Pebble table whose every write costs d, as a synced commit does (1.3 ms on
// average on the reference machine, more under load); reads are free.
type syncedTable struct {
	t *zenpebble.Table
	d time.Duration
}

var (
	_ zen.CondBatcher = syncedTable{}
	_ zen.MultiGetter = syncedTable{}
)

func (s syncedTable) Get(ctx context.Context, k []byte) ([]byte, error) { return s.t.Get(ctx, k) }
func (s syncedTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	return s.t.Scan(ctx, o)
}
func (s syncedTable) GetMany(ctx context.Context, ks [][]byte) ([][]byte, error) {
	return s.t.GetMany(ctx, ks)
}

// commit is a write's cost, d.
func (s syncedTable) commit() {
	// sleep: the writes' cost in real time is what the generator's deadline is tested against.
	time.Sleep(s.d)
}

func (s syncedTable) Apply(ctx context.Context, m []zen.Mutation) error {
	s.commit()
	return s.t.Apply(ctx, m)
}
func (s syncedTable) CheckAndSet(ctx context.Context, k, e, v []byte) (bool, error) {
	s.commit()
	return s.t.CheckAndSet(ctx, k, e, v)
}
func (s syncedTable) Increment(ctx context.Context, k []byte, d int64) (int64, error) {
	s.commit()
	return s.t.Increment(ctx, k, d)
}
func (s syncedTable) CheckAndSetMany(ctx context.Context, c []zen.Cond) ([]bool, error) {
	s.commit()
	return s.t.CheckAndSetMany(ctx, c)
}

// TestFirstVisitWithinDeadline is issue 14's slow first visit: a new user whose pools hold
// candidates gets a full first chunk (max_chunk, 50 pins) within feedsvc's 150 ms generator
// deadline when every write costs 2 ms. Claiming and taking pin after pin made ~150 writes of
// it, so the first page came back empty (FRESH_STATUS_GENERATOR_TIMEOUT); a chunk's writes no
// longer grow with its size.
func TestFirstVisitWithinDeadline(t *testing.T) {
	ctx := context.Background()
	store, err := zenpebble.Open("", zenpebble.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	table := func(name string) syncedTable {
		tb, err := store.Table(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return syncedTable{t: tb.(*zenpebble.Table), d: 2 * time.Millisecond}
	}
	now := func() time.Time { return t0 }
	pools := zen.NewPools(table("pools"), now)
	user := testUser(t)
	srcs := []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated}
	var es []zen.PoolEntry
	for i := range 200 {
		es = append(es, zen.PoolEntry{User: user, Source: srcs[i%3], Score: float64(i%97) / 97,
			Pin: pinID(t, uint64(i+1)), Author: authorID(t, uint64(i%40)), Board: boardID(t, uint64(i%20+1)),
			CreatedMs: t0.Add(-time.Hour).UnixMilli()})
	}
	if _, err := pools.Insert(ctx, es); err != nil {
		t.Fatal(err)
	}
	g, err := New(Params{Pools: pools, State: table("genstate"), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := g.GenerateChunk(dctx, user, Options{})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("first visit: %v after %v", err, took)
	}
	if len(c.Items) != 50 {
		t.Fatalf("first visit: %d pins after %v, want 50", len(c.Items), took)
	}
	t.Logf("first chunk of %d pins in %v", len(c.Items), took)
}
