package zen_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func memPools(t testing.TB) (*zen.Pools, *clock, zen.Table) {
	t.Helper()
	c := newClock()
	tb, err := zenmem.New().Table(context.Background(), "pools")
	if err != nil {
		t.Fatal(err)
	}
	return zen.NewPools(tb, c.Now), c, tb
}

type sp struct {
	Score float64
	Pin   uint64
	Src   zen.Source
}

func scorePins(es []zen.PoolEntry) []sp {
	out := make([]sp, len(es))
	for i, e := range es {
		out[i] = sp{e.Score, e.Pin.Local(), e.Source}
	}
	return out
}

// bestTops reads the Top(n) of every source and keeps each pin's best across them, as the
// generator does; it returns the three lists (following, interest, related).
func bestTops(t *testing.T, p *zen.Pools, user zen.ID, n int) [3][]sp {
	t.Helper()
	var lists [][]zen.PoolEntry
	for src := zen.Source(1); src <= 3; src++ {
		es, err := p.Top(context.Background(), user, src, n)
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, es)
	}
	var out [3][]sp
	for i, l := range zen.BestAcrossSources(lists) {
		if len(l) > 0 {
			out[i] = scorePins(l)
		}
	}
	return out
}

func top(t *testing.T, p *zen.Pools, user zen.ID, src zen.Source, n int) []sp {
	t.Helper()
	es, err := p.Top(context.Background(), user, src, n)
	if err != nil {
		t.Fatal(err)
	}
	return scorePins(es)
}

func TestPoolInsertTop(t *testing.T) {
	ctx := context.Background()
	p, c, tb := memPools(t)
	u := mustID(t, 3429, zen.TypeUser, 733)
	pin := func(l uint64) zen.ID { return mustID(t, 3429, zen.TypePin, l) }
	author := mustID(t, 1, zen.TypeUser, 5)
	in := []zen.PoolEntry{
		{User: u, Source: zen.SourceFollowing, Score: 0.5, Pin: pin(3), Author: author, Reason: "follows"},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(2)},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(1)},
		{User: u, Source: zen.SourceFollowing, Score: -0.1, Pin: pin(4)},
		{User: u, Source: zen.SourceFollowing, Score: 1.0, Pin: pin(5)},
		{User: u, Source: zen.SourceInterest, Score: 2.0, Pin: pin(6), Interest: mustID(t, 1, zen.TypeInterest, 1)},
	}
	n, err := p.Insert(ctx, in)
	if err != nil || n != 6 {
		t.Fatalf("Insert = %d, %v", n, err)
	}
	want := []sp{{1, 5, 1}, {0.93, 1, 1}, {0.93, 2, 1}, {0.5, 3, 1}, {-0.1, 4, 1}}
	if diff := cmp.Diff(want, top(t, p, u, zen.SourceFollowing, 10)); diff != "" {
		t.Errorf("Top (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:2], top(t, p, u, zen.SourceFollowing, 2)); diff != "" {
		t.Errorf("Top(2) (-want +got):\n%s", diff)
	}
	es, _ := p.Top(ctx, u, zen.SourceFollowing, 4)
	wantE := zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: 0.5, Pin: pin(3), Author: author, CreatedMs: c.Now().UnixMilli(), Reason: "follows"}
	if diff := cmp.Diff(wantE, es[3]); diff != "" {
		t.Errorf("entry payload (-want +got):\n%s", diff)
	}
	// The same batch again writes the same rows: nothing changes.
	before, _ := tb.Scan(ctx, zen.ScanOptions{})
	if n, err := p.Insert(ctx, in); err != nil || n != 6 {
		t.Errorf("re-Insert = %d, %v; want 6 rows written", n, err)
	}
	if after, _ := tb.Scan(ctx, zen.ScanOptions{}); !cmp.Equal(before, after) {
		t.Errorf("re-Insert changed the table: %d rows before, %d after", len(before), len(after))
	}
	for src, want := range map[zen.Source]int{zen.SourceFollowing: 5, zen.SourceInterest: 1, zen.SourceRelated: 0, 0: 6} {
		if got, err := p.Size(ctx, u, src); err != nil || got != want {
			t.Errorf("Size(%d) = %d, %v; want %d", src, got, err, want)
		}
	}
}

