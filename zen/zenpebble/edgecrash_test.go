package zenpebble_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenpebble/pebblecrash"
)

// TestAddEdgeMachineCrash adds edges (and their inverses) on a real Pebble store and simulates a
// machine crash (what was fsynced, nothing more) before every write and after the last add.
// On one store AddEdge writes its steps lazily and waits for durability once: no crash image
// taken inside the first add shows any of it, every add that returned is there whole (listed,
// counted), and adding everything again from any image gives each list exactly once, counted
// right. (With a durable write per step, a crash between the compare-and-set to counted and the
// increment left a count one low; written lazily, the two become durable together.)
func TestAddEdgeMachineCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	type crash struct {
		fs    *vfs.MemFS
		acked int // adds that had returned
	}
	var crashes []crash
	acked := 0
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	cs := pebblecrash.Store{Store: s, Before: func() { crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), acked}) }}
	g, err := zen.NewGraph(ctx, cs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := func(typ zen.Type, n uint64) zen.ID {
		v, err := zen.NewID(1, typ, n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	board := id(zen.TypeBoard, 1)
	var adds []zen.Edge // forward edges; each add is followed by its inverse's
	for i := uint64(1); i <= 3; i++ {
		adds = append(adds, zen.Edge{From: board, Type: zen.EdgeBoardPins, To: id(zen.TypePin, i)})
	}
	firstCall := 0
	for i, e := range adds {
		if err := g.AddEdge(ctx, e); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstCall = len(crashes)
		}
		acked++
		if err := g.AddInverse(ctx, e); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), acked})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if firstCall < 2 {
		t.Fatalf("%d writes in the first add, want its steps", firstCall)
	}

	// Each add's edges as (from, type, to); acked counts adds in the order made.
	type key struct {
		from zen.ID
		typ  zen.EdgeType
		to   zen.ID
	}
	var made []key
	for _, e := range adds {
		inv, _ := e.Type.Inverse()
		made = append(made, key{e.From, e.Type, e.To}, key{e.To, inv, e.From})
	}
	for i, c := range crashes {
		s, err := zenpebble.Open("db", zenpebble.WithFS(c.fs))
		if err != nil {
			t.Fatalf("crash %d: reopen: %v", i, err)
		}
		g, err := zen.NewGraph(ctx, s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		has := func(k key) bool {
			ok, err := g.HasEdges(ctx, []zen.EdgeKey{{From: k.from, Type: k.typ, To: k.to}})
			if err != nil {
				t.Fatal(err)
			}
			return ok[0]
		}
		listed := func(from zen.ID, typ zen.EdgeType) []string {
			es, _, err := g.ListEdges(ctx, from, typ, "", 100, false)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range es {
				out = append(out, fmt.Sprint(e.To))
			}
			return out
		}
		if i < firstCall && has(made[0]) {
			t.Errorf("crash %d, inside the first add: its edge is durable before the add's last write", i)
		}
		for j := range c.acked { // every add that returned is there whole
			k := made[j]
			if !has(k) || !contains(listed(k.from, k.typ), fmt.Sprint(k.to)) {
				t.Errorf("crash %d: add %d (%v) returned but is not listed", i, j, k)
			}
			if n, err := g.CountEdges(ctx, k.from, k.typ); err != nil || n < 1 {
				t.Errorf("crash %d: add %d (%v) returned but its list counts %d (%v)", i, j, k, n, err)
			}
		}
		// The client retries everything: each edge once, counted right.
		for _, e := range adds {
			if err := g.AddEdge(ctx, e); err != nil {
				t.Fatal(err)
			}
			if err := g.AddInverse(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if got := listed(board, zen.EdgeBoardPins); len(got) != len(adds) {
			t.Errorf("crash %d: board lists %v after the retries, want %d pins once each", i, got, len(adds))
		}
		for _, k := range made {
			if n, err := g.CountEdges(ctx, k.from, k.typ); err != nil || int(n) != len(listed(k.from, k.typ)) {
				t.Errorf("crash %d: %v: count %d (%v), listed %d", i, k, n, err, len(listed(k.from, k.typ)))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCreateMachineCrash creates objects on a real Pebble store and simulates a machine crash
// before every write and after the last create. The ID allocation is lazy, made durable by the
// object's write: an image inside the first create holds nothing of it (a create after recovery
// gets the same first ID), every create that returned is there with its data, and a create after
// recovery never reuses the ID of one that returned.
func TestCreateMachineCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	type crash struct {
		fs    *vfs.MemFS
		acked int
	}
	var crashes []crash
	var acked []zen.ID
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	cs := pebblecrash.Store{Store: s, Before: func() { crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), len(acked)}) }}
	g, err := zen.NewGraph(ctx, cs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(0)
	firstCall := 0
	for i := range 3 {
		o, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"title": fmt.Sprint("pin ", i)})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstCall = len(crashes)
		}
		acked = append(acked, o.ID)
	}
	crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), len(acked)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range crashes {
		s, err := zenpebble.Open("db", zenpebble.WithFS(c.fs))
		if err != nil {
			t.Fatalf("crash %d: reopen: %v", i, err)
		}
		g, err := zen.NewGraph(ctx, s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.SeedShards(0) // the first create's shard again
		for j, id := range acked[:c.acked] {
			o, err := g.Get(ctx, id)
			if err != nil || o.Data["title"] != fmt.Sprint("pin ", j) {
				t.Errorf("crash %d: create %d (%d) returned but reads %v, %v", i, j, id, o.Data, err)
			}
		}
		o, err := g.Create(ctx, zen.TypePin, 0, nil)
		if err != nil {
			t.Fatalf("crash %d: create after recovery: %v", i, err)
		}
		if slices.Contains(acked[:c.acked], o.ID) {
			t.Errorf("crash %d: a create after recovery got %d, the ID of one that returned", i, o.ID)
		}
		if i < firstCall && o.ID != acked[0] {
			t.Errorf("crash %d, inside the first create: the create after recovery got %d, want %d (the allocation was durable alone)", i, o.ID, acked[0])
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func contains(ss []string, s string) bool { return slices.Contains(ss, s) }

// TestOutboxDeleteDoneIsLazy: DeleteDone removes the row at once for readers but does not wait
// for durability (a machine crash right after brings the row back, for the relay to offer once
// more), while Delete's removal survives the crash.
func TestOutboxDeleteDoneIsLazy(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(ctx, zen.OutboxTable)
	if err != nil {
		t.Fatal(err)
	}
	box := zen.NewOutbox(tb)
	for _, k := range []string{"a", "b"} {
		if err := box.Put(ctx, []byte(k), []byte("task")); err != nil {
			t.Fatal(err)
		}
	}
	if err := box.DeleteDone(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	rows := func(b *zen.Outbox) []string {
		var out []string
		if err := b.Range(ctx, nil, nil, 0, func(k, _ []byte) error { out = append(out, string(k)); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := rows(box); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after DeleteDone(a): rows %v, want [b]", got)
	}
	lazyOnly := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := box.Delete(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	afterSync := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		fs   *vfs.MemFS
		want []string
	}{"crash after DeleteDone": {lazyOnly, []string{"a", "b"}}, "crash after Delete": {afterSync, nil}} {
		s, err := zenpebble.Open("db", zenpebble.WithFS(c.fs))
		if err != nil {
			t.Fatal(err)
		}
		tb, err := s.Table(ctx, zen.OutboxTable)
		if err != nil {
			t.Fatal(err)
		}
		if got := rows(zen.NewOutbox(tb)); !slices.Equal(got, c.want) {
			t.Errorf("%s: rows %v, want %v", name, got, c.want)
		}
		_ = s.Close()
	}
}
