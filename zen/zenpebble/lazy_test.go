package zenpebble

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/zen"
)

// TestLazyWritesAfterMachineCrash simulates a machine crash (vfs CrashClone: what was synced,
// nothing more): lazy writes (zen.Lazily) alone may be lost, and a later synced write of the
// same store, to any of its tables, makes every earlier lazy write durable with it.
func TestLazyWritesAfterMachineCrash(t *testing.T) {
	ctx := context.Background()
	lctx := zen.Lazily(ctx)
	fs := vfs.NewCrashableMem()
	s, err := Open("db", WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	a, b := openTable(t, s, "a"), openTable(t, s, "b")
	if !zen.SameLog(a, b) {
		t.Fatal("two tables of one store: SameLog false")
	}
	if other := openTable(t, openStore(t, ""), "a"); zen.SameLog(a, other) {
		t.Fatal("tables of two stores: SameLog true")
	}
	put := func(ctx context.Context, tb zen.Table, k string) {
		t.Helper()
		if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte(k), Value: []byte(k)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Steps of a sequence: lazy writes to both tables (Apply, compare-and-set, batched
	// compare-and-set), then one synced write.
	put(lctx, a, "step1")
	if ok, err := b.CheckAndSet(lctx, []byte("step2"), nil, []byte("step2")); err != nil || !ok {
		t.Fatalf("lazy CheckAndSet: %v %v", ok, err)
	}
	if _, err := b.(zen.CondBatcher).CheckAndSetMany(lctx, []zen.Cond{{Key: []byte("step3"), Value: []byte("step3")}}); err != nil {
		t.Fatal(err)
	}
	lazyOnly := fs.CrashClone(vfs.CrashCloneCfg{})
	put(ctx, a, "step4")
	afterSync := fs.CrashClone(vfs.CrashCloneCfg{})
	put(lctx, b, "step5")
	if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}

	read := func(fs vfs.FS) string {
		t.Helper()
		s, err := Open("db", WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var got string
		for _, k := range []struct{ table, key string }{{"a", "step1"}, {"b", "step2"}, {"b", "step3"}, {"a", "step4"}, {"b", "step5"}} {
			_, err := openTable(t, s, k.table).Get(ctx, []byte(k.key))
			if err == nil {
				got += k.key + " "
			} else if !errors.Is(err, zen.ErrNotFound) {
				t.Fatal(err)
			}
		}
		return got
	}
	if got := read(afterSync); got != "step1 step2 step3 step4 " {
		t.Errorf("crash after the synced step: %q survived, want every step up to it", got)
	}
	// Without a sync the lazy steps are not promised (and here, with the log unsynced and no
	// flush, none survives: they did not wait for an fsync).
	if got := read(lazyOnly); got != "" {
		t.Errorf("crash after lazy steps only: %q survived, want none (were they synced?)", got)
	}
}