// TestPoolTopMany: TopMany reads, per source, exactly what Top reads, also when the head of a
// source is taken pins and worse rows of one pin (rows read and skipped, so that a page of n
// rows holds fewer than n entries and the read goes on after it).
func TestPoolTopMany(t *testing.T) {
	ctx := context.Background()
	p, _, _ := memPools(t)
	u := mustID(t, 3429, zen.TypeUser, 733)
	pin := func(l uint64) zen.ID { return mustID(t, 3429, zen.TypePin, l) }
	var in []zen.PoolEntry
	for i := range uint64(12) {
		in = append(in,
			zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: 10 - float64(i)/2, Pin: pin(1 + i)},
			// Pin 1+i twice more in following, worse: a skipped row each.
			zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: 1 - float64(i)/20, Pin: pin(1 + i)},
			zen.PoolEntry{User: u, Source: zen.SourceInterest, Score: 5 - float64(i)/4, Pin: pin(100 + i)})
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	// The best four of each source taken: their rows go; late rows for them come back.
	var taken []zen.PoolEntry
	for i := range uint64(4) {
		taken = append(taken, zen.PoolEntry{Pin: pin(1 + i)}, zen.PoolEntry{Pin: pin(100 + i)})
	}
	if got, err := p.Take(ctx, u, taken); err != nil || len(got) != len(taken) {
		t.Fatalf("Take = %d entries, %v", len(got), err)
	}
	var late []zen.PoolEntry
	for i := range uint64(4) {
		late = append(late, zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: 20, Pin: pin(1 + i)},
			zen.PoolEntry{User: u, Source: zen.SourceInterest, Score: 20, Pin: pin(100 + i)})
	}
	if _, err := p.Insert(ctx, late); err != nil {
		t.Fatal(err)
	}
	srcs := []zen.Source{zen.SourceFollowing, zen.SourceRelated, zen.SourceInterest}
	// The live entries, best first: pins 5..12 (following) and 104..111 (interest).
	var wantF, wantI []sp
	for i := range uint64(8) {
		wantF = append(wantF, sp{10 - float64(i+4)/2, 5 + i, zen.SourceFollowing})
		wantI = append(wantI, sp{5 - float64(i+4)/4, 104 + i, zen.SourceInterest})
	}
	for _, n := range []int{1, 3, 5, 8, 30} {
		lists, err := p.TopMany(ctx, u, srcs, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(lists) != len(srcs) {
			t.Fatalf("TopMany(%d): %d lists for %d sources", n, len(lists), len(srcs))
		}
		for i, src := range srcs {
			if diff := cmp.Diff(top(t, p, u, src, n), scorePins(lists[i])); diff != "" {
				t.Errorf("TopMany(%d), source %d (-Top +TopMany):\n%s", n, src, diff)
			}
		}
		want := [][]sp{wantF[:min(n, 8)], {}, wantI[:min(n, 8)]}
		got := [][]sp{scorePins(lists[0]), scorePins(lists[1]), scorePins(lists[2])}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("TopMany(%d) (-want +got):\n%s", n, diff)
		}
	}
	if _, err := p.TopMany(ctx, u, []zen.Source{zen.SourceFollowing, 0}, 3); err == nil {
		t.Error("TopMany with source 0: no error")
	}
}

// TestPoolDedupAcrossSources: per (user, pin) the better score wins, whatever the source (an
// equal score: the smaller source), as readers see it.
func TestPoolDedupAcrossSources(t *testing.T) {
	ctx := context.Background()
	p, _, _ := memPools(t)
	u, pin := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypePin, 1)
	steps := []struct {
		e       zen.PoolEntry
		wantN   int
		follow  []sp
		related []sp
	}{
		{zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceFollowing, Score: 0.5}, 1, []sp{{0.5, 1, 1}}, nil},
		{zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.4}, 1, []sp{{0.5, 1, 1}}, nil},
		{zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.5}, 1, []sp{{0.5, 1, 1}}, nil},
		{zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.7}, 1, nil, []sp{{0.7, 1, 3}}},
		{zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.9}, 1, nil, []sp{{0.9, 1, 3}}},
	}
	for i, s := range steps {
		n, err := p.Insert(ctx, []zen.PoolEntry{s.e})
		if err != nil || n != s.wantN {
			t.Fatalf("step %d: Insert = %d, %v; want %d", i, n, err, s.wantN)
		}
		b := bestTops(t, p, u, 10)
		f, r := b[0], b[2]
		if diff := cmp.Diff(s.follow, f, cmpEmpty); diff != "" {
			t.Errorf("step %d following (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(s.related, r, cmpEmpty); diff != "" {
			t.Errorf("step %d related (-want +got):\n%s", i, diff)
		}
	}
	// Within one batch the best wins too.
	pin2 := mustID(t, 1, zen.TypePin, 2)
	n, err := p.Insert(ctx, []zen.PoolEntry{
		{User: u, Pin: pin2, Source: zen.SourceFollowing, Score: 0.1},
		{User: u, Pin: pin2, Source: zen.SourceInterest, Score: 0.3},
		{User: u, Pin: pin2, Source: zen.SourceRelated, Score: 0.2},
	})
	if err != nil || n != 3 {
		t.Fatalf("batch Insert = %d, %v", n, err)
	}
	if diff := cmp.Diff([]sp{{0.3, 2, 2}}, bestTops(t, p, u, 10)[1]); diff != "" {
		t.Errorf("batch dedup (-want +got):\n%s", diff)
	}
}

var cmpEmpty = cmp.Transformer("nilEmpty", func(s []sp) []sp {
	if len(s) == 0 {
		return nil
	}
	return s
})

