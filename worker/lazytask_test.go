package worker

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// TestFanoutDurableWhenAcknowledged simulates machine crashes (vfs CrashClone: what was fsynced,
// nothing more) during a fanout task on the embedded store with fsync on. The task's pool rows
// (three receiver lists and the saver's related pins) are written lazily and its last write,
// Forget's, is synced: a crash when the handler returns, after which the task would be
// acknowledged, keeps every row it wrote; a crash after its first insert keeps none (the task,
// not acknowledged, runs again and writes the same rows).
func TestFanoutDurableWhenAcknowledged(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWorld(t, s, Config{ChunkSize: 100, TrimEvery: 1 << 20}, 5, nil)
	if !w.w.lazyTask {
		t.Fatal("pools and state of one embedded store: lazyTask false")
	}
	// Another board holds pin 0 and pin x, so alice's save of pin 0 puts x in her related pool.
	bob, err := w.g.Create(ctx, zen.TypeUser, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	art, err := w.g.Create(ctx, zen.TypeBoard, bob.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, err := w.g.Create(ctx, zen.TypePin, art.ID, map[string]any{"author": bob.ID.String(), "board": art.ID.String(),
		"created_ms": w.clk.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	w.edge(t, art.ID, zen.EdgeBoardPins, w.pins[0])
	w.edge(t, art.ID, zen.EdgeBoardPins, x.ID)

	var mid vfs.FS
	inserts := 0
	w.w.OnInsert(func([]zen.PoolEntry) {
		inserts++
		if mid == nil {
			mid = fs.CrashClone(vfs.CrashCloneCfg{})
		}
	})
	task := w.fanoutTask(t, 0)
	if err := handler(t, w.q, task.Type()).ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	end := fs.CrashClone(vfs.CrashCloneCfg{})
	if inserts < 4 {
		t.Fatalf("%d pool inserts, want one per list (user, board, interest) and the related pins", inserts)
	}
	related, err := w.w.Pools().Top(ctx, w.alice, zen.SourceRelated, 10)
	if err != nil || len(related) != 1 || related[0].Pin != x.ID {
		t.Fatalf("alice's related pool = %v, %v; want pin x", related, err)
	}
	live := map[string][]zen.KV{"pools": snapshot(t, w.pools), StateTable: snapshot(t, w.state)}

	image := func(fs vfs.FS) map[string][]zen.KV {
		t.Helper()
		s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out := map[string][]zen.KV{}
		for _, n := range []string{"pools", StateTable} {
			tb, err := s.Table(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = snapshot(t, tb)
		}
		return out
	}
	if d := cmp.Diff(live, image(end)); d != "" {
		t.Errorf("crash when the task returned: rows lost (-live +after the crash):\n%s", d)
	}
	if got := image(mid)["pools"]; len(got) != 0 {
		t.Errorf("crash after the first insert: %d pool rows survived, want none (did the insert wait for an fsync?)", len(got))
	}
}
