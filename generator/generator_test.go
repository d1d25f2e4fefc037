package generator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/zen"
)

func pinsOf(items []Item) []zen.ID {
	out := make([]zen.ID, len(items))
	for i, it := range items {
		out[i] = it.Pin
	}
	return out
}

func entryPins(es []zen.PoolEntry) []zen.ID {
	out := make([]zen.ID, len(es))
	for i, e := range es {
		out[i] = e.Pin
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// entrySorted returns the pins sorted.
func entrySorted(ps []zen.ID) []zen.ID {
	out := slices.Clone(ps)
	slices.Sort(out)
	return out
}

func (e *env) fill(t testing.TB, n int) []zen.PoolEntry {
	t.Helper()
	var es []zen.PoolEntry
	for i := 1; i <= n; i++ {
		es = append(es, e.entry(t, zen.SourceFollowing, uint64(i), 1-float64(i)/1000, uint64(i), uint64(i), time.Hour))
	}
	e.insert(t, es...)
	return es
}

// runCrashing runs fn in a goroutine that a hook may end with runtime.Goexit (a crash: no
// cleanup code of the generator runs) and waits for it.
func runCrashing(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// TestCrashBetweenChoosingAndServing crashes GenerateChunk at each step of the take protocol and
// checks that nothing is lost or handed out twice: the crashed chunk is reported by Pending
// (after the grace period) with exactly the pins it claimed, and settling it either way
// accounts for every pin.
func TestCrashBetweenChoosingAndServing(t *testing.T) {
	points := []struct {
		name    string
		claimed bool // whether the crashed chunk owns its pins
	}{
		{"after-intent-before-claims", false},
		{"after-claims-before-take", true},
		{"after-take-before-ready", true},
	}
	for _, b := range backends {
		for _, pt := range points {
			for _, delivered := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/delivered=%v", b.name, pt.name, delivered), func(t *testing.T) {
					ctx := context.Background()
					cfg := DefaultConfig()
					cfg.MaxChunk = 10
					e := newEnv(t, b.make, &cfg)
					e.fill(t, 30)
					crashing := true
					hp := &hookPools{Pools: e.pools}
					ht := &hookTable{Table: e.state}
					switch pt.name {
					case "after-intent-before-claims":
						ht.beforeCAS = func(key []byte) {
							if crashing && len(key) == 17 && key[8] == tagClaim {
								runtime.Goexit()
							}
						}
					case "after-claims-before-take":
						hp.beforeTake = func([]zen.PoolEntry) {
							if crashing {
								runtime.Goexit()
							}
						}
					case "after-take-before-ready":
						hp.afterTake = func([]zen.PoolEntry) {
							if crashing {
								runtime.Goexit()
							}
						}
					}
					g, err := New(Params{Pools: hp, State: ht, Config: &cfg, Now: e.clk.Now})
					if err != nil {
						t.Fatal(err)
					}
					runCrashing(func() {
						_, err := g.GenerateChunk(ctx, e.user, Options{})
						t.Errorf("GenerateChunk returned (%v); the hook should have crashed it", err)
					})
					// The crashed call still starts its expiry sweep, whose writes go through the
					// hooks: let it end before the hooks' flag changes.
					g.Wait()
					crashing = false

					// A request right after the crash gets none of the crashed chunk's pins.
					other, err := g.GenerateChunk(ctx, e.user, Options{Max: 10})
					if err != nil {
						t.Fatal(err)
					}
					if len(other.Items) != 10 {
						t.Fatalf("next chunk has %d pins, want 10", len(other.Items))
					}
					// Too young to recover: Pending lists only the ready chunk.
					pend, err := g.Pending(ctx, e.user)
					if err != nil {
						t.Fatal(err)
					}
					if len(pend) != 1 || pend[0].ID != other.ID {
						t.Fatalf("Pending before grace = %v, want only %s", pend, other.ID)
					}
					// Unfinished names the crashed chunk's claimed pins meanwhile, none of the
					// other chunk's.
					unfinished, err := g.Unfinished(ctx, e.user)
					if err != nil {
						t.Fatal(err)
					}
					wantUnfinished := 0
					if pt.claimed {
						wantUnfinished = 10
					}
					if len(unfinished) != wantUnfinished {
						t.Fatalf("Unfinished before grace = %v, want %d pins", unfinished, wantUnfinished)
					}
					for _, p := range pinsOf(other.Items) {
						if slices.Contains(unfinished, p) {
							t.Errorf("Unfinished names pin %d of the finished chunk %s", p, other.ID)
						}
					}
					// After the grace period the crashed chunk is finished and listed (oldest
					// first) with exactly the pins it claimed, none of them in the other chunk.
					e.clk.Advance(2 * time.Minute)
					pend, err = g.Pending(ctx, e.user)
					if err != nil {
						t.Fatal(err)
					}
					crashedPins := 0
					if pt.claimed {
						if len(pend) != 2 || len(pend[0].Items) != 10 || pend[1].ID != other.ID {
							t.Fatalf("Pending after grace = %+v, want the crashed chunk with 10 pins, then %s", pend, other.ID)
						}
						crashedPins = 10
						seen := map[zen.ID]bool{}
						for _, p := range pinsOf(other.Items) {
							seen[p] = true
						}
						for _, p := range pinsOf(pend[0].Items) {
							if seen[p] {
								t.Errorf("pin %d is in the crashed chunk and in the next one", p)
							}
						}
					} else if len(pend) != 1 || pend[0].ID != other.ID {
						t.Fatalf("Pending after grace = %+v, want only %s (the crash came before any claim)", pend, other.ID)
					}
					if pt.claimed && !slices.Equal(entrySorted(pinsOf(pend[0].Items)), entrySorted(unfinished)) {
						t.Errorf("the recovered chunk has pins %v, Unfinished named %v", pinsOf(pend[0].Items), unfinished)
					}
					if u, err := g.Unfinished(ctx, e.user); err != nil || len(u) != 0 {
						t.Errorf("Unfinished after recovery = %v, %v; want none", u, err)
					}
					if err := g.Settle(ctx, e.user, other.ID, true); err != nil {
						t.Fatal(err)
					}
					left := len(e.pools.all(e.user))
					if got := left + crashedPins + len(other.Items); got != 30 {
						t.Fatalf("pool %d + crashed %d + served %d = %d, want 30", left, crashedPins, len(other.Items), got)
					}
					if pt.claimed {
						// Settle twice: the second is a no-op.
						for range 2 {
							if err := g.Settle(ctx, e.user, pend[0].ID, delivered); err != nil {
								t.Fatal(err)
							}
						}
						want := 20
						if delivered {
							want = 10
						}
						if got := len(e.pools.all(e.user)); got != want {
							t.Fatalf("pool after settle(delivered=%v) = %d, want %d", delivered, got, want)
						}
						if pend, _ := g.Pending(ctx, e.user); len(pend) != 0 {
							t.Fatalf("Pending after settle = %+v", pend)
						}
					}
					// No claim or record is left behind.
					rows, _ := e.state.Scan(ctx, zen.ScanOptions{})
					for _, r := range rows {
						if r.Key[8] == tagClaim || r.Key[8] == tagChunk {
							t.Errorf("left-over row %x", r.Key)
						}
					}
				})
			}
		}
	}
}

