package worker

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// TestOutboxBackedInsertsAfterMachineCrash runs a fanout on a real Pebble store, as a task backed
// by an outbox row in the same store (pinlater.OutboxBacked), then deletes the row as the server
// does once the handler returns (DeleteDone), and simulates a machine crash (what was fsynced,
// nothing more) at that point and after a later synced write:
//   - right after: the inserts did not wait for durability, so they are gone, but the row is
//     still there, and running the task again (the relay's job) gives every follower the pin;
//   - after a later synced write: the inserts and the delete are durable together;
//   - a task not backed by a row inserts durably, as before.
func TestOutboxBackedInsertsAfterMachineCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wd := newWorld(t, s, Config{}, 5, nil)
	open := func(st zen.Store) (*Worker, *zen.Outbox, *zen.Pools) {
		t.Helper()
		g, err := zen.NewGraph(ctx, st, nil, wd.clk.now)
		if err != nil {
			t.Fatal(err)
		}
		tb := func(name string) zen.Table {
			x, err := st.Table(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		box := tb(zen.OutboxTable)
		w, err := New(g, tb("pools"), tb(StateTable), newInlineQueue(), Config{}, Options{Now: wd.clk.now, Outbox: box})
		if err != nil {
			t.Fatal(err)
		}
		return w, zen.NewOutbox(box), zen.NewPools(tb("pools"), wd.clk.now)
	}
	fanout := func(w *Worker, ctx context.Context, pin zen.ID) {
		t.Helper()
		p := pinlater.FanoutPayload{V: 1, Pin: uint64(pin), Author: uint64(wd.alice), Board: uint64(wd.travel), CreatedMs: wd.clk.now().UnixMilli()}
		if err := w.HandleFanout(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// got returns, per follower of alice, whether pin is in their pools.
	got := func(pools *zen.Pools, pin zen.ID) []bool {
		t.Helper()
		var out []bool
		for _, f := range wd.followers[:5] {
			es, err := pools.Top(ctx, f, zen.SourceFollowing, 50)
			if err != nil {
				t.Fatal(err)
			}
			has := false
			for _, e := range es {
				has = has || e.Pin == pin
			}
			out = append(out, has)
		}
		return out
	}
	rowThere := func(box *zen.Outbox, key string) bool {
		found := false
		if err := box.Range(ctx, []byte(key), append([]byte(key), 0), 1, func(_, _ []byte) error { found = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return found
	}
	all, none := []bool{true, true, true, true, true}, []bool{false, false, false, false, false}

	w, box, pools := open(s)
	if !w.lazyBacked {
		t.Fatal("pools and outbox of one Pebble store: the worker does not insert lazily for outbox-backed tasks")
	}
	other, err := zenpebble.Open("other", zenpebble.WithFS(vfs.NewMem()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherBox, err := other.Table(ctx, zen.OutboxTable)
	if err != nil {
		t.Fatal(err)
	}
	if wo, err := New(wd.g, wd.pools, wd.state, newInlineQueue(), Config{}, Options{Outbox: otherBox}); err != nil || wo.lazyBacked {
		t.Fatalf("outbox in another store (another log): lazy = %v (%v); its delete could be durable before the writes", wo != nil && wo.lazyBacked, err)
	}
	// Not backed by a row: durable when the handler returns.
	fanout(w, ctx, wd.pins[0])
	plain := fs.CrashClone(vfs.CrashCloneCfg{})
	// Backed by a row, deleted once the handler returned.
	if err := box.Put(ctx, []byte("task1"), []byte("fanout")); err != nil {
		t.Fatal(err)
	}
	fanout(w, pinlater.WithOutboxBacked(ctx), wd.pins[1])
	if diff := cmp.Diff(all, got(pools, wd.pins[1])); diff != "" {
		t.Fatalf("inserts not visible at once (-want +got):\n%s", diff)
	}
	if err := box.DeleteDone(ctx, []byte("task1")); err != nil {
		t.Fatal(err)
	}
	rightAfter := fs.CrashClone(vfs.CrashCloneCfg{})
	if err := box.Put(ctx, []byte("other"), []byte("x")); err != nil { // any synced write
		t.Fatal(err)
	}
	later := fs.CrashClone(vfs.CrashCloneCfg{})

	reopen := func(c *vfs.MemFS) (*zenpebble.Store, *Worker, *zen.Outbox, *zen.Pools) {
		t.Helper()
		st, err := zenpebble.Open("db", zenpebble.WithFS(c))
		if err != nil {
			t.Fatal(err)
		}
		w, box, pools := open(st)
		return st, w, box, pools
	}
	st, _, _, pools := reopen(plain)
	if diff := cmp.Diff(all, got(pools, wd.pins[0])); diff != "" {
		t.Errorf("crash after a fanout not backed by a row (-want +got):\n%s", diff)
	}
	st.Close()

	st, w2, box2, pools := reopen(rightAfter)
	if diff := cmp.Diff(none, got(pools, wd.pins[1])); diff != "" {
		t.Errorf("crash right after the backed fanout: inserts durable without a sync (-want +got):\n%s", diff)
	}
	if !rowThere(box2, "task1") {
		t.Fatal("crash right after the backed fanout: its inserts are lost and so is its outbox row")
	}
	fanout(w2, pinlater.WithOutboxBacked(ctx), wd.pins[1]) // the relay runs it again
	if diff := cmp.Diff(all, got(pools, wd.pins[1])); diff != "" {
		t.Errorf("the task run again (-want +got):\n%s", diff)
	}
	st.Close()

	st, _, box3, pools := reopen(later)
	if rowThere(box3, "task1") {
		t.Error("crash after a later synced write: the outbox row's delete was lost")
	}
	if diff := cmp.Diff(all, got(pools, wd.pins[1])); diff != "" {
		t.Errorf("crash after a later synced write (-want +got):\n%s", diff)
	}
	st.Close()
}
