package main

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenpebble/pebblecrash"
)

// crashClock is a settable clock shared by the runs of a crash test.
type crashClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *crashClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *crashClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *crashClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestServedChunkMachineCrash: first pages through the in-process generator and feed service,
// as `smartfeed all` wires them, over Pebble stores whose files a machine crash leaves as
// fsynced. The generator's ready record does not wait for its fsync (the feed service records
// each chunk itself: generator.Options.CallerRecords), so the only synced write of a fresh page
// is the feed's pending row. A crash image (both stores at one moment) is taken before every
// write of three first pages and after the last. From every image, after first pages (the user
// is back before the recovery pass), the recovery pass (feedsvc.Recoverer, as the server runs
// it) and first pages until the pools are empty:
//   - every pin a page showed as fresh before the crash is in the materialized feed;
//   - no pin is shown as fresh twice, before and after the crash together;
//   - every pin fanned out is in the feed once (nothing lost, nothing twice).
//
// Some image must hold a served chunk the generator lost (the feed's pending row without the
// generator's record): otherwise the ready record was synced and the lazy path went untested.
func TestServedChunkMachineCrash(t *testing.T) { servedChunkMachineCrash(t, false) }

// TestPreparedChunkMachineCrash is TestServedChunkMachineCrash with preparation on
// (feedsvc.Config.PrepareAfter): after the first page, each page serves the chunk prepared after
// the one before, shown as fresh from the memory of the process that prepared it, with no write
// before the answer (the served mark is lazy and written after it). So some image must hold a
// chunk a page showed still marked prepared (else that path went untested). A start from an
// image is another incarnation: it shows those rows as feed items, never as fresh, with no
// amends of its own before it serves. Everything TestServedChunkMachineCrash holds holds, no pin
// shown as fresh twice included: only the incarnation that prepared a chunk may show it as
// fresh, so a lost lazy mark cannot make a restart show it again.
func TestPreparedChunkMachineCrash(t *testing.T) { servedChunkMachineCrash(t, true) }