// TestConcurrentGenerate runs many goroutines generating for one user: no pin is in two
// chunks, and pool before = chunks + pool after + counted drops. With failed deliveries mixed in,
// no pin is delivered twice and the same balance holds over delivered pins.
func TestConcurrentGenerate(t *testing.T) {
	for _, b := range backends {
		for _, failEvery := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/fail-every=%d", b.name, failEvery), func(t *testing.T) {
				ctx := context.Background()
				e := newEnv(t, b.make, nil)
				const total, expired = 400, 20
				var es []zen.PoolEntry
				srcs := []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated}
				for i := 1; i <= total; i++ {
					age := time.Hour
					if i%(total/expired) == 0 {
						age = 400 * time.Hour
					}
					es = append(es, e.entry(t, srcs[i%3], uint64(i), float64(i%97)/97, uint64(i%13), uint64(i%7), age))
				}
				e.insert(t, es...)
				if got := len(e.pools.all(e.user)); got != total {
					t.Fatalf("pool before = %d, want %d", got, total)
				}
				var mu sync.Mutex
				delivered := map[zen.ID]string{}
				var errs []error
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Go(func() {
						for i, empty := 0, 0; empty < 3; i++ {
							// Bounded: a generator that hands pins out again must fail, not spin.
							if i > 10*total {
								mu.Lock()
								errs = append(errs, fmt.Errorf("worker %d: still generating after %d chunks", w, i))
								mu.Unlock()
								return
							}
							c, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: 7})
							if err != nil {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
								return
							}
							if len(c.Items) == 0 {
								empty++
								runtime.Gosched()
								continue
							}
							ok := failEvery == 0 || (i+w)%failEvery != 0
							if err := e.gen.Settle(ctx, e.user, c.ID, ok); err != nil {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
								return
							}
							if !ok {
								continue
							}
							mu.Lock()
							for _, it := range c.Items {
								if prev, dup := delivered[it.Pin]; dup {
									errs = append(errs, fmt.Errorf("pin %d in chunks %s and %s", it.Pin, prev, c.ID))
								}
								delivered[it.Pin] = c.ID
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				e.gen.Wait() // the expiry sweeps run after the answers
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				drops, err := e.gen.Drops(ctx, e.user)
				if err != nil {
					t.Fatal(err)
				}
				after := len(e.pools.all(e.user))
				if drops != expired {
					t.Errorf("drops = %d, want %d", drops, expired)
				}
				if got := len(delivered) + after + int(drops); got != total {
					t.Errorf("chunks %d + pool after %d + drops %d = %d, want pool before %d", len(delivered), after, drops, got, total)
				}
				if pend, _ := e.gen.Pending(ctx, e.user); len(pend) != 0 {
					t.Errorf("unsettled chunks left: %d", len(pend))
				}
				t.Logf("delivered %d, pool after %d, drops %d, claims lost to concurrent chunks %v",
					len(delivered), after, drops, counterValue(e.gen.m.lost))
			})
		}
	}
}

