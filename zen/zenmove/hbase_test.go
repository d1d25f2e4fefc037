package zenmove_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenmove"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// acks records the writes the workload had acknowledged.
type acks struct {
	mu    sync.Mutex
	pins  map[zen.ID]zen.ID // pin → author
	edges []zen.Edge        // user → pin saves and follows
	pool  map[zen.ID][]zen.ID
}

// TestMovePebbleToHBaseUnderLoad is issue #23's acceptance: the demo's kind of workload (users
// pin, follow, get pins fanned into their pools, read objects, edge lists and pools) runs on a
// graph over Pebble while shards 16–31 move to the real HBase. Afterwards every row the source
// held for those shards is on HBase, reads of them go to HBase (the Pebble rows are poisoned and
// nothing reads them), every acknowledged write reads back, and the fence's duration is reported.
func TestMovePebbleToHBaseUnderLoad(t *testing.T) {
	zk := testenv.HBase(t)
	peb, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peb.Close() })
	moveUnderLoad(t, peb, openHBase(t, zk))
}

// TestMoveHBaseToHBaseUnderLoad is the same move between two HBase stores (two table prefixes
// of the test cluster stand for two clusters).
func TestMoveHBaseToHBaseUnderLoad(t *testing.T) {
	zk := testenv.HBase(t)
	moveUnderLoad(t, openHBase(t, zk), openHBase(t, zk))
}

// openHBase opens a store of fresh tables on the test HBase and drops them at the end.
func openHBase(t *testing.T, zk string) *zenhbase.Store {
	t.Helper()
	octx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hb, err := zenhbase.Open(octx, zk, zenhbase.Options{TablePrefix: fmt.Sprintf("zmv%d_", time.Now().UnixNano()),
		FlushInterval: 2 * time.Millisecond, CreateTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, name := range append(zenroute.ShardedTables(), "meta") {
			_ = hb.Drop(dctx, name)
		}
		hb.Close()
	})
	return hb
}

