package feedsvc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenpebble/pebblecrash"
)

// TestMaterializeMachineCrash: Materialize writes its pin claims, item rows and close (done
// marker, pending row deleted) lazily, in that order on one log. A machine crash (the files as
// fsynced, nothing more) before any of its writes, followed by the retry of the task, must
// leave the feed table exactly as one clean materialization does: no item lost with its pending
// row gone, no pin claimed without its item, nothing twice.
func TestMaterializeMachineCrash(t *testing.T) {
	ctx := context.Background()
	user := userID(t, 1)
	var mu sync.Mutex
	var crashes []*vfs.MemFS
	open := func(fs vfs.FS, crashing bool) (*zenpebble.Store, *Service, *fakeQueue) {
		t.Helper()
		s, err := zenpebble.Open("feed", zenpebble.WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		tb, err := s.Table(ctx, "feed")
		if err != nil {
			t.Fatal(err)
		}
		var primary zen.Table = tb
		if crashing {
			primary = pebblecrash.Table{Table: tb.(*zenpebble.Table), Before: func() {
				mu.Lock()
				defer mu.Unlock()
				crashes = append(crashes, fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{}))
			}}
		}
		standby, _ := zenmem.New().Table(ctx, "feed")
		q := &fakeQueue{}
		svc, err := New(Deps{Primary: primary, Standby: standby, Generator: newFakeGen(5), Enqueuer: q,
			Now: func() time.Time { return time.Unix(1_800_000_000, 0) }, TrimEvery: 1},
			func() Config { c := queuedConfig(); c.MaxItems = 7; return c }())
		if err != nil {
			t.Fatal(err)
		}
		return s, svc, q
	}
	dump := func(s *zenpebble.Store) []zen.KV {
		t.Helper()
		tb, err := s.Table(ctx, "feed")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	closeStore := func(s *zenpebble.Store, svc *Service) {
		t.Helper()
		svc.Wait()
		svc.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// The state before: chunk c1 materialized, c2 served (its pending row synced) and queued.
	fs := vfs.NewCrashableMem()
	s, svc, q := open(fs, false)
	var task MaterializeTask
	for range 2 {
		if _, err := svc.GetFeed(ctx, Request{User: user}); err != nil {
			t.Fatal(err)
		}
		svc.Wait()
		tasks := q.take()
		if len(tasks) != 1 {
			t.Fatalf("%d tasks queued, want 1", len(tasks))
		}
		task = tasks[0]
		if task.ChunkID == "c1" {
			if err := svc.Materialize(ctx, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeStore(s, svc)
	base := fs.CrashClone(vfs.CrashCloneCfg{})

	// The clean run, and the run that takes a crash image before each of its writes.
	s, svc, _ = open(base.CrashClone(vfs.CrashCloneCfg{}), false)
	if err := svc.Materialize(ctx, task); err != nil {
		t.Fatal(err)
	}
	want := withoutHeadVersions(dump(s))
	closeStore(s, svc)
	if len(want) == 0 {
		t.Fatal("clean run: empty feed table")
	}
	running := base.CrashClone(vfs.CrashCloneCfg{})
	s, svc, _ = open(running, true)
	if err := svc.Materialize(ctx, task); err != nil {
		t.Fatal(err)
	}
	closeStore(s, svc)
	if len(crashes) < 5 {
		t.Fatalf("%d crash points, want one before each write of Materialize", len(crashes))
	}

	for i, crashed := range crashes {
		s, svc, _ := open(crashed, false)
		if err := svc.Materialize(ctx, task); err != nil {
			t.Fatalf("crash %d: retry: %v", i, err)
		}
		if diff := cmp.Diff(want, withoutHeadVersions(dump(s))); diff != "" {
			t.Errorf("crash %d of %d, then the retry: feed table (-clean run +got):\n%s", i, len(crashes), diff)
		}
		closeStore(s, svc)
	}
}
