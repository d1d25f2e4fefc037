package generator

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// fakeLiveness reports every pin live except the deleted ones; err fails every call.
type fakeLiveness struct {
	mu      sync.Mutex
	deleted map[zen.ID]bool
	err     error
	calls   int
	asked   int
}

func (f *fakeLiveness) Live(_ context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.asked += len(pins)
	if f.err != nil {
		return nil, f.err
	}
	out := make(map[zen.ID]bool, len(pins))
	for _, p := range pins {
		if !f.deleted[p] {
			out[p] = true
		}
	}
	return out, nil
}

func (e *env) withLiveness(t testing.TB, l Liveness) {
	t.Helper()
	g, err := New(Params{Pools: e.pools, State: e.state, Config: ptr(e.gen.Config()), Now: e.clk.Now, Liveness: l})
	if err != nil {
		t.Fatal(err)
	}
	e.gen = g
}

func TestDeletedPinsAreNotServed(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := DefaultConfig()
			cfg.MaxChunk, cfg.MinChunk = 6, 1
			e := newEnv(t, b.make, &cfg)
			e.fill(t, 12)
			dead := map[zen.ID]bool{pinID(t, 1): true, pinID(t, 3): true, pinID(t, 4): true, pinID(t, 11): true}
			lv := &fakeLiveness{deleted: dead}
			e.withLiveness(t, lv)

			var served []zen.ID
			for range 3 {
				c, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: 6})
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range c.Items {
					if dead[it.Pin] {
						t.Errorf("chunk %s serves deleted pin %d", c.ID, it.Pin)
					}
				}
				served = append(served, pinsOf(c.Items)...)
				if err := e.gen.Settle(ctx, e.user, c.ID, true); err != nil {
					t.Fatal(err)
				}
			}
			// Every live pin is served exactly once; the deleted ones left the pools.
			var want []zen.ID
			for i := uint64(1); i <= 12; i++ {
				if !dead[pinID(t, i)] {
					want = append(want, pinID(t, i))
				}
			}
			got := append([]zen.ID(nil), served...)
			sortIDs(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("served (-want +got):\n%s", diff)
			}
			if left := e.pools.all(e.user); len(left) != 0 {
				t.Errorf("pools still hold %v", entryPins(left))
			}
			drops, err := e.gen.Drops(ctx, e.user)
			if err != nil || drops != int64(len(dead)) {
				t.Errorf("Drops = %d, %v; want %d", drops, err, len(dead))
			}
			if v := counterValue(e.gen.m.deleted); v != float64(len(dead)) {
				t.Errorf("deleted metric = %v, want %d", v, len(dead))
			}
		})
	}
}

func TestLivenessErrorFailsClosed(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b.make, nil)
			before := e.fill(t, 10)
			lv := &fakeLiveness{err: errors.New("graph down")}
			e.withLiveness(t, lv)
			c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
			if err == nil || len(c.Items) != 0 {
				t.Fatalf("GenerateChunk = %d items, %v; want an error and nothing served", len(c.Items), err)
			}
			if diff := cmp.Diff(entryPins(before), entryPins(e.pools.all(e.user))); diff != "" {
				t.Errorf("pools changed (-want +got):\n%s", diff)
			}
			if users, err := e.gen.InFlightUsers(ctx, 0, 10); err != nil || len(users) != 0 {
				t.Errorf("in flight after a failed chunk: %v, %v", users, err)
			}
			// The graph back: the same pins are served.
			lv.mu.Lock()
			lv.err = nil
			lv.mu.Unlock()
			c, err = e.gen.GenerateChunk(ctx, e.user, Options{Max: 10})
			if err != nil || len(c.Items) != 10 {
				t.Fatalf("after recovery: %d items, %v", len(c.Items), err)
			}
		})
	}
}

// TestLiveCheckedOncePerPin: a pin found live is not asked about again in a later take round.
func TestLiveCheckedOncePerPin(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.MaxChunk, cfg.MinChunk = 5, 1
	e := newEnv(t, backends[0].make, &cfg)
	e.fill(t, 40)
	dead := map[zen.ID]bool{}
	for i := uint64(1); i <= 20; i++ {
		dead[pinID(t, i)] = true
	}
	lv := &fakeLiveness{deleted: dead}
	e.withLiveness(t, lv)
	c, err := e.gen.GenerateChunk(ctx, e.user, Options{Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]zen.ID{pinID(t, 21), pinID(t, 22), pinID(t, 23), pinID(t, 24), pinID(t, 25)}, sorted(pinsOf(c.Items))); diff != "" {
		t.Errorf("chunk (-want +got):\n%s", diff)
	}
	if lv.asked > 40 {
		t.Errorf("asked about %d pins for 40 candidates", lv.asked)
	}
}