func TestPoolInsertRejects(t *testing.T) {
	ctx := context.Background()
	p, _, tb := memPools(t)
	u, pin := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypePin, 1)
	good := zen.PoolEntry{User: u, Pin: pin, Source: 1, Score: 1}
	for name, bad := range map[string]zen.PoolEntry{
		"NaN":           {User: u, Pin: pin, Source: 1, Score: math.NaN()},
		"source 0":      {User: u, Pin: pin, Source: 0, Score: 1},
		"user not user": {User: pin, Pin: pin, Source: 1, Score: 1},
		"pin not pin":   {User: u, Pin: u, Source: 1, Score: 1},
		"zero pin":      {User: u, Source: 1, Score: 1},
		"bad author":    {User: u, Pin: pin, Source: 1, Score: 1, Author: pin},
		"long reason":   {User: u, Pin: pin, Source: 1, Score: 1, Reason: string(make([]byte, zen.MaxReasonLen+1))},
	} {
		if _, err := p.Insert(ctx, []zen.PoolEntry{good, bad}); err == nil {
			t.Errorf("%s: Insert accepted", name)
		}
	}
	rows, _ := tb.Scan(ctx, zen.ScanOptions{})
	if len(rows) != 0 {
		t.Errorf("a refused batch wrote %d rows", len(rows))
	}
	for _, n := range []int{0, -1, zen.MaxPoolPage + 1} {
		if _, err := p.Top(ctx, u, 1, n); err == nil {
			t.Errorf("Top(n=%d): no error", n)
		}
	}
	if _, err := p.Top(ctx, u, 0, 1); err == nil {
		t.Error("Top(source 0): no error")
	}
}

func TestPoolTakeRemoveTrimExpire(t *testing.T) {
	ctx := context.Background()
	p, c, _ := memPools(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	var in []zen.PoolEntry
	for i := range 10 {
		in = append(in, zen.PoolEntry{User: u, Pin: mustID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.SourceFollowing, Score: float64(i), CreatedMs: int64(1000 + i)})
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	// Take pins 10 and 9 (and one absent, and 10 twice).
	got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: in[9].Pin}, {Pin: in[8].Pin}, {Pin: mustID(t, 1, zen.TypePin, 99)}, {Pin: in[9].Pin}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]sp{{9, 10, 1}, {8, 9, 1}}, scorePins(got)); diff != "" {
		t.Errorf("Take (-want +got):\n%s", diff)
	}
	if again, _ := p.Take(ctx, u, in[8:]); len(again) != 0 {
		t.Errorf("second Take won %v", scorePins(again))
	}
	if n, err := p.Remove(ctx, u, []zen.ID{in[7].Pin, in[9].Pin}); err != nil || n != 2 {
		t.Errorf("Remove = %d, %v; want 2 (both marked)", n, err)
	}
	// Remaining scores 0..6. Trim to 5 drops 0 and 1.
	if n, err := p.Trim(ctx, u, zen.SourceFollowing, 5); err != nil || n != 2 {
		t.Errorf("Trim = %d, %v; want 2", n, err)
	}
	if diff := cmp.Diff([]sp{{6, 7, 1}, {5, 6, 1}, {4, 5, 1}, {3, 4, 1}, {2, 3, 1}}, top(t, p, u, zen.SourceFollowing, 100)); diff != "" {
		t.Errorf("after Trim (-want +got):\n%s", diff)
	}
	if n, _ := p.Trim(ctx, u, zen.SourceFollowing, 5); n != 0 {
		t.Errorf("second Trim = %d", n)
	}
	// Expire entries created before 1004 (pins 3 and 4 are left of those).
	if n, err := p.Expire(ctx, u, 1004); err != nil || n != 2 {
		t.Errorf("Expire = %d, %v; want 2", n, err)
	}
	// RemoveWhere by author-like predicate: drop even scores.
	if n, err := p.RemoveWhere(ctx, u, zen.SourceFollowing, func(e zen.PoolEntry) bool { return int(e.Score)%2 == 0 }); err != nil || n != 2 {
		t.Errorf("RemoveWhere = %d, %v; want 2", n, err)
	}
	if diff := cmp.Diff([]sp{{5, 6, 1}}, top(t, p, u, zen.SourceFollowing, 100)); diff != "" {
		t.Errorf("after RemoveWhere (-want +got):\n%s", diff)
	}
	if err := p.DeleteUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Size(ctx, u, 0); n != 0 {
		t.Errorf("Size after DeleteUser = %d", n)
	}
	_ = c
	if _, err := p.Take(ctx, u, []zen.PoolEntry{{User: mustID(t, 1, zen.TypeUser, 2), Pin: in[0].Pin}}); err == nil {
		t.Error("Take of another user's entry: no error")
	}
}