// TestLostClaimsAreReplaced: a pin claimed by another chunk (or taken from the pools between
// choosing and taking) is replaced by the next candidate, and never served.
func TestLostClaimsAreReplaced(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := DefaultConfig()
			cfg.MaxChunk = 5
			e := newEnv(t, b.make, &cfg)
			es := e.fill(t, 20)
			// Pin 1 is held by a chunk that crashed (a claim row of another chunk).
			if err := e.state.Apply(ctx, []zen.Mutation{{Key: userKey2(e.user, tagClaim, uint64(es[0].Pin)), Value: []byte("other")}}); err != nil {
				t.Fatal(err)
			}
			// Pin 2 is taken by someone else just before our Take.
			stolen := false
			hp := &hookPools{Pools: e.pools, beforeTake: func([]zen.PoolEntry) {
				if !stolen {
					stolen = true
					if _, err := e.pools.Take(ctx, e.user, es[1:2]); err != nil {
						t.Error(err)
					}
				}
			}}
			e.wrapPools(t, hp)
			c, err := e.gen.GenerateChunk(ctx, e.user, Options{Debug: true})
			if err != nil {
				t.Fatal(err)
			}
			want := []zen.ID{es[2].Pin, es[3].Pin, es[4].Pin, es[5].Pin, es[6].Pin}
			if diff := cmp.Diff(want, pinsOf(c.Items)); diff != "" {
				t.Errorf("chunk pins (-want +got):\n%s\ndebug:\n%v", diff, c.Debug)
			}
			// Pin 1 is still in the pool (its owner will settle it); pin 2 is gone.
			left := entryPins(e.pools.all(e.user))
			if len(left) != 14 || left[0] != es[0].Pin {
				t.Errorf("pool after = %v (len %d), want pin 1 and pins 8..20", left, len(left))
			}
			// Our claim on pin 2 (taken by someone else) was released: once pin 2 is back in
			// the pools (given back by its taker), a later chunk can claim and serve it.
			if _, err := e.state.Get(ctx, userKey2(e.user, tagClaim, uint64(es[1].Pin))); !errors.Is(err, zen.ErrNotFound) {
				t.Errorf("claim on the stolen pin 2 left behind (%v)", err)
			}
		})
	}
}

// failingPools fails Take (after taking for real) once: the generator must put everything back.
type failingPools struct {
	Pools
	fail bool
}

func (f *failingPools) Take(ctx context.Context, user zen.ID, es []zen.PoolEntry) ([]zen.PoolEntry, error) {
	won, err := f.Pools.Take(ctx, user, es)
	if f.fail {
		f.fail = false
		return nil, errors.New("injected take failure")
	}
	return won, err
}