func sortIDs(ids []zen.ID) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

func sorted(ids []zen.ID) []zen.ID {
	out := append([]zen.ID(nil), ids...)
	sortIDs(out)
	return out
}

// TestInFlightIndex: every chunk record is indexed from its first write until it is settled,
// including one a crash left behind, so a recovery pass finds its user.
func TestInFlightIndex(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := DefaultConfig()
			cfg.MaxChunk = 5
			e := newEnv(t, b.make, &cfg)
			users := []zen.ID{mustID(t, 1, zen.TypeUser, 7), mustID(t, 2, zen.TypeUser, 3), mustID(t, 1, zen.TypeUser, 9)}
			for _, u := range users {
				var es []zen.PoolEntry
				for i := uint64(1); i <= 10; i++ {
					es = append(es, zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: float64(i), Pin: pinID(t, i),
						Author: authorID(t, i), Board: boardID(t, i), CreatedMs: e.clk.Now().Add(-time.Hour).UnixMilli()})
				}
				e.insert(t, es...)
			}
			// users[0]: a served chunk; users[1]: a crash after the intent; users[2]: nothing.
			c0, err := e.gen.GenerateChunk(ctx, users[0], Options{})
			if err != nil || c0.ID == "" {
				t.Fatalf("chunk: %v %v", c0, err)
			}
			if c0.CreatedMs != e.clk.Now().UnixMilli() {
				t.Errorf("CreatedMs = %d", c0.CreatedMs)
			}
			ht := &hookTable{Table: e.state, beforeCAS: func(key []byte) {
				if len(key) == 17 && key[8] == tagClaim {
					runtime.Goexit()
				}
			}}
			crashing, err := New(Params{Pools: e.pools, State: ht, Config: &cfg, Now: e.clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			runCrashing(func() { _, _ = crashing.GenerateChunk(ctx, users[1], Options{}) })

			want := sorted(users[:2])
			got, err := e.gen.InFlightUsers(ctx, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("InFlightUsers (-want +got):\n%s", diff)
			}
			// Paging one user at a time gives the same list.
			var paged []zen.ID
			for after := zen.ID(0); ; {
				us, err := e.gen.InFlightUsers(ctx, after, 1)
				if err != nil {
					t.Fatal(err)
				}
				paged = append(paged, us...)
				if len(us) < 1 {
					break
				}
				after = us[0]
			}
			if diff := cmp.Diff(want, paged); diff != "" {
				t.Errorf("paged (-want +got):\n%s", diff)
			}
			// Settling both (the crashed one after the grace period) empties the index.
			if err := e.gen.Settle(ctx, users[0], c0.ID, true); err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(time.Duration(cfg.InFlightGrace) + time.Second)
			pend, err := e.gen.Pending(ctx, users[1])
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range pend {
				if err := e.gen.Settle(ctx, users[1], c.ID, false); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := e.gen.InFlightUsers(ctx, 0, 10); err != nil || len(got) != 0 {
				t.Errorf("InFlightUsers after settling = %v, %v", got, err)
			}
			if n := len(e.pools.all(users[1])); n != 10 {
				t.Errorf("crashed chunk's user has %d pins in the pools, want 10", n)
			}
			if _, err := e.gen.InFlightUsers(ctx, 0, 0); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("limit 0: %v", err)
			}
		})
	}
}

// TestPruneIndex: an index row left without its record (a write cut short) is removed by Pending.
func TestPruneIndex(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, backends[0].make, nil)
	if err := e.state.Apply(ctx, []zen.Mutation{{Key: inflightKey(e.user, 42), Value: []byte{}}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.gen.InFlightUsers(ctx, 0, 10); len(got) != 1 {
		t.Fatalf("index = %v", got)
	}
	if _, err := e.gen.Pending(ctx, e.user); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.gen.InFlightUsers(ctx, 0, 10); len(got) != 0 {
		t.Errorf("stale index row kept: %v", got)
	}
}

var _ = fmt.Sprint
