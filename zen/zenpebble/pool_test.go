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
	applies, cas, casMany atomic.Int64

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

func topOf(t *testing.T, p *zen.Pools, user zen.ID, src zen.Source) []pinScore {
	t.Helper()
	es, err := p.Top(t.Context(), user, src, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []pinScore
	for _, e := range es {
		out = append(out, pinScore{e.Pin, e.Score})
	}
	return out
}

// TestPoolInsertBatched: on a CondBatcher, Insert moves every index row with one
// CheckAndSetMany (one commit) and no single CheckAndSet, and keeps dedup and tombstones.
func TestPoolInsertBatched(t *testing.T) {
	ctx := t.Context()
	tb := newCountTable(t)
	now := time.UnixMilli(1700000000000)
	p := zen.NewPools(tb, func() time.Time { return now })
	u := poolID(t, zen.TypeUser, 1)
	var first []zen.PoolEntry
	for i := range 60 {
		first = append(first, zen.PoolEntry{User: u, Pin: poolID(t, zen.TypePin, uint64(i+1)), Source: zen.SourceFollowing, Score: 0.5})
	}
	if n, err := p.Insert(ctx, first); err != nil || n != 60 {
		t.Fatalf("Insert = %d, %v; want 60", n, err)
	}
	taken, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: poolID(t, zen.TypePin, 1)}})
	if err != nil || len(taken) != 1 {
		t.Fatalf("Take = %v, %v", taken, err)
	}
	tb.applies.Store(0)
	tb.cas.Store(0)
	tb.casMany.Store(0)
	// Pins 1..100 from another source: 1 is taken (ignored), 2..20 worse (ignored), 21..60
	// better (replace), 61..100 new.
	var second []zen.PoolEntry
	for i := range 100 {
		score := 0.9
		if i < 20 {
			score = 0.1
		}
		second = append(second, zen.PoolEntry{User: u, Pin: poolID(t, zen.TypePin, uint64(i+1)), Source: zen.SourceRelated, Score: score})
	}
	if n, err := p.Insert(ctx, second); err != nil || n != 80 {
		t.Fatalf("second Insert = %d, %v; want 80", n, err)
	}
	if got := [3]int64{tb.applies.Load(), tb.casMany.Load(), tb.cas.Load()}; got != [3]int64{2, 1, 0} {
		t.Errorf("second Insert: %d Applies, %d CheckAndSetMany, %d CheckAndSet; want 2, 1, 0", got[0], got[1], got[2])
	}
	var wantF, wantR []pinScore
	for i := 2; i <= 20; i++ {
		wantF = append(wantF, pinScore{poolID(t, zen.TypePin, uint64(i)), 0.5})
	}
	for i := 21; i <= 100; i++ {
		wantR = append(wantR, pinScore{poolID(t, zen.TypePin, uint64(i)), 0.9})
	}
	if diff := cmp.Diff(wantF, topOf(t, p, u, zen.SourceFollowing)); diff != "" {
		t.Errorf("following (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantR, topOf(t, p, u, zen.SourceRelated)); diff != "" {
		t.Errorf("related (-want +got):\n%s", diff)
	}
	// The replaced pool rows were deleted: one pool row per index row, plus the tombstone.
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*99 + 1; len(rows) != want {
		t.Errorf("%d rows, want %d", len(rows), want)
	}
}

// TestPoolInsertBatchedCrash fails each write of an improving batched Insert in turn (the pool
// rows' Apply, the CheckAndSetMany, the deletes' Apply), before and after it lands: no pin is
// shown twice, no better score is lost once a retry succeeds, and stale rows are swept.
func TestPoolInsertBatchedCrash(t *testing.T) {
	ctx := t.Context()
	u := poolID(t, zen.TypeUser, 1)
	pins := []zen.ID{poolID(t, zen.TypePin, 1), poolID(t, zen.TypePin, 2), poolID(t, zen.TypePin, 3)}
	for _, after := range []bool{false, true} {
		for k := 1; k <= 3; k++ {
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
			tb.arm(k, after)
			_, ierr := p.Insert(ctx, better)
			tb.arm(0, false)
			if ierr != nil && !errors.Is(ierr, errInjected) {
				t.Fatal(ierr)
			}
			if k <= 2 && ierr == nil {
				t.Errorf("fault at write %d after=%v: Insert did not fail", k, after)
			}
			shown := len(topOf(t, p, u, zen.SourceFollowing)) + len(topOf(t, p, u, zen.SourceRelated))
			if shown > len(pins) {
				t.Errorf("fault at write %d after=%v: %d entries shown for %d pins", k, after, shown, len(pins))
			}
			if _, err := p.Insert(ctx, better); err != nil {
				t.Fatal(err)
			}
			now = now.Add(2 * zen.StaleGrace) // let Top sweep rows of the failed attempt
			if got := topOf(t, p, u, zen.SourceFollowing); len(got) != 0 {
				t.Errorf("fault at write %d after=%v: worse entries still shown %v", k, after, got)
			}
			want := []pinScore{{pins[0], 0.8}, {pins[1], 0.8}, {pins[2], 0.8}}
			if diff := cmp.Diff(want, topOf(t, p, u, zen.SourceRelated)); diff != "" {
				t.Errorf("fault at write %d after=%v, after retry (-want +got):\n%s", k, after, diff)
			}
			rows, err := tb.Scan(ctx, zen.ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2*len(pins) {
				t.Errorf("fault at write %d after=%v: %d rows left, want %d", k, after, len(rows), 2*len(pins))
			}
		}
	}
}

// TestPoolInsertBatchedConcurrent races batched Inserts of overlapping pins with different
// scores against Takes: each pin ends with the best score inserted unless it was taken, a
// taken pin is never back, and each pin is taken at most once.
func TestPoolInsertBatchedConcurrent(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, "", WithNoSync())
	s.afterRead = func() { time.Sleep(20 * time.Microsecond) }
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
	for src := zen.Source(1); src <= 3; src++ {
		for _, e := range topOf(t, p, u, src) {
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
