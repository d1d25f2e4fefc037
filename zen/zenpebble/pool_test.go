package zenpebble

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// countTable counts the writes zen.Pools sends to a Pebble table, and can fail the k-th one
// (Apply or CheckAndSetMany) before or after it lands.
type countTable struct {
	*Table
	applies, cas, casMany, gets, scans atomic.Int64

	mu    sync.Mutex
	fail  int // fail the fail-th write from now (0 = none)
	after bool
}

var errInjected = errors.New("injected fault")

func (c *countTable) arm(k int, after bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail, c.after = k, after
}

func (c *countTable) write(fn func() error) error {
	c.mu.Lock()
	hit := false
	if c.fail > 0 {
		c.fail--
		hit = c.fail == 0
	}
	after := c.after
	c.mu.Unlock()
	if !hit {
		return fn()
	}
	if after {
		if err := fn(); err != nil {
			return err
		}
	}
	return errInjected
}

func (c *countTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	c.applies.Add(1)
	return c.write(func() error { return c.Table.Apply(ctx, muts) })
}

func (c *countTable) reset() {
	for _, n := range []*atomic.Int64{&c.applies, &c.cas, &c.casMany, &c.gets, &c.scans} {
		n.Store(0)
	}
}

// counts returns Applies, CheckAndSetMany, CheckAndSet, Get or GetMany, and Scan calls.
func (c *countTable) counts() [5]int64 {
	return [5]int64{c.applies.Load(), c.casMany.Load(), c.cas.Load(), c.gets.Load(), c.scans.Load()}
}

func (c *countTable) Get(ctx context.Context, key []byte) ([]byte, error) {
	c.gets.Add(1)
	return c.Table.Get(ctx, key)
}

func (c *countTable) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	c.gets.Add(1)
	return c.Table.GetMany(ctx, keys)
}

func (c *countTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	c.scans.Add(1)
	return c.Table.Scan(ctx, o)
}

func (c *countTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	c.cas.Add(1)
	return c.Table.CheckAndSet(ctx, key, expected, value)
}

func (c *countTable) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	c.casMany.Add(1)
	var out []bool
	err := c.write(func() error {
		var err error
		out, err = c.Table.CheckAndSetMany(ctx, conds)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func newCountTable(t *testing.T) *countTable {
	s := openStore(t, "", WithNoSync())
	return &countTable{Table: openTable(t, s, "pools").(*Table)}
}

func poolID(t *testing.T, typ zen.Type, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(1, typ, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type pinScore struct {
	Pin   zen.ID
	Score float64
}

// TestPoolInsertBlind: Insert is one write and no read, whatever is stored (a taken pin, worse
// and better rows in another source); readers apply dedup and tombstones, and Upkeep deletes the
// rows that lost.
func TestPoolInsertBlind(t *testing.T) {
	ctx := t.Context()
	tb := newCountTable(t)
	now := time.UnixMilli(1700000000000)
	p := zen.NewPools(tb, func() time.Time { return now })
	u := poolID(t, zen.TypeUser, 1)
	var first []zen.PoolEntry
	for i := range 60 {
		first = append(first, zen.PoolEntry{User: u, Pin: poolID(t, zen.TypePin, uint64(i+1)), Source: zen.SourceFollowing, Score: 0.5, CreatedMs: now.UnixMilli()})
	}
	if n, err := p.Insert(ctx, first); err != nil || n != 60 {
		t.Fatalf("Insert = %d, %v; want 60", n, err)
	}
	taken, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: poolID(t, zen.TypePin, 1)}})
	if err != nil || len(taken) != 1 {
		t.Fatalf("Take = %v, %v", taken, err)
	}
	tb.reset()
	// Pins 1..100 from another source: 1 is taken, 2..20 worse, 21..60 better, 61..100 new.
	var second []zen.PoolEntry
	for i := range 100 {
		score := 0.9
		if i < 20 {
			score = 0.1
		}
		second = append(second, zen.PoolEntry{User: u, Pin: poolID(t, zen.TypePin, uint64(i+1)), Source: zen.SourceRelated, Score: score, CreatedMs: now.UnixMilli()})
	}
	if n, err := p.Insert(ctx, second); err != nil || n != 100 {
		t.Fatalf("second Insert = %d, %v; want 100", n, err)
	}
	if got := tb.counts(); got != [5]int64{1, 0, 0, 0, 0} {
		t.Errorf("second Insert: %d Applies, %d CheckAndSetMany, %d CheckAndSet, %d Gets, %d scans; want 1 Apply only", got[0], got[1], got[2], got[3], got[4])
	}
	var wantF, wantR []pinScore
	for i := 2; i <= 20; i++ {
		wantF = append(wantF, pinScore{poolID(t, zen.TypePin, uint64(i)), 0.5})
	}
	for i := 21; i <= 100; i++ {
		wantR = append(wantR, pinScore{poolID(t, zen.TypePin, uint64(i)), 0.9})
	}
	best := bestOf(t, p, u)
	if diff := cmp.Diff(wantF, best[zen.SourceFollowing]); diff != "" {
		t.Errorf("following (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantR, best[zen.SourceRelated]); diff != "" {
		t.Errorf("related (-want +got):\n%s", diff)
	}
	if n, err := p.Size(ctx, u, 0); err != nil || n != 99 {
		t.Errorf("Size = %d, %v; want 99", n, err)
	}
	// Upkeep deletes the rows that lost: one row per live pin, plus the tombstone and the row
	// hidden under it (the taken pin's related row, kept until it expires).
	if _, _, err := p.Upkeep(ctx, u, 1000, 0); err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 99 + 2; len(rows) != want {
		t.Errorf("%d rows after Upkeep, want %d", len(rows), want)
	}
	if diff := cmp.Diff(best, bestOf(t, p, u)); diff != "" {
		t.Errorf("Upkeep changed what readers see (-before +after):\n%s", diff)
	}
}

// bestOf reads the Top of every source and keeps each pin's best, as the generator does.
func bestOf(t *testing.T, p *zen.Pools, user zen.ID) map[zen.Source][]pinScore {
	t.Helper()
	var lists [][]zen.PoolEntry
	for src := zen.Source(1); src <= 3; src++ {
		es, err := p.Top(t.Context(), user, src, 1000)
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, es)
	}
	out := map[zen.Source][]pinScore{}
	for i, l := range zen.BestAcrossSources(lists) {
		for _, e := range l {
			out[zen.Source(i+1)] = append(out[zen.Source(i+1)], pinScore{e.Pin, e.Score})
		}
	}
	return out
}

// TestPoolInsertCrash fails the one write of an improving Insert, before and after it lands:
// readers see all of the batch or none of it, never a pin twice, and the retry shows the better
// scores.
func TestPoolInsertCrash(t *testing.T) {
	ctx := t.Context()
	u := poolID(t, zen.TypeUser, 1)
	pins := []zen.ID{poolID(t, zen.TypePin, 1), poolID(t, zen.TypePin, 2), poolID(t, zen.TypePin, 3)}
	for _, after := range []bool{false, true} {
		tb := newCountTable(t)
		now := time.UnixMilli(1700000000000)
		p := zen.NewPools(tb, func() time.Time { return now })
		var worse, better []zen.PoolEntry
		for _, pin := range pins {
			worse = append(worse, zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceFollowing, Score: 0.5})
			better = append(better, zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.8})
		}
		if _, err := p.Insert(ctx, worse[:2]); err != nil { // pins 1, 2 present; 3 new
			t.Fatal(err)
		}
		tb.arm(1, after)
		if _, err := p.Insert(ctx, better); !errors.Is(err, errInjected) {
			t.Fatalf("after=%v: Insert = %v, want the injected fault", after, err)
		}
		tb.arm(0, false)
		got := bestOf(t, p, u)
		want := map[zen.Source][]pinScore{zen.SourceFollowing: {{pins[0], 0.5}, {pins[1], 0.5}}}
		if after {
			want = map[zen.Source][]pinScore{zen.SourceRelated: {{pins[0], 0.8}, {pins[1], 0.8}, {pins[2], 0.8}}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after=%v, after the fault (-want +got):\n%s", after, diff)
		}
		if _, err := p.Insert(ctx, better); err != nil {
			t.Fatal(err)
		}
		want = map[zen.Source][]pinScore{zen.SourceRelated: {{pins[0], 0.8}, {pins[1], 0.8}, {pins[2], 0.8}}}
		if diff := cmp.Diff(want, bestOf(t, p, u)); diff != "" {
			t.Errorf("after=%v, after the retry (-want +got):\n%s", after, diff)
		}
	}
}