func servedChunkMachineCrash(t *testing.T, prepare bool) {
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	clk := &crashClock{t: t0}
	newID := func(typ zen.Type, n uint64) zen.ID {
		id, err := zen.NewID(1, typ, n)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	user := newID(zen.TypeUser, 1)

	type image struct {
		main, feed *vfs.MemFS
		shown      map[zen.ID]bool // pins the pages answered by then showed as fresh
	}
	var mu sync.Mutex
	var images []image
	shown := map[zen.ID]bool{}

	type system struct {
		g     *generator.Generator
		pools *zen.Pools
		feed  zen.Table
		svc   *feedsvc.Service
		store *zenpebble.Store // the feed's
		close func()
	}
	open := func(mainFS, feedFS *vfs.MemFS, crashing bool) system {
		t.Helper()
		ms, err := zenpebble.Open("main", zenpebble.WithFS(mainFS))
		if err != nil {
			t.Fatal(err)
		}
		fs, err := zenpebble.Open("feed", zenpebble.WithFS(feedFS))
		if err != nil {
			t.Fatal(err)
		}
		// Crashing, every write of either store first takes an image of both.
		var mainStore, feedStore zen.Store = ms, fs
		if crashing {
			before := func() {
				mu.Lock()
				defer mu.Unlock()
				images = append(images, image{mainFS.CrashClone(vfs.CrashCloneCfg{}), feedFS.CrashClone(vfs.CrashCloneCfg{}), maps.Clone(shown)})
			}
			mainStore, feedStore = pebblecrash.Store{Store: ms, Before: before}, pebblecrash.Store{Store: fs, Before: before}
		}
		table := func(s zen.Store, name string) zen.Table {
			tb, err := s.Table(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return tb
		}
		pools := zen.NewPools(table(mainStore, "pools"), clk.Now)
		gc := generator.DefaultConfig()
		gc.MinChunk, gc.MaxChunk, gc.BaseChunk = 10, 10, 10
		g, err := generator.New(generator.Params{Pools: pools, State: table(mainStore, "genstate"), Config: &gc, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		standby, err := zenmem.New().Table(ctx, "feed")
		if err != nil {
			t.Fatal(err)
		}
		feed := table(feedStore, "feed")
		fc := feedsvc.DefaultConfig()
		fc.GeneratorDeadline, fc.PersistTimeout = 10*time.Second, 10*time.Second
		// Every materialization is a job, and dropEnqueuer loses them all: the served chunks
		// stay pending until the recovery pass, so the images hold them. (Inline
		// materialization runs the same idempotent Materialize, tested in feedsvc.)
		fc.InlineMaterialize = 0
		if prepare {
			// Prepared at once (a real timer) and young whatever the test clock says.
			fc.PrepareAfter, fc.PreparedMaxAge = time.Millisecond, time.Hour
		}
		svc, err := feedsvc.New(feedsvc.Deps{Primary: feed, Standby: standby, Generator: localGenerator{g},
			Enqueuer: dropEnqueuer{}, Now: clk.Now, IndexShards: 2}, fc)
		if err != nil {
			t.Fatal(err)
		}
		return system{g: g, pools: pools, feed: feed, svc: svc, store: fs, close: func() {
			svc.Wait()
			g.Wait()
			for _, s := range []*zenpebble.Store{ms, fs} {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}}
	}

	mainFS, feedFS := vfs.NewCrashableMem(), vfs.NewCrashableMem()
	var all []zen.ID
	var entries []zen.PoolEntry
	for i := uint64(1); i <= 30; i++ {
		pin := newID(zen.TypePin, i)
		all = append(all, pin)
		entries = append(entries, zen.PoolEntry{User: user, Source: zen.SourceFollowing, Score: 1 - float64(i)/1000, Pin: pin,
			Author: newID(zen.TypeUser, 100+i), Board: newID(zen.TypeBoard, i), CreatedMs: clk.Now().Add(-time.Hour).UnixMilli()})
	}
	sys := open(mainFS, feedFS, false)
	if _, err := sys.pools.Insert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	sys.close() // the pools are durable before the crashing run

	sys = open(mainFS, feedFS, true)
	for range 3 {
		page, err := sys.svc.GetFeed(ctx, feedsvc.Request{User: user, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		if page.FreshStatus != feedsvc.FreshIncluded {
			t.Fatalf("first page: fresh status %v (%s), want included", page.FreshStatus, page.FreshDetail)
		}
		mu.Lock()
		for _, it := range page.Items {
			if it.Fresh {
				shown[it.Pin] = true
			}
		}
		mu.Unlock()
		clk.Advance(2 * time.Minute)
		if prepare {
			sys.svc.Wait() // the next chunk is prepared before the next visit
		}
	}
	sys.svc.Wait()
	sys.g.Wait()
	images = append(images, image{mainFS.CrashClone(vfs.CrashCloneCfg{}), feedFS.CrashClone(vfs.CrashCloneCfg{}), maps.Clone(shown)})
	sys.close()
	if len(shown) != len(all) || len(images) < 10 {
		t.Fatalf("%d pins shown, %d crash images: want all %d shown, an image per write", len(shown), len(images), len(all))
	}

	lost := 0     // images holding a served chunk the generator lost
	unmarked := 0 // images holding a chunk a page showed, still marked prepared
	for i, im := range images {
		clk.Set(t0.Add(time.Hour)) // past every grace: unfinished chunks are recovered
		sys := open(im.main, im.feed, false)
		rows, err := scanFeed(ctx, sys.feed, user)
		if err != nil {
			t.Fatal(err)
		}
		inflight, err := sys.g.Pending(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		inGen := map[zen.ID]bool{}
		for _, c := range inflight {
			for _, it := range c.Items {
				inGen[it.Pin] = true
			}
		}
		for _, r := range rows {
			if r.Pending && slices.ContainsFunc(r.Pins, func(p zen.ID) bool { return !inGen[p] }) {
				lost++
				break
			}
		}
		for _, r := range rows {
			if r.Prepared && slices.ContainsFunc(r.Pins, func(p zen.ID) bool { return im.shown[p] }) {
				unmarked++
				break
			}
		}
		if !sys.store.Unclean() {
			t.Fatalf("image %d: the feed store does not report the crash", i)
		}
		// The user comes back at once, before the recovery pass (which leaves chunks younger
		// than a minute alone); then the pass, first pages for the pins it gave back, and the
		// pass again, which materializes what they served.
		rec := feedsvc.NewRecoverer(sys.svc, localGenerator{sys.g}, feedsvc.RecoverOptions{Now: clk.Now})
		after := map[zen.ID]bool{}
		drain := func() {
			for range 10 {
				page, err := sys.svc.GetFeed(ctx, feedsvc.Request{User: user, PageSize: 10})
				if err != nil {
					t.Fatal(err)
				}
				fresh := 0
				for _, it := range page.Items {
					if !it.Fresh {
						continue
					}
					fresh++
					if after[it.Pin] || im.shown[it.Pin] {
						t.Errorf("image %d: pin %d shown as fresh again", i, it.Pin)
					}
					after[it.Pin] = true
				}
				clk.Advance(2 * time.Minute)
				if fresh == 0 && page.FreshStatus != feedsvc.FreshIncluded {
					return
				}
			}
		}
		drain()
		for range 2 {
			sys.svc.Wait()
			clk.Advance(time.Hour)
			if _, err := rec.Pass(ctx); err != nil {
				t.Fatalf("image %d: recovery: %v", i, err)
			}
			drain()
		}
		sys.svc.Wait()
		clk.Advance(time.Hour)
		if _, err := rec.Pass(ctx); err != nil {
			t.Fatalf("image %d: recovery: %v", i, err)
		}
		rows, err = scanFeed(ctx, sys.feed, user)
		if err != nil {
			t.Fatal(err)
		}
		count := map[zen.ID]int{}
		for _, r := range rows {
			if r.Pending {
				t.Errorf("image %d: chunk %d still pending after recovery", i, r.Seq)
			}
			for _, p := range r.Pins {
				count[p]++
			}
		}
		for _, p := range all {
			if count[p] != 1 {
				t.Errorf("image %d of %d: pin %d is %d times in the feed, want once (shown before the crash: %v)", i, len(images), p, count[p], im.shown[p])
			}
		}
		left, err := sys.pools.Top(ctx, user, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("image %d: %d pins left in the pools after they were drained", i, len(left))
		}
		sys.close()
	}
	if lost == 0 {
		t.Errorf("no crash image held a served chunk the generator had lost: its ready record was synced, so the lazy path went untested")
	}
	if prepare && unmarked == 0 {
		t.Errorf("no crash image held a chunk a page showed still marked prepared: the served mark was durable before the answer, so the lazy path went untested")
	}
	t.Logf("%d crash images, %d with a served chunk the generator had lost, %d with a served chunk still marked prepared", len(images), lost, unmarked)
}

// dropEnqueuer loses every materialize job, as a Redis that lost them would: the recovery pass
// materializes the pending chunks instead.
type dropEnqueuer struct{}

func (dropEnqueuer) EnqueueMaterialize(context.Context, feedsvc.MaterializeTask) error { return nil }