func TestTakeFailurePutsBack(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b.make, nil)
			e.fill(t, 12)
			before := entryPins(e.pools.all(e.user))
			e.wrapPools(t, &failingPools{Pools: e.pools, fail: true})
			if _, err := e.gen.GenerateChunk(ctx, e.user, Options{}); err == nil {
				t.Fatal("GenerateChunk succeeded through a failing Take")
			}
			if diff := cmp.Diff(before, entryPins(e.pools.all(e.user))); diff != "" {
				t.Errorf("pool after failed take (-want +got):\n%s", diff)
			}
			rows, _ := e.state.Scan(ctx, zen.ScanOptions{})
			for _, r := range rows {
				if r.Key[8] == tagClaim || r.Key[8] == tagChunk {
					t.Errorf("left-over row %x", r.Key)
				}
			}
			c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
			if err != nil || len(c.Items) != 12 {
				t.Fatalf("retry: %d pins, %v; want 12", len(c.Items), err)
			}
		})
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[0].make, nil)
	e.fill(t, 5)
	snapshot := func() []zen.KV { rows, _ := e.state.Scan(ctx, zen.ScanOptions{}); return rows }
	before := snapshot()
	other := mustID(t, 1, zen.TypeUser, 2)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"zero user", func() error { _, err := e.gen.GenerateChunk(ctx, 0, Options{}); return err }},
		{"negative max", func() error { _, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: -1}); return err }},
		{"huge max", func() error { _, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: HardMaxChunk + 1}); return err }},
		{"settle zero user", func() error { return e.gen.Settle(ctx, 0, "1-1", true) }},
		{"settle malformed", func() error { return e.gen.Settle(ctx, e.user, "abc", false) }},
		{"settle chunk 0", func() error { return e.gen.Settle(ctx, e.user, fmt.Sprintf("%d-0", e.user), false) }},
		{"settle other user's chunk", func() error { return e.gen.Settle(ctx, e.user, fmt.Sprintf("%d-1", other), false) }},
		{"pending zero user", func() error { _, err := e.gen.Pending(ctx, 0); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
	if diff := cmp.Diff(before, snapshot()); diff != "" {
		t.Errorf("state changed by refused calls (-want +got):\n%s", diff)
	}
	if got := len(e.pools.all(e.user)); got != 5 {
		t.Errorf("pool changed: %d pins", got)
	}
	// Settling an unknown (or already settled) chunk, or the empty chunk, is a no-op.
	for _, id := range []string{"", fmt.Sprintf("%d-99", e.user)} {
		if err := e.gen.Settle(ctx, e.user, id, false); err != nil {
			t.Errorf("Settle(%q) = %v, want nil", id, err)
		}
	}
}

func TestEmptyPoolsGiveEmptyChunk(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[1].make, nil)
	c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
	if err != nil || c.ID != "" || len(c.Items) != 0 {
		t.Fatalf("GenerateChunk on empty pools = %+v, %v; want an empty chunk without ID", c, err)
	}
	rows, _ := e.state.Scan(ctx, zen.ScanOptions{})
	for _, r := range rows {
		if r.Key[8] == tagChunk || bytes.Equal(r.Key, userKey(e.user, tagCounter)) {
			t.Errorf("empty chunk left row %x", r.Key)
		}
	}
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestLateInsertThenGiveBack: while a chunk is out, a late job re-inserts its pins (a redelivered
// fanout): the pins stay out of the pools, so no other chunk can serve them. Settling the chunk
// as not delivered gives them back (Restore); settling it as delivered leaves them out for good.
func TestLateInsertThenGiveBack(t *testing.T) {
	for _, b := range backends {
		for _, delivered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/delivered=%v", b.name, delivered), func(t *testing.T) {
				ctx := context.Background()
				e := newEnv(t, b.make, nil)
				in := e.fill(t, 6)
				c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
				if err != nil || len(c.Items) == 0 {
					t.Fatalf("GenerateChunk = %d items, %v", len(c.Items), err)
				}
				served := map[zen.ID]bool{}
				for _, it := range c.Items {
					served[it.Pin] = true
				}
				left := entryPins(e.pools.all(e.user))
				e.insert(t, in...) // the late job
				if diff := cmp.Diff(left, entryPins(e.pools.all(e.user))); diff != "" {
					t.Errorf("a late insert put served pins back (-want +got):\n%s", diff)
				}
				if err := e.gen.Settle(ctx, e.user, c.ID, delivered); err != nil {
					t.Fatal(err)
				}
				want := left
				if !delivered {
					want = entryPins(in)
				}
				if diff := cmp.Diff(want, entryPins(e.pools.all(e.user))); diff != "" {
					t.Errorf("after Settle(delivered=%v) (-want +got):\n%s", delivered, diff)
				}
				e.insert(t, in...)
				if diff := cmp.Diff(want, entryPins(e.pools.all(e.user))); diff != "" {
					t.Errorf("a late insert after Settle(delivered=%v) changed the pools (-want +got):\n%s", delivered, diff)
				}
			})
		}
	}
}