// TestPoolTakeConcurrent: many goroutines take overlapping pins; each pin is won exactly once.
func TestPoolTakeConcurrent(t *testing.T) {
	ctx := context.Background()
	p, _, _ := memPools(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	const pins = 200
	var in []zen.PoolEntry
	for i := range pins {
		in = append(in, zen.PoolEntry{User: u, Pin: mustID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.Source(1 + i%3), Score: float64(i % 17)})
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		won = map[zen.ID]int{}
		wg  sync.WaitGroup
	)
	for w := range 12 {
		wg.Go(func() {
			// Bounded: a Take that stopped removing pins must fail the test, not spin forever.
			for round := 0; ; round++ {
				if round > 10*pins {
					t.Errorf("taker %d: still taking after %d rounds: Take is not draining the pool", w, round)
					return
				}
				// Half the takers take what Top shows them, half take fixed slices.
				var want []zen.PoolEntry
				if w%2 == 0 {
					es, err := p.Top(ctx, u, zen.Source(1+w%3), 10)
					if err != nil {
						t.Error(err)
						return
					}
					want = es
				} else {
					want = in[(w*13)%pins:]
					want = want[:min(len(want), 25)]
				}
				if len(want) == 0 {
					return
				}
				got, err := p.Take(ctx, u, want)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range got {
					won[e.Pin]++
				}
				mu.Unlock()
				if len(got) == 0 && w%2 == 1 {
					return
				}
			}
		})
	}
	wg.Wait()
	// Sweep up whatever the fixed-slice takers never asked for.
	rest, err := p.Take(ctx, u, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rest {
		won[e.Pin]++
	}
	if len(won) != pins {
		t.Errorf("%d pins taken, want %d", len(won), pins)
	}
	for pin, n := range won {
		if n != 1 {
			t.Errorf("pin %d taken %d times", pin, n)
		}
	}
}

// TestPoolInsertConcurrent: concurrent inserts of the same pins from different sources leave one
// live entry per pin, holding the best score; Upkeep then leaves exactly one row per pin.
func TestPoolInsertConcurrent(t *testing.T) {
	ctx := context.Background()
	p, _, tb := memPools(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	const pins = 50
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for round := range 5 {
				var es []zen.PoolEntry
				for i := range pins {
					es = append(es, zen.PoolEntry{User: u, Pin: mustID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.Source(1 + (w+round)%3), Score: float64((w*7+round*3+i)%11) + float64(w)/100})
				}
				if _, err := p.Insert(ctx, es); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The best score each pin was offered.
	best := map[uint64]float64{}
	for w := range 8 {
		for round := range 5 {
			for i := range pins {
				s := float64((w*7+round*3+i)%11) + float64(w)/100
				if s > best[uint64(i+1)] {
					best[uint64(i+1)] = s
				}
			}
		}
	}
	seen := func() map[uint64]float64 {
		out := map[uint64]float64{}
		for _, l := range bestTops(t, p, u, 1000) {
			for _, e := range l {
				if _, dup := out[e.Pin]; dup {
					t.Errorf("pin %d in two pools", e.Pin)
				}
				out[e.Pin] = e.Score
			}
		}
		return out
	}
	if diff := cmp.Diff(best, seen()); diff != "" {
		t.Errorf("best scores (-want +got):\n%s", diff)
	}
	if _, _, err := p.Upkeep(ctx, u, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(best, seen()); diff != "" {
		t.Errorf("best scores after Upkeep (-want +got):\n%s", diff)
	}
	rows, _ := tb.Scan(ctx, zen.ScanOptions{})
	if len(rows) != pins {
		t.Errorf("%d rows after Upkeep, want %d (one row per pin)", len(rows), pins)
	}
}

// TestPoolCrashRetry fails the write of an improving Insert (its only one) and each write of a
// Take and of a Restore in turn, before and after the write lands; afterwards the pin is never
// shown twice, the better score is never lost, a retry converges, and a claim is won exactly
// once.
func TestPoolCrashRetry(t *testing.T) {
	ctx := context.Background()
	u, pin := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypePin, 1)
	for _, after := range []bool{false, true} {
		for k := 1; k <= 3; k++ {
			fs := &faultStore{Store: zenmem.New()}
			tb, _ := fs.Table(ctx, "pools")
			c := newClock()
			p := zen.NewPools(tb, c.Now)
			if _, err := p.Insert(ctx, []zen.PoolEntry{{User: u, Pin: pin, Source: zen.SourceFollowing, Score: 0.5}}); err != nil {
				t.Fatal(err)
			}
			better := zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceRelated, Score: 0.8}
			fs.arm(k, after)
			_, ierr := p.Insert(ctx, []zen.PoolEntry{better})
			fs.arm(0, false)
			if ierr != nil && !errors.Is(ierr, errInjected) {
				t.Fatal(ierr)
			}
			if (ierr != nil) != (k == 1) {
				t.Errorf("fault at write %d after=%v: Insert = %v", k, after, ierr)
			}
			want := [3][]sp{{{0.5, 1, 1}}}
			if k > 1 || after {
				want = [3][]sp{2: {{0.8, 1, 3}}}
			}
			if diff := cmp.Diff(want, bestTops(t, p, u, 10)); diff != "" {
				t.Errorf("fault at write %d after=%v (-want +got):\n%s", k, after, diff)
			}
			if _, err := p.Insert(ctx, []zen.PoolEntry{better}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([3][]sp{2: {{0.8, 1, 3}}}, bestTops(t, p, u, 10)); diff != "" {
				t.Errorf("fault at write %d after=%v, after retry (-want +got):\n%s", k, after, diff)
			}
			if _, _, err := p.Upkeep(ctx, u, 100, 0); err != nil {
				t.Fatal(err)
			}
			if rows, _ := tb.Scan(ctx, zen.ScanOptions{}); len(rows) != 1 {
				t.Errorf("fault at write %d after=%v: %d rows left after Upkeep, want 1", k, after, len(rows))
			}
			// A Take that fails part-way: the pin is either still takeable or gone, never shown.
			fs.arm(k, after)
			got, terr := p.Take(ctx, u, []zen.PoolEntry{better})
			fs.arm(0, false)
			again, _ := p.Take(ctx, u, []zen.PoolEntry{better})
			total := len(got) + len(again)
			if terr != nil && !errors.Is(terr, errInjected) {
				t.Fatal(terr)
			}
			// Exactly one claim wins, even when the claiming write errs after landing (k=1).
			if total != 1 {
				t.Errorf("take, fault at write %d after=%v: won %d+%d times, want once", k, after, len(got), len(again))
			}
			if r := top(t, p, u, zen.SourceRelated, 10); len(r) != 0 {
				t.Errorf("take, fault at write %d after=%v: still shown %v", k, after, r)
			}
			// The taken tombstone reads as absent, hides a later insert, and yields to Restore.
			if n, err := p.Size(ctx, u, 0); err != nil || n != 0 {
				t.Errorf("take, fault at write %d after=%v: Size = %d, %v; want 0", k, after, n, err)
			}
			back := zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceInterest, Score: 0.1}
			if _, err := p.Insert(ctx, []zen.PoolEntry{back}); err != nil {
				t.Fatal(err)
			}
			if got := top(t, p, u, zen.SourceInterest, 10); len(got) != 0 {
				t.Errorf("take, fault at write %d after=%v: re-Insert shown %v", k, after, got)
			}
			// A Restore that fails part-way is retried (the generator's release is); then the pin
			// is back once.
			fs.arm(k, after)
			_, rerr := p.Restore(ctx, []zen.PoolEntry{back})
			fs.arm(0, false)
			if rerr != nil && !errors.Is(rerr, errInjected) {
				t.Fatal(rerr)
			}
			if b := bestTops(t, p, u, 10); len(b[0])+len(b[1])+len(b[2]) > 1 {
				t.Errorf("restore, fault at write %d after=%v: shown %v", k, after, b)
			}
			if n, err := p.Restore(ctx, []zen.PoolEntry{back}); err != nil || n != 1 {
				t.Errorf("restore, fault at write %d after=%v: Restore = %d, %v; want 1", k, after, n, err)
			}
			// Restore lifts the tombstone off every row of the pin: one the Take failed to delete
			// (k=2, before landing) is back too, and the best row wins.
			want = [3][]sp{1: {{0.1, 1, 2}}}
			if k == 2 && !after {
				want = [3][]sp{2: {{0.8, 1, 3}}}
			}
			if diff := cmp.Diff(want, bestTops(t, p, u, 10)); diff != "" {
				t.Errorf("restore, fault at write %d after=%v: restored (-want +got):\n%s", k, after, diff)
			}
		}
	}
}

// TestPoolRestoringMark: a Restore that stops after writing the rows (its mark not lifted)
// leaves the pin out, and readers keep its rows, however old the mark (only Expire's age rule
// deletes them); a retried Restore puts the pin back. A row of the older layout (an 8-byte
// value) is never shown, and is deleted.
func TestPoolRestoringMark(t *testing.T) {
	ctx := context.Background()
	fs := &faultStore{Store: zenmem.New()}
	tb, _ := fs.Table(ctx, "pools")
	c := newClock()
	p := zen.NewPools(tb, c.Now)
	u, pin := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypePin, 1)
	e := zen.PoolEntry{User: u, Pin: pin, Source: zen.SourceFollowing, Score: 0.5}
	if _, err := p.Insert(ctx, []zen.PoolEntry{e}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Take(ctx, u, []zen.PoolEntry{e}); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	fs.arm(3, false) // Restore: mark, rows, lift: the lift fails
	if _, err := p.Restore(ctx, []zen.PoolEntry{e}); !errors.Is(err, errInjected) {
		t.Fatalf("Restore = %v, want the injected fault", err)
	}
	fs.arm(0, false)
	k, _ := zen.PoolKey(u, zen.SourceFollowing, 0.5, pin)
	if got := top(t, p, u, zen.SourceFollowing, 5); len(got) != 0 {
		t.Errorf("restoring pin shown: %v", got)
	}
	c.Add(time.Hour)
	top(t, p, u, zen.SourceFollowing, 5)
	if _, _, err := p.Upkeep(ctx, u, 100, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Get(ctx, k); err != nil {
		t.Errorf("row under a restoring mark deleted by a reader: %v", err)
	}
	if n, err := p.Restore(ctx, []zen.PoolEntry{e}); err != nil || n != 1 {
		t.Errorf("retried Restore = %d, %v; want 1", n, err)
	}
	if diff := cmp.Diff([]sp{{0.5, 1, 1}}, top(t, p, u, zen.SourceFollowing, 5)); diff != "" {
		t.Errorf("after the retried Restore (-want +got):\n%s", diff)
	}
	// A row of the older layout.
	old, _ := zen.PoolKey(u, zen.SourceFollowing, 0.9, mustID(t, 1, zen.TypePin, 2))
	if err := tb.Apply(ctx, []zen.Mutation{{Key: old, Value: make([]byte, 8)}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]sp{{0.5, 1, 1}}, top(t, p, u, zen.SourceFollowing, 5)); diff != "" {
		t.Errorf("with an older-layout row (-want +got):\n%s", diff)
	}
	if _, err := tb.Get(ctx, old); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("older-layout row kept: %v", err)
	}
}

// TestPoolTombstones: a pin taken, removed or forgotten stays out of the user's pools whatever
// is inserted later; Restore gives back only what Take took; readers count no tombstone.
func TestPoolTombstones(t *testing.T) {
	ctx := context.Background()
	p, _, _ := memPools(t)
	u, other := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeUser, 2)
	pin := func(l uint64) zen.ID { return mustID(t, 1, zen.TypePin, l) }
	e := func(l uint64, src zen.Source, score float64) zen.PoolEntry {
		return zen.PoolEntry{User: u, Pin: pin(l), Source: src, Score: score, CreatedMs: 1000}
	}
	insert := func(what string, want int, es ...zen.PoolEntry) {
		t.Helper()
		if n, err := p.Insert(ctx, es); err != nil || n != want {
			t.Errorf("%s: Insert = %d, %v; want %d", what, n, err, want)
		}
	}
	restore := func(what string, want int, es ...zen.PoolEntry) {
		t.Helper()
		if n, err := p.Restore(ctx, es); err != nil || n != want {
			t.Errorf("%s: Restore = %d, %v; want %d", what, n, err, want)
		}
	}
	all := func() []sp {
		t.Helper()
		var out []sp
		for _, l := range bestTops(t, p, u, 100) {
			out = append(out, l...)
		}
		return out
	}
	insert("first", 4, e(1, 1, 0.5), e(2, 1, 0.4), e(3, 2, 0.3), e(4, 3, 0.2))
	if got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	// Taken: the same entry, a better score, another source: all ignored.
	insert("taken, same", 1, e(1, 1, 0.5)) // written blind, hidden by the tombstone
	insert("taken, better", 1, e(1, 3, 9))
	if diff := cmp.Diff([]sp{{0.4, 2, 1}, {0.3, 3, 2}, {0.2, 4, 3}}, all()); diff != "" {
		t.Errorf("after re-inserting a taken pin (-want +got):\n%s", diff)
	}
	// Another user's pools are not affected by u's tombstone.
	if n, err := p.Insert(ctx, []zen.PoolEntry{{User: other, Pin: pin(1), Source: 1, Score: 0.1}}); err != nil || n != 1 {
		t.Errorf("other user's Insert = %d, %v; want 1", n, err)
	}
	// Restore gives the taken pin back (a Restore of a live entry writes its row, as Insert),
	// with its best row: the better one a late job wrote while it was taken.
	restore("taken", 2, e(1, 1, 0.5), e(2, 1, 0.4))
	restore("again", 1, e(1, 1, 0.5))
	if diff := cmp.Diff([]sp{{0.4, 2, 1}, {0.3, 3, 2}, {9, 1, 3}, {0.2, 4, 3}}, all()); diff != "" {
		t.Errorf("after Restore (-want +got):\n%s", diff)
	}
	// Remove: forgotten, so neither Insert nor Restore brings it back.
	if n, err := p.Remove(ctx, u, []zen.ID{pin(2)}); err != nil || n != 1 {
		t.Errorf("Remove = %d, %v; want 1", n, err)
	}
	insert("removed", 1, e(2, 1, 0.9))
	restore("removed", 0, e(2, 1, 0.9))
	// Forget: a live pin, an absent one, a taken one (each marked once); all stay out.
	if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(3)}}); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Forget(ctx, u, []zen.ID{pin(4), pin(5), pin(3), pin(4)}); err != nil || n != 3 {
		t.Errorf("Forget = %d, %v; want 3", n, err)
	}
	if n, err := p.Forget(ctx, u, []zen.ID{pin(4), pin(5)}); err != nil || n != 2 {
		t.Errorf("second Forget = %d, %v; want 2", n, err)
	}
	insert("forgotten", 3, e(3, 1, 1), e(4, 1, 1), e(5, 1, 1))
	restore("forgotten", 0, e(3, 1, 1), e(4, 1, 1), e(5, 1, 1))
	if diff := cmp.Diff([]sp{{9, 1, 3}}, all()); diff != "" {
		t.Errorf("after Forget (-want +got):\n%s", diff)
	}
	// Readers treat tombstones as absent.
	if n, err := p.Size(ctx, u, 0); err != nil || n != 1 {
		t.Errorf("Size = %d, %v; want 1", n, err)
	}
	if n, err := p.Trim(ctx, u, zen.SourceFollowing, 1); err != nil || n != 0 {
		t.Errorf("Trim = %d, %v; want 0", n, err)
	}
	if n, err := p.RemoveWhere(ctx, u, 0, func(zen.PoolEntry) bool { return true }); err != nil || n != 1 {
		t.Errorf("RemoveWhere = %d, %v; want 1", n, err)
	}
	if got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(2)}, {Pin: pin(3)}, {Pin: pin(4)}}); err != nil || len(got) != 0 {
		t.Errorf("Take of tombstoned pins = %v, %v; want none", got, err)
	}
	if _, err := p.Forget(ctx, u, []zen.ID{mustID(t, 1, zen.TypeBoard, 1)}); err == nil {
		t.Error("Forget of a board ID: no error")
	}
}

