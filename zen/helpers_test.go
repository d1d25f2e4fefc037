package zen_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

var errInjected = errors.New("injected fault")

func mustID(t testing.TB, shard uint16, typ zen.Type, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(shard, typ, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.UnixMilli(1700000000000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// faultStore wraps a store and fails its k-th write (Apply, CheckAndSet or Increment, counted
// across all tables): before the write lands when after is false (a crash before it), after it
// lands when after is true (a crash before the caller hears back).
type faultStore struct {
	zen.Store
	mu     sync.Mutex
	writes int
	failAt int // 0 = never
	after  bool
}

func (s *faultStore) arm(k int, after bool) {
	s.mu.Lock()
	s.writes, s.failAt, s.after = 0, k, after
	s.mu.Unlock()
}

// hit counts one write and reports whether it fails.
func (s *faultStore) hit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.failAt != 0 && s.writes == s.failAt
}

func (s *faultStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &faultTable{Table: t, s: s}, nil
}

type faultTable struct {
	zen.Table
	s *faultStore
}

func (t *faultTable) write(fn func() error) error {
	if !t.s.hit() {
		return fn()
	}
	if t.s.after {
		if err := fn(); err != nil {
			return err
		}
	}
	return errInjected
}

func (t *faultTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	return t.write(func() error { return t.Table.Apply(ctx, muts) })
}

func (t *faultTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	var ok bool
	err := t.write(func() (err error) { ok, err = t.Table.CheckAndSet(ctx, key, expected, value); return err })
	return ok, err
}

func (t *faultTable) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	var n int64
	err := t.write(func() (err error) { n, err = t.Table.Increment(ctx, key, delta); return err })
	return n, err
}

func newGraph(t testing.TB, s zen.Store, c *clock) *zen.Graph {
	t.Helper()
	g, err := zen.NewGraph(context.Background(), s, nil, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(0)
	return g
}

func memGraph(t testing.TB) (*zen.Graph, *clock) {
	c := newClock()
	return newGraph(t, zenmem.New(), c), c
}
