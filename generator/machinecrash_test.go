package generator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenpebble/pebblecrash"
)

// TestMachineCrashAtEveryWrite runs chunks over real Pebble pools and state that share a log, so
// the steps before the ready record are written lazily, and simulates a machine crash (what was
// fsynced, nothing more) before every write and after the last answer. From every crash, the
// recovery must find every chunk answered before the crash, as answered, and (Pending, then
// Settle not delivered) give every pin back to the pools exactly once.
//
// With Options.CallerRecords (the feed service records each chunk itself) the ready record is
// lazy too: an answered chunk may then be undone by the crash, with every later one, but never
// recovered with other pins; some crash must undo one, or the ready record was not lazy.
func TestMachineCrashAtEveryWrite(t *testing.T) {
	for _, callerRecords := range []bool{false, true} {
		t.Run(fmt.Sprintf("caller records %v", callerRecords), func(t *testing.T) { testMachineCrash(t, callerRecords) })
	}
}

func testMachineCrash(t *testing.T, callerRecords bool) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	// A crash is the file system as fsynced at that moment, and the chunks answered by then.
	type crash struct {
		fs       *vfs.MemFS
		answered int
	}
	// The generator's background sweep writes too, so the crash points are taken under a lock.
	var mu sync.Mutex
	var crashes []crash
	var answered []Chunk
	open := func(fs vfs.FS, crashing bool) (*zenpebble.Store, *Generator, *zen.Pools, *clock) {
		t.Helper()
		s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		table := func(name string) zen.Table {
			tb, err := s.Table(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if !crashing {
				return tb
			}
			return pebblecrash.Table{Table: tb.(*zenpebble.Table), Before: func() {
				mu.Lock()
				defer mu.Unlock()
				crashes = append(crashes, crash{fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{}), len(answered)})
			}}
		}
		clk := &clock{t: t0}
		pools := zen.NewPools(table("pools"), clk.Now)
		cfg := DefaultConfig()
		cfg.MaxChunk = 10
		g, err := New(Params{Pools: pools, State: table("genstate"), Config: &cfg, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s, g, pools, clk
	}
	user := testUser(t)
	s, g, pools, clk := open(fs, false)
	if !g.lazySteps {
		t.Fatal("pools and state of one Pebble store: the generator does not write its steps lazily")
	}
	var all []zen.PoolEntry
	for i := 1; i <= 30; i++ {
		all = append(all, zen.PoolEntry{User: user, Source: zen.SourceFollowing, Score: 1 - float64(i)/1000, Pin: pinID(t, uint64(i)),
			Author: authorID(t, uint64(i)), Board: boardID(t, uint64(i)), CreatedMs: clk.Now().Add(-time.Hour).UnixMilli()})
	}
	if _, err := pools.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, g, _, clk = open(fs, true)
	for range 3 {
		c, err := g.GenerateChunk(ctx, user, Options{CallerRecords: callerRecords})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		c.Debug = nil
		mu.Lock()
		answered = append(answered, c)
		mu.Unlock()
	}
	g.Wait() // the last expiry sweep, which also writes
	crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), len(answered)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(crashes) < 10 {
		t.Fatalf("%d crash points for 3 chunks, want one per write", len(crashes))
	}

	pins := func(es []zen.PoolEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprint(e.Pin))
		}
		slices.Sort(out)
		return out
	}
	undone := 0 // answered chunks a crash undid
	for i, crashed := range crashes {
		s, g, pools, clk := open(crashed.fs, false)
		clk.Advance(time.Hour) // past InFlightGrace: unfinished chunks are recovered
		pending, err := g.Pending(ctx, user)
		if err != nil {
			t.Fatalf("crash %d: pending: %v", i, err)
		}
		for j := range pending {
			pending[j].Debug = nil
		}
		if !callerRecords {
			// Every chunk answered before the crash is there, as answered (ready).
			if d := cmp.Diff(answered[:crashed.answered], pending[:min(len(pending), crashed.answered)], cmpopts.EquateEmpty()); d != "" {
				t.Errorf("crash %d, after %d answers: chunks (-answered +recovered):\n%s", i, crashed.answered, d)
			}
		} else {
			// Every chunk answered is there with its pins, or undone with every later one.
			byID := map[string]Chunk{}
			for _, c := range pending {
				byID[c.ID] = c
			}
			gone := false
			for _, a := range answered[:crashed.answered] {
				c, ok := byID[a.ID]
				if !ok {
					gone = true
					undone++
					continue
				}
				if gone {
					t.Errorf("crash %d: chunk %s recovered after an earlier answered chunk was undone", i, a.ID)
				}
				if d := cmp.Diff(itemPins(a.Items), itemPins(c.Items)); d != "" {
					t.Errorf("crash %d: chunk %s recovered with other pins (-answered +recovered):\n%s", i, a.ID, d)
				}
			}
		}
		for _, c := range pending {
			if err := g.Settle(ctx, user, c.ID, false); err != nil {
				t.Fatalf("crash %d: settle %s: %v", i, c.ID, err)
			}
		}
		got, err := pools.Top(ctx, user, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(pins(all), pins(got)); d != "" {
			t.Errorf("crash %d of %d: pools after recovery (-want +got):\n%s", i, len(crashes), d)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if callerRecords && undone == 0 {
		t.Error("no crash undid an answered chunk: the ready record waited for its fsync")
	}
}

// itemPins returns the pins of items, sorted.
func itemPins(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, fmt.Sprint(it.Pin))
	}
	slices.Sort(out)
	return out
}