// TestPoolTakeInsertConcurrent: takers race inserters that keep re-offering every pin with
// better scores from other sources (late fanout jobs). Each pin is won exactly once, and once
// taken it never comes back.
func TestPoolTakeInsertConcurrent(t *testing.T) {
	ctx := context.Background()
	p, c, tb := memPools(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	const pins = 120
	offer := func(round int) []zen.PoolEntry {
		var es []zen.PoolEntry
		for i := range pins {
			es = append(es, zen.PoolEntry{User: u, Pin: mustID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.Source(1 + (i+round)%3), Score: float64(round) + float64(i%5)/10})
		}
		return es
	}
	if _, err := p.Insert(ctx, offer(0)); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		won  = map[zen.ID]int{}
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	// Each inserter stops after maxRounds: every round adds rows that the takers' reads step
	// over, so on a starved machine unbounded inserters could outrun the takers for good.
	const maxRounds = 100
	for w := range 4 {
		wg.Go(func() {
			for round := 1; round <= maxRounds; round++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Insert(ctx, offer(round*4+w)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(won) == pins
	}
	var takers sync.WaitGroup
	for w := range 6 {
		takers.Go(func() {
			for !done() {
				es, err := p.Top(ctx, u, zen.Source(1+w%3), 7)
				if err != nil {
					t.Error(err)
					return
				}
				if len(es) == 0 {
					continue
				}
				got, err := p.Take(ctx, u, es)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range got {
					won[e.Pin]++
				}
				mu.Unlock()
			}
		})
	}
	takers.Wait()
	close(stop)
	wg.Wait()
	if len(won) != pins {
		t.Errorf("%d pins taken, want %d", len(won), pins)
	}
	for pin, n := range won {
		if n != 1 {
			t.Errorf("pin %d taken %d times", pin, n)
		}
	}
	if _, err := p.Insert(ctx, offer(1000)); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Size(ctx, u, 0); n != 0 {
		t.Errorf("Size after everything was taken = %d", n)
	}
	for _, src := range []zen.Source{1, 2, 3} {
		if got := top(t, p, u, src, 1000); len(got) != 0 {
			t.Errorf("source %d shows %v", src, got)
		}
	}
	// The rows of late inserts stay hidden under the tombstones until they expire.
	if n, err := p.Expire(ctx, u, c.Now().Add(time.Hour).UnixMilli()); err != nil || n != 0 {
		t.Errorf("Expire = %d, %v; want 0 (nothing live)", n, err)
	}
	rows, _ := tb.Scan(ctx, zen.ScanOptions{})
	if len(rows) != 0 {
		t.Errorf("%d rows left after Expire past everything, want 0", len(rows))
	}
}

// TestPoolTombstoneExpiry: Expire drops tombstones older than its cut-off (or than the tombstone
// TTL), not younger ones, and does not count them; DeleteUser drops them all.
func TestPoolTombstoneExpiry(t *testing.T) {
	ctx := context.Background()
	for _, ttl := range []time.Duration{0, time.Hour} {
		c := newClock()
		tb, err := zenmem.New().Table(ctx, "pools")
		if err != nil {
			t.Fatal(err)
		}
		p := zen.NewPools(tb, c.Now, zen.WithTombstoneTTL(ttl))
		u := mustID(t, 1, zen.TypeUser, 1)
		pin := func(l uint64) zen.ID { return mustID(t, 1, zen.TypePin, l) }
		nowMs := c.Now().UnixMilli()
		e := func(l uint64) zen.PoolEntry {
			return zen.PoolEntry{User: u, Pin: pin(l), Source: zen.SourceFollowing, Score: 1, CreatedMs: nowMs}
		}
		if _, err := p.Insert(ctx, []zen.PoolEntry{e(1), e(2)}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil { // tombstone at nowMs
			t.Fatal(err)
		}
		c.Add(2 * time.Hour)
		if _, err := p.Forget(ctx, u, []zen.ID{pin(3)}); err != nil { // tombstone at nowMs+2h
			t.Fatal(err)
		}
		rowCount := func() int {
			rows, _ := tb.Scan(ctx, zen.ScanOptions{})
			return len(rows)
		}
		// A cut-off before both tombstones (and the entry): nothing goes... unless the
		// tombstone TTL (1h) says the take is old enough.
		n, err := p.Expire(ctx, u, nowMs)
		if err != nil || n != 0 {
			t.Errorf("ttl %v: Expire(before all) = %d, %v; want 0", ttl, n, err)
		}
		wantRows := 3 // pin 2's row, two tombstones
		if ttl > 0 {
			wantRows = 2
		}
		if got := rowCount(); got != wantRows {
			t.Errorf("ttl %v: %d rows after the first Expire, want %d", ttl, got, wantRows)
		}
		if _, err := p.Insert(ctx, []zen.PoolEntry{e(1)}); err != nil {
			t.Fatal(err)
		}
		if got, want := len(top(t, p, u, zen.SourceFollowing, 10)), map[bool]int{false: 1, true: 2}[ttl > 0]; got != want {
			t.Errorf("ttl %v: %d pins shown after inserting the taken pin past the first Expire, want %d", ttl, got, want)
		}
		if ttl > 0 {
			if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil {
				t.Fatal(err)
			}
			c.Add(2 * time.Hour)
		}
		// A cut-off after everything: the entry (counted) and the tombstones (not) go.
		n, err = p.Expire(ctx, u, c.Now().UnixMilli()+1)
		if err != nil || n != 1 {
			t.Errorf("ttl %v: Expire(after all) = %d, %v; want 1", ttl, n, err)
		}
		if got := rowCount(); got != 0 {
			t.Errorf("ttl %v: %d rows left after Expire, want 0", ttl, got)
		}
		// With the tombstones gone, the pins can be inserted again.
		if n, err := p.Insert(ctx, []zen.PoolEntry{e(1), e(3)}); err != nil || n != 2 {
			t.Errorf("ttl %v: Insert after expiry = %d, %v; want 2", ttl, n, err)
		}
		if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil {
			t.Fatal(err)
		}
		if err := p.DeleteUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		if got := rowCount(); got != 0 {
			t.Errorf("ttl %v: %d rows left after DeleteUser, want 0", ttl, got)
		}
	}
}

// TestPoolUpkeepIsExpireThenTrim: Upkeep leaves exactly the rows that Expire and then Trim of
// every source leave, and counts the same, on random pools with tombstones.
func TestPoolUpkeepIsExpireThenTrim(t *testing.T) {
	ctx := context.Background()
	u := mustID(t, 3429, zen.TypeUser, 733)
	pin := func(l uint64) zen.ID { return mustID(t, 3429, zen.TypePin, l) }
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 1))
		var in []zen.PoolEntry
		for range 5 + r.IntN(40) {
			in = append(in, zen.PoolEntry{User: u, Source: zen.Source(1 + r.IntN(3)), Score: float64(r.IntN(10)) / 4,
				Pin: pin(uint64(1 + r.IntN(30))), CreatedMs: int64(r.IntN(20))})
		}
		var take []zen.PoolEntry
		for range r.IntN(5) {
			take = append(take, zen.PoolEntry{Pin: pin(uint64(1 + r.IntN(30)))})
		}
		keep, cut := r.IntN(8), int64(r.IntN(20))
		var pools [2]*zen.Pools
		var tables [2]zen.Table
		for i := range 2 {
			p, _, tb := memPools(t)
			pools[i], tables[i] = p, tb
			if _, err := p.Insert(ctx, in); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Take(ctx, u, take); err != nil {
				t.Fatal(err)
			}
		}
		expired, trimmed, err := pools[0].Upkeep(ctx, u, keep, cut)
		if err != nil {
			t.Fatal(err)
		}
		wantExpired, err := pools[1].Expire(ctx, u, cut)
		if err != nil {
			t.Fatal(err)
		}
		wantTrimmed := 0
		for src := zen.Source(1); src <= 3; src++ {
			n, err := pools[1].Trim(ctx, u, src, keep)
			if err != nil {
				t.Fatal(err)
			}
			wantTrimmed += n
		}
		if expired != wantExpired || trimmed != wantTrimmed {
			t.Errorf("seed %d: Upkeep = %d expired, %d trimmed; Expire, Trim = %d, %d", seed, expired, trimmed, wantExpired, wantTrimmed)
		}
		var rows [2][]zen.KV
		for i, tb := range tables {
			if rows[i], err = tb.Scan(ctx, zen.ScanOptions{Limit: 10000}); err != nil {
				t.Fatal(err)
			}
			for _, kv := range rows[i] {
				if len(kv.Value) == 18 && kv.Value[0] == 0 { // a tombstone: its nonce is random
					clear(kv.Value[10:])
				}
			}
		}
		if diff := cmp.Diff(rows[1], rows[0]); diff != "" {
			t.Errorf("seed %d (keep %d, cut %d): rows after Upkeep (-Expire+Trim +Upkeep):\n%s", seed, keep, cut, diff)
		}
	}
}