// moveUnderLoad moves shards 16–31 from src to dst under the workload and checks the result.
func moveUnderLoad(t *testing.T, src, dst zen.Store) {
	ctx := t.Context()
	backs := map[string]zen.Store{"default": src, "target": dst}
	// New objects go to shards 0–63 only (so the moved range is well filled); the mod shard of
	// usernames and slugs spreads over all 4096.
	m, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 63, Store: "default", Open: true},
		{From: 64, To: 4095, Store: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	router, err := zenroute.New(backs, m, zenroute.Options{FenceWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := zen.NewGraph(ctx, router, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	poolsT, err := router.Table(ctx, "pools")
	if err != nil {
		t.Fatal(err)
	}
	pools := zen.NewPools(poolsT, nil)
	meta, err := router.Table(ctx, "meta") // unrouted: stays on the default store
	if err != nil {
		t.Fatal(err)
	}

	// The graph before the move: users on every shard, their pins and boards, follows.
	var users []zen.ID
	for i := range 128 {
		u, err := g.Create(ctx, zen.TypeUser, 0, map[string]any{"name": fmt.Sprint("u", i)})
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u.ID)
		if ok, err := g.MapKey(ctx, "username", fmt.Sprint("u", i), u.ID); err != nil || !ok {
			t.Fatalf("map username u%d: %v, %v", i, ok, err)
		}
	}
	ack := &acks{pins: map[zen.ID]zen.ID{}, pool: map[zen.ID][]zen.ID{}}
	ws := seqGen(t)
	pin := func(ctx context.Context, rng *rand.Rand) error {
		author := users[rng.IntN(len(users))]
		p, err := g.Create(ctx, zen.TypePin, author, map[string]any{"author": author, "title": fmt.Sprint("p", rng.Uint64())})
		if err != nil {
			return err
		}
		e := zen.Edge{From: author, Type: zen.EdgeUserPins, To: p.ID, Seq: ws()}
		if err := g.AddEdge(ctx, e); err != nil {
			return err
		}
		slug := fmt.Sprint("slug-", p.ID)
		if ok, err := g.MapKey(ctx, "slug", slug, p.ID); err != nil || !ok {
			return fmt.Errorf("map %s: %v, %w", slug, ok, err)
		}
		// Fan the pin into a few users' pools, as the worker does for followers.
		var es []zen.PoolEntry
		for range 3 {
			es = append(es, zen.PoolEntry{User: users[rng.IntN(len(users))], Source: zen.SourceFollowing,
				Score: rng.Float64(), Pin: p.ID, Author: author, CreatedMs: time.Now().UnixMilli()})
		}
		if _, err := pools.Insert(ctx, es); err != nil {
			return err
		}
		ack.mu.Lock()
		ack.pins[p.ID] = author
		ack.edges = append(ack.edges, e)
		for _, pe := range es {
			ack.pool[pe.User] = append(ack.pool[pe.User], p.ID)
		}
		ack.mu.Unlock()
		return nil
	}
	follow := func(ctx context.Context, rng *rand.Rand) error {
		a, b := users[rng.IntN(len(users))], users[rng.IntN(len(users))]
		if a == b {
			return nil
		}
		if _, err := g.HasEdge(ctx, a, zen.EdgeFollowsUser, b); err == nil {
			return nil // follow each pair once: the check below wants no removals
		}
		e := zen.Edge{From: a, Type: zen.EdgeFollowsUser, To: b, Seq: ws()}
		if err := g.AddEdge(ctx, e); err != nil {
			return err
		}
		ack.mu.Lock()
		ack.edges = append(ack.edges, e)
		ack.mu.Unlock()
		return nil
	}
	// Tags whose mod shard is in the moved range (usernames and slugs hash all over 0–4095).
	var tags []string
	for i := 0; len(tags) < 20; i++ {
		tag := fmt.Sprint("tag-", i)
		if s := zen.ModShard(tag, 4096); s >= 16 && s <= 31 {
			if ok, err := g.MapKey(ctx, "tag", tag, users[i%len(users)]); err != nil || !ok {
				t.Fatalf("map %s: %v, %v", tag, ok, err)
			}
			tags = append(tags, tag)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1500 {
		if err := pin(ctx, rng); err != nil {
			t.Fatal(err)
		}
	}
	for range 300 {
		if err := follow(ctx, rng); err != nil {
			t.Fatal(err)
		}
	}

	// The workload: writers pin and follow, readers read objects, edge lists and pools.
	wctx, stop := context.WithCancel(ctx)
	var (
		wg                    sync.WaitGroup
		writes, reads, fenced atomic.Int64
		maxOther              atomic.Int64 // slowest write that touched no moved shard, ns
	)
	defer func() { stop(); wg.Wait() }() // a failed wait below leaves no workload running
	moved := func(id zen.ID) bool { return id.Shard() >= 16 && id.Shard() <= 31 }
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for wctx.Err() == nil {
				t0 := time.Now()
				var err error
				if rng.IntN(3) == 0 {
					err = follow(wctx, rng)
				} else {
					err = pin(wctx, rng)
				}
				switch {
				case errors.Is(err, zenroute.ErrFenced):
					fenced.Add(1) // retryable: not acknowledged, nothing to check
				case err != nil && wctx.Err() == nil:
					t.Errorf("workload write: %v", err)
					return
				case err == nil:
					writes.Add(1)
				}
				_ = t0
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	// A writer on unmoved shards only, timing every write: the fence must not slow it.
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			u := users[i%len(users)]
			if moved(u) {
				continue
			}
			t0 := time.Now()
			if _, err := g.Update(wctx, u, func(d map[string]any) error { d["n"] = i; return nil }); err != nil {
				if wctx.Err() == nil {
					t.Errorf("update of an unmoved user: %v", err)
				}
				return
			}
			if d := int64(time.Since(t0)); d > maxOther.Load() {
				maxOther.Store(d)
			}
			time.Sleep(time.Millisecond)
		}
	})
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for wctx.Err() == nil {
				u := users[rng.IntN(len(users))]
				if _, err := g.Get(wctx, u); err != nil && wctx.Err() == nil {
					t.Errorf("read user %v: %v", u, err)
					return
				}
				if _, _, err := g.ListEdges(wctx, u, zen.EdgeUserPins, "", 20, true); err != nil && wctx.Err() == nil {
					t.Errorf("list pins of %v: %v", u, err)
					return
				}
				if _, err := pools.Top(wctx, u, zen.SourceFollowing, 10); err != nil && wctx.Err() == nil {
					t.Errorf("pool of %v: %v", u, err)
					return
				}
				reads.Add(1)
			}
		})
	}

	testenv.WaitFor(t, testenv.WaitTimeout, "the workload to be under way (30 writes and 10 reads acknowledged)", func() bool {
		return writes.Load() >= 30 && reads.Load() >= 10
	})
	mv, err := zenmove.New(backs, &zenmove.Local{Router: router, Setters: []func(*zen.ShardMap){g.SetShards}},
		zenmove.Options{State: meta, Logger: zap.NewNop(), Batch: 500, Remainder: 50})
	if err != nil {
		t.Fatal(err)
	}
	plan := zenmove.Plan{From: 16, To: 31, Target: "target"}
	dry, err := mv.DryRun(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	var dryRows, dryBytes int64
	for _, s := range dry.Shards {
		dryRows += s.Rows
		dryBytes += s.Bytes
	}
	t.Logf("dry run: %d rows, %d bytes on %d shards of %s", dryRows, dryBytes, len(dry.Shards), dry.Source)
	var lastPass int
	res, err := mv.Move(ctx, plan, func(p zenmove.Progress) {
		if p.Phase == "pass" && p.Pass != lastPass {
			lastPass = p.Pass
		}
	})
	if err == nil {
		// Writes and reads go on after the switch.
		w, r := writes.Load(), reads.Load()
		testenv.WaitFor(t, testenv.WaitTimeout, "30 writes and 10 reads acknowledged after the move", func() bool {
			return writes.Load() >= w+30 && reads.Load() >= r+10
		})
	}
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var rows, bytes int64
	for _, s := range res.Shards {
		rows += s.Rows
		bytes += s.Bytes
	}
	t.Logf("move %s: %d passes before the fence, %d rows copied, %d deleted, %d in the final pass; verified %d rows (%d bytes) on %d shards; FENCE %v; took %v",
		plan, res.Passes, res.RowsCopied, res.RowsDeleted, res.FinalRows, rows, bytes, len(res.Shards), res.Fence, res.Took)
	t.Logf("workload: %d writes acknowledged, %d reads, %d writes refused as fenced; slowest write to an unmoved shard %v",
		writes.Load(), reads.Load(), fenced.Load(), time.Duration(maxOther.Load()))
	if res.Fence <= 0 || rows == 0 {
		t.Errorf("result: %+v", res)
	}
	if got, _ := router.Shards().RangeFor(20); got.Store != "target" || got.Fenced {
		t.Fatalf("shard 20 after the move: %+v", got)
	}

	// Every row the source held for the moved shards (frozen since the fence) is on the target.
	for _, name := range zenroute.ShardedTables() {
		srcRows := scanRange(t, src, name, 16, 31)
		have := map[string]bool{}
		for _, kv := range scanRange(t, dst, name, 16, 31) {
			have[string(kv.Key)] = true
		}
		missing := 0
		for _, kv := range srcRows {
			if !have[string(kv.Key)] {
				missing++
			}
		}
		if missing > 0 || (len(srcRows) == 0 && name != "worker") { // no worker runs here
			t.Errorf("%s: %d of %d source rows missing on the target (in 16–31 by a full scan: source %d, target %d)",
				name, missing, len(srcRows), countShards(t, src, name, 16, 31), countShards(t, dst, name, 16, 31))
		}
		if other := scanRange(t, dst, name, 0, 15); len(other) > 0 {
			t.Errorf("%s: %d rows of unmoved shards on the target", name, len(other))
		}
	}
	// Poison every source row of the moved shards: from here a read that went to the source fails.
	for _, name := range zenroute.ShardedTables() {
		tb, err := src.Table(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var muts []zen.Mutation
		for _, kv := range scanRange(t, src, name, 16, 31) {
			muts = append(muts, zen.Mutation{Key: kv.Key, Value: []byte("POISON")})
		}
		if err := tb.Apply(ctx, muts); err != nil {
			t.Fatal(err)
		}
	}
	// Every acknowledged write reads back through the graph.
	checked := map[string]int{}
	for p, author := range ack.pins {
		o, err := g.Get(ctx, p)
		if err != nil {
			t.Fatalf("acknowledged pin %v (shard %d): %v", p, p.Shard(), err)
		}
		if a, _ := zen.DataID(o.Data, "author"); a != author {
			t.Fatalf("pin %v author = %v, want %v", p, a, author)
		}
		if id, err := g.LookupKey(ctx, "slug", fmt.Sprint("slug-", p)); err != nil || id != p {
			t.Fatalf("slug of pin %v = %v, %v", p, id, err)
		}
		checked[movedLabel(moved(p))+" pins"]++
	}
	for _, e := range ack.edges {
		if _, err := g.HasEdge(ctx, e.From, e.Type, e.To); err != nil {
			t.Fatalf("acknowledged edge %v -%d-> %v (shard %d): %v", e.From, e.Type, e.To, e.From.Shard(), err)
		}
		checked[movedLabel(moved(e.From))+" edges"]++
	}
	for u, want := range ack.pool {
		top, err := pools.Top(ctx, u, zen.SourceFollowing, 10000)
		if err != nil {
			t.Fatalf("pool of %v: %v", u, err)
		}
		got := map[zen.ID]bool{}
		for _, e := range top {
			got[e.Pin] = true
		}
		// Every acknowledged entry is there (a write cut off by the workload's stop may have
		// landed unacknowledged: an extra entry is fine).
		for _, p := range uniq(want) {
			if !got[p] {
				t.Fatalf("pool of %v (shard %d): acknowledged pin %v missing", u, u.Shard(), p)
			}
		}
		checked[movedLabel(moved(u))+" pools"]++
	}
	for i, u := range users {
		if id, err := g.LookupKey(ctx, "username", fmt.Sprint("u", i)); err != nil || id != u {
			t.Fatalf("username u%d = %v, %v; want %v", i, id, err, u)
		}
		checked["usernames"]++
	}
	for _, tag := range tags {
		if _, err := g.LookupKey(ctx, "tag", tag); err != nil {
			t.Fatalf("tag %s (mod shard %d): %v", tag, zen.ModShard(tag, 4096), err)
		}
		checked["moved tags"]++
	}
	// A new object on a moved shard gets a fresh ID from the moved counter (no reuse).
	u := users[0]
	for _, x := range users {
		if moved(x) {
			u = x
			break
		}
	}
	if _, err := g.Create(ctx, zen.TypePin, u, map[string]any{"author": u}); err != nil {
		t.Errorf("create on a moved shard after the move: %v", err)
	}
	t.Logf("acknowledged writes read back: %v", checked)
}

func movedLabel(m bool) string {
	if m {
		return "moved"
	}
	return "unmoved"
}

func uniq(ids []zen.ID) []zen.ID {
	out := append([]zen.ID(nil), ids...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	j := 0
	for i, id := range out {
		if i == 0 || id != out[j-1] {
			out[j] = id
			j++
		}
	}
	return out[:j]
}

func scanRange(t *testing.T, s zen.Store, table string, from, to uint16) []zen.KV {
	t.Helper()
	tb, err := s.Table(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	start, stop := zen.ShardKeyRange(from, to)
	kvs, err := tb.Scan(t.Context(), zen.ScanOptions{Start: start, Stop: stop})
	if err != nil {
		t.Fatal(err)
	}
	return kvs
}

// seq returns a generator of increasing edge sequences (creation time order, unique).
func seqGen(t *testing.T) func() seq.Seq {
	t.Helper()
	var mu sync.Mutex
	last := int64(0)
	return func() seq.Seq {
		mu.Lock()
		defer mu.Unlock()
		ms := max(time.Now().UnixMilli(), last+1)
		last = ms
		return seq.FromMillis(ms)
	}
}

// countShards counts the rows of shards from..to by a scan of the whole table.
func countShards(t *testing.T, s zen.Store, table string, from, to uint32) int {
	t.Helper()
	tb, err := s.Table(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := tb.Scan(t.Context(), zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range kvs {
		if sh := zen.KeyShard(kv.Key); sh >= from && sh <= to {
			n++
		}
	}
	return n
}