// TestDeliveredPinsAreForgotten: settling a chunk as delivered turns its pins' taken tombstones
// into forgotten ones. Nothing puts them back (not even a Restore), and the rows that late jobs
// write for them, in any source, are deleted by the reads that meet them instead of lying under
// a taken tombstone until the pool TTL.
func TestDeliveredPinsAreForgotten(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b.make, nil)
			in := e.fill(t, 6)
			c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
			if err != nil || len(c.Items) == 0 {
				t.Fatalf("GenerateChunk = %d items, %v", len(c.Items), err)
			}
			served := map[zen.ID]bool{}
			for _, it := range c.Items {
				served[it.Pin] = true
			}
			var servedEs, late []zen.PoolEntry
			for _, en := range in {
				if served[en.Pin] {
					other := en
					other.Source, other.Score = zen.SourceInterest, en.Score+0.5
					servedEs, late = append(servedEs, en), append(late, en, other)
				}
			}
			if err := e.gen.Settle(ctx, e.user, c.ID, true); err != nil {
				t.Fatal(err)
			}
			left := entryPins(e.pools.all(e.user))
			if n, err := e.pools.Restore(ctx, servedEs); err != nil || n != 0 {
				t.Errorf("Restore of delivered pins = %d, %v; want 0 (forgotten)", n, err)
			}
			e.insert(t, late...) // late jobs, one in another source with a better score
			if diff := cmp.Diff(left, entryPins(e.pools.all(e.user))); diff != "" {
				t.Errorf("delivered pins came back (-want +got):\n%s", diff)
			}
			if rp, ok := e.pools.(realPools); ok {
				// The reads above met the late rows; under a forgotten tombstone they delete them.
				if n := rp.rowsOf(t, e.user, served); n != 0 {
					t.Errorf("%d rows of delivered pins still stored after a read", n)
				}
			}
		})
	}
}

// TestChunkNumbersUniqueAcrossProcesses: chunk numbers come from the clock, so two generator
// processes over one state table can pick the same one in the same microsecond; the intent
// record's compare-and-set makes the second take another number, and neither record is lost.
func TestChunkNumbersUniqueAcrossProcesses(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b.make, nil)
			e.fill(t, 40)
			// A second process: its own generator, the same tables and the same (frozen) clock.
			g2, err := New(Params{Pools: e.pools, State: e.state, Config: ptr(e.gen.Config()), Now: e.clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			c1, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: 5})
			if err != nil {
				t.Fatal(err)
			}
			c2, err := g2.GenerateChunk(ctx, e.user, Options{Max: 5})
			if err != nil {
				t.Fatal(err)
			}
			if c1.ID == "" || c1.ID == c2.ID {
				t.Fatalf("chunk IDs %q and %q: want two different ones", c1.ID, c2.ID)
			}
			pend, err := e.gen.Pending(ctx, e.user)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range pend {
				ids = append(ids, p.ID)
			}
			if diff := cmp.Diff([]string{c1.ID, c2.ID}, ids); diff != "" {
				t.Errorf("pending chunks (-want +got):\n%s", diff)
			}
			seen := map[zen.ID]bool{}
			for _, c := range []Chunk{c1, c2} {
				for _, it := range c.Items {
					if seen[it.Pin] {
						t.Errorf("pin %d in both chunks", it.Pin)
					}
					seen[it.Pin] = true
				}
			}
		})
	}
}

// blockingExpire holds every Expire until release is closed.
type blockingExpire struct {
	Pools
	started chan struct{}
	release chan struct{}
}

func (b *blockingExpire) Expire(ctx context.Context, user zen.ID, before int64) (int, error) {
	b.started <- struct{}{}
	<-b.release
	return b.Pools.Expire(ctx, user, before)
}

