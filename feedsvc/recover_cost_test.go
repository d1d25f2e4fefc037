package feedsvc

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// feedScans counts the scans of a table that read a user's feed rows (not the pending index).
type feedScans struct {
	zen.Table
	user  zen.ID
	scans atomic.Int64
}

func (f *feedScans) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if bytes.HasPrefix(o.Start, userPrefix(prefixFeed, f.user)) {
		f.scans.Add(1)
	}
	return f.Table.Scan(ctx, o)
}

// TestRecoverAllReadsNoFeed: a recovery pass over a user with a materialized feed and a pending
// chunk younger than olderThan reads the chunk's pending row and nothing of the feed; once the
// chunk is older, the pass completes it.
func TestRecoverAllReadsNoFeed(t *testing.T) {
	e := newEnv(t, nil)
	feedOf(t, e, 4)
	e.gen.err = nil
	e.get(t, "", 5) // a fresh chunk, pending (its job is in e.queue, never run)
	e.svc.Wait()
	counted := &feedScans{Table: e.repl, user: e.user}
	svc, err := New(Deps{Primary: counted, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue, IndexShards: 8}, e.svc.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Wait)
	next, n, err := svc.RecoverAll(t.Context(), 0, time.Hour, 100)
	if err != nil || n != 0 || next != 0 {
		t.Fatalf("RecoverAll of a young chunk = %d, %d, %v; want 0, 0, nil", next, n, err)
	}
	if got := counted.scans.Load(); got != 0 {
		t.Errorf("a pass with nothing to recover scanned the user's feed %d times, want 0", got)
	}
	if _, n, err := svc.RecoverAll(t.Context(), 0, -time.Hour, 100); err != nil || n != 1 {
		t.Fatalf("RecoverAll of a chunk older than olderThan = %d, %v; want 1", n, err)
	}
	if rows := indexRows(t, e.primary); len(rows) != 0 {
		t.Errorf("pending index after recovery: %v", rows)
	}
}