// TestPoolInsertBatchedConcurrent races batched Inserts of overlapping pins with different
// scores and sources against Takes: each pin ends with the best score inserted unless it was
// taken (read as the generator reads, best across sources), a taken pin is never back, and each
// pin is taken at most once.
func TestPoolInsertBatchedConcurrent(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, "", WithNoSync())
	s.afterRead = func() {
		// sleep: the pause between read and write is the window a missing lock would leave open.
		time.Sleep(20 * time.Microsecond)
	}
	tb := openTable(t, s, "pools")
	now := time.UnixMilli(1700000000000)
	p := zen.NewPools(tb, func() time.Time { return now })
	u := poolID(t, zen.TypeUser, 1)
	const pinsN, writers = 40, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			var es []zen.PoolEntry
			for i := range pinsN {
				src := zen.Source(1 + (w+i)%3)
				es = append(es, zen.PoolEntry{User: u, Pin: poolID(t, zen.TypePin, uint64(i+1)), Source: src, Score: float64(w+1) / 10})
			}
			if _, err := p.Insert(ctx, es); err != nil {
				errs <- err
			}
		})
	}
	takenBy := make(map[zen.ID]int)
	var mu sync.Mutex
	wg.Go(func() {
		for i := 0; i < pinsN; i += 4 {
			got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: poolID(t, zen.TypePin, uint64(i+1))}})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			for _, e := range got {
				takenBy[e.Pin]++
			}
			mu.Unlock()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[zen.ID]float64{}
	for _, l := range bestOf(t, p, u) {
		for _, e := range l {
			if _, dup := seen[e.Pin]; dup {
				t.Errorf("pin %d shown twice", e.Pin)
			}
			seen[e.Pin] = e.Score
		}
	}
	for i := range pinsN {
		pin := poolID(t, zen.TypePin, uint64(i+1))
		if takenBy[pin] > 1 {
			t.Errorf("pin %d taken %d times", pin, takenBy[pin])
		}
		score, shown := seen[pin]
		switch {
		case takenBy[pin] == 1 && shown:
			t.Errorf("pin %d taken but shown (%v)", pin, score)
		case takenBy[pin] == 0 && (!shown || score != float64(writers)/10):
			t.Errorf("pin %d: shown=%v score %v, want the best, %v", pin, shown, score, float64(writers)/10)
		}
	}
}