// TestSweepAfterTheAnswer: a due expiry sweep (a whole-pools scan) runs after GenerateChunk
// answers, not before: the chunk comes back while the sweep is held, skips the expired pin
// anyway, and the sweep's drops are counted once it is let go (Wait). A second request while
// it runs does not start another.
func TestSweepAfterTheAnswer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[1].make, nil)
	old := e.entry(t, zen.SourceFollowing, 1, 0.99, 1, 1, 15*24*time.Hour) // past max_age
	fresh := e.entry(t, zen.SourceFollowing, 2, 0.5, 2, 2, time.Hour)
	e.insert(t, old, fresh)
	b := &blockingExpire{Pools: e.gen.pools, started: make(chan struct{}, 4), release: make(chan struct{})}
	e.wrapPools(t, b)
	done := make(chan Chunk, 1)
	go func() {
		c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	select {
	case c := <-done:
		if len(c.Items) != 1 || c.Items[0].Pin != fresh.Pin {
			t.Errorf("chunk = %+v, want only the fresh pin", c.Items)
		}
	case <-time.After(10 * time.Second):
		close(b.release)
		t.Fatal("GenerateChunk waited for the expiry sweep")
	}
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no expiry sweep started after the answer")
	}
	if _, err := e.gen.GenerateChunk(ctx, e.user, Options{}); err != nil {
		t.Fatal(err)
	}
	close(b.release)
	e.gen.Wait()
	if n := len(b.started); n != 0 {
		t.Errorf("%d more sweeps started while one ran, want 0", n)
	}
	if d, err := e.gen.Drops(ctx, e.user); err != nil || d != 1 {
		t.Errorf("Drops = %d, %v; want 1 (the expired pin, counted by the sweep)", d, err)
	}
	if left := e.pools.all(e.user); len(left) != 0 {
		t.Errorf("pools still hold %v after the sweep", entryPins(left))
	}
}

// TestExpiredCandidateStartsASweep: when an expired pin shows up among the candidates before
// the hourly sweep is due, a sweep starts anyway (after the answer), so the pools do not keep
// carrying it to every read.
func TestExpiredCandidateStartsASweep(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[1].make, nil)
	e.insert(t, e.entry(t, zen.SourceFollowing, 1, 0.5, 1, 1, time.Hour))
	if _, err := e.gen.GenerateChunk(ctx, e.user, Options{}); err != nil { // first visit: sweeps
		t.Fatal(err)
	}
	e.gen.Wait()
	e.clk.Advance(time.Minute) // the next sweep is due in an hour
	old := e.entry(t, zen.SourceFollowing, 2, 0.9, 2, 2, 15*24*time.Hour)
	e.insert(t, old, e.entry(t, zen.SourceFollowing, 3, 0.4, 3, 3, time.Hour))
	c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.gen.Wait()
	if got := pinsOf(c.Items); len(got) != 1 || got[0] != pinID(t, 3) {
		t.Errorf("chunk = %v, want only pin 3 (pin 2 expired)", got)
	}
	if d, err := e.gen.Drops(ctx, e.user); err != nil || d != 1 {
		t.Errorf("Drops = %d, %v; want 1: the expired candidate started a sweep", d, err)
	}
	if left := e.pools.all(e.user); len(left) != 0 {
		t.Errorf("pools still hold %v", entryPins(left))
	}
}

// TestEmptyVisitsWriteLittle: a visit that finds nothing new records the visit (the next chunk's
// size counts hours away) but not within visitSlack of the last one recorded, so a user with an
// empty pool costs no write per read; a visit that serves pins always records.
func TestEmptyVisitsWriteLittle(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := DefaultConfig()
			cfg.ExpireEvery = jsontime.Duration(24 * time.Hour) // no sweep writes the state meanwhile
			e := newEnv(t, b.make, &cfg)
			lastVisit := func() int64 {
				t.Helper()
				st, _, err := e.gen.loadState(ctx, e.user)
				if err != nil {
					t.Fatal(err)
				}
				return st.LastVisitMs
			}
			gen := func() Chunk {
				t.Helper()
				c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			if c := gen(); len(c.Items) != 0 {
				t.Fatalf("first visit served %d pins from empty pools", len(c.Items))
			}
			first := e.clk.Now().UnixMilli()
			if got := lastVisit(); got != first {
				t.Fatalf("after the first visit: last visit %d, want %d (a first visit records)", got, first)
			}
			e.clk.Advance(visitSlack / 2)
			gen()
			if got := lastVisit(); got != first {
				t.Errorf("empty visit within the slack: last visit %d, want it kept at %d", got, first)
			}
			e.clk.Advance(visitSlack)
			gen()
			if got, want := lastVisit(), e.clk.Now().UnixMilli(); got != want {
				t.Errorf("empty visit past the slack: last visit %d, want %d", got, want)
			}
			e.fill(t, 5)
			e.clk.Advance(time.Second)
			if c := gen(); len(c.Items) == 0 {
				t.Fatal("no pins served from a filled pool")
			}
			if got, want := lastVisit(), e.clk.Now().UnixMilli(); got != want {
				t.Errorf("visit that served pins: last visit %d, want %d", got, want)
			}
		})
	}
}
