package generator

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// t0 is the start of every test clock.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustID(t testing.TB, shard uint16, typ zen.Type, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(shard, typ, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pinID(t testing.TB, n uint64) zen.ID    { return mustID(t, 1, zen.TypePin, n) }
func authorID(t testing.TB, n uint64) zen.ID { return mustID(t, 1, zen.TypeUser, 10000+n) }
func boardID(t testing.TB, n uint64) zen.ID  { return mustID(t, 1, zen.TypeBoard, n) }
func testUser(t testing.TB) zen.ID           { return mustID(t, 1, zen.TypeUser, 1) }

// testPools is a Pools the tests can also list.
type testPools interface {
	Pools
	all(user zen.ID) []zen.PoolEntry
}

// realPools adapts zen.Pools over a zenmem table.
type realPools struct {
	*zen.Pools
	t zen.Table
}

func newRealPools(now func() time.Time) realPools {
	t, _ := zenmem.New().Table(context.Background(), "pools")
	return realPools{zen.NewPools(t, now), t}
}

// rowsOf counts the stored pool rows of user's pins in pins, live or not (every source).
func (r realPools) rowsOf(t testing.TB, user zen.ID, pins map[zen.ID]bool) int {
	t.Helper()
	prefix := binary.BigEndian.AppendUint64(nil, uint64(user))
	kvs, err := r.t.Scan(context.Background(), zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range kvs {
		if len(kv.Key) == 8+1+8+8 && pins[zen.ID(binary.BigEndian.Uint64(kv.Key[17:]))] {
			n++
		}
	}
	return n
}

func (r realPools) all(user zen.ID) []zen.PoolEntry {
	var out []zen.PoolEntry
	for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
		es, err := r.Top(context.Background(), user, src, zen.MaxPoolPage)
		if err != nil {
			panic(err)
		}
		out = append(out, es...)
	}
	sortEntries(out)
	return out
}

// backends lists the pool implementations every behavioural test runs against.
var backends = []struct {
	name string
	make func(now func() time.Time) testPools
}{
	{"fake", func(func() time.Time) testPools { return newFakePools() }},
	{"zen", func(now func() time.Time) testPools { return newRealPools(now) }},
}

// env is one generator under test.
type env struct {
	gen   *Generator
	pools testPools
	state *zenmem.Table
	clk   *clock
	user  zen.ID
}

func newEnv(t testing.TB, pools func(now func() time.Time) testPools, cfg *Config) *env {
	t.Helper()
	clk := &clock{t: t0}
	p := pools(clk.Now)
	st := &zenmem.Table{}
	g, err := New(Params{Pools: p, State: st, Config: cfg, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &env{gen: g, pools: p, state: st, clk: clk, user: testUser(t)}
}

// wrap replaces the generator's pools (keeping the listing pools underneath).
func (e *env) wrapPools(t testing.TB, p Pools) {
	t.Helper()
	g, err := New(Params{Pools: p, State: e.gen.state, Config: ptr(e.gen.Config()), Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.gen = g
}

func ptr[T any](v T) *T { return &v }

// hookPools runs hooks around Take of the pools it wraps.
type hookPools struct {
	Pools
	beforeTake func(es []zen.PoolEntry)
	afterTake  func(won []zen.PoolEntry)
}

func (h *hookPools) Take(ctx context.Context, user zen.ID, es []zen.PoolEntry) ([]zen.PoolEntry, error) {
	if h.beforeTake != nil {
		h.beforeTake(es)
	}
	won, err := h.Pools.Take(ctx, user, es)
	if h.afterTake != nil {
		h.afterTake(won)
	}
	return won, err
}

// hookTable runs a hook before each CheckAndSet of the table it wraps.
type hookTable struct {
	zen.Table
	beforeCAS func(key []byte)
}

func (h *hookTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if h.beforeCAS != nil {
		h.beforeCAS(key)
	}
	return h.Table.CheckAndSet(ctx, key, expected, value)
}

// entry builds a pool entry for the test user.
func (e *env) entry(t testing.TB, src zen.Source, pin uint64, score float64, author, board uint64, age time.Duration) zen.PoolEntry {
	return zen.PoolEntry{
		User: e.user, Source: src, Score: score, Pin: pinID(t, pin),
		Author: authorID(t, author), Board: boardID(t, board),
		CreatedMs: e.clk.Now().Add(-age).UnixMilli(),
	}
}

func (e *env) insert(t testing.TB, es ...zen.PoolEntry) {
	t.Helper()
	if _, err := e.pools.Insert(context.Background(), es); err != nil {
		t.Fatal(err)
	}
}
