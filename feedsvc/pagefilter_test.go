package feedsvc

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// readCountingLog counts the reads of the deletion log past its snapshot.
type readCountingLog struct {
	DeletionLog
	reads atomic.Int64
}

func (c *readCountingLog) DeletionsAfter(ctx context.Context, after uint64, limit int) ([]zen.ID, error) {
	c.reads.Add(1)
	return c.DeletionLog.DeletionsAfter(ctx, after, limit)
}

// TestPageReadsDeletionLogOnce: a page checks its reader and its items against the DeletedSet,
// and reads the deletion log once for both; a page that begins after a deletion is acknowledged
// reads the log again and does not serve the pin.
func TestPageReadsDeletionLogOnce(t *testing.T) {
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	createPins(t, writer, 20)
	e := newEnv(t, nil)
	all := feedOf(t, e, 4)
	log := &readCountingLog{DeletionLog: graphOver(t, graphStore)}
	svc, err := New(Deps{Primary: e.repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
		Liveness: allUsers{NewDeletedSet(log)}}, e.svc.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Wait)
	e.svc = svc
	for _, cursor := range []string{"", e.get(t, "", 5).NextCursor} {
		before := log.reads.Load()
		p := e.get(t, cursor, 5)
		if n := log.reads.Load() - before; n != 1 {
			t.Errorf("page (cursor %q) read the deletion log %d times, want 1", cursor, n)
		}
		if len(p.Items) != 5 {
			t.Errorf("page (cursor %q): %d items, want 5", cursor, len(p.Items))
		}
	}
	if err := writer.Delete(context.Background(), all[0]); err != nil {
		t.Fatal(err)
	}
	if got := pagePins(e.get(t, "", 5)); len(got) == 0 || got[0] == all[0] {
		t.Errorf("first page after deleting %d: %v", all[0], got)
	}
}

// allUsers is a Liveness that counts every user as live, and asks its set about the rest (the
// set names deleted objects, and the test's users are not objects of its graph).
type allUsers struct{ set *DeletedSet }

func (a allUsers) Live(ctx context.Context, ids []zen.ID) (map[zen.ID]bool, error) {
	live, err := a.set.Live(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id.Type() == zen.TypeUser {
			live[id] = true
		}
	}
	return live, nil
}

// TestDeletedSetTrustsOnlyReadsAfterThePage: a check for a page reads nothing when a catch-up
// began after the page began, and reads the log when the last one began before it, so a
// deletion acknowledged in between is seen.
func TestDeletedSetTrustsOnlyReadsAfterThePage(t *testing.T) {
	ctx := context.Background()
	graphStore := zenmem.New()
	writer := graphOver(t, graphStore)
	createPins(t, writer, 3)
	log := &readCountingLog{DeletionLog: graphOver(t, graphStore)}
	set := NewDeletedSet(log)
	if err := set.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := writer.Delete(ctx, pinID(2)); err != nil {
		t.Fatal(err)
	}
	page := withPageStart(ctx, time.Now())
	for i := range 3 {
		before := log.reads.Load()
		live, err := set.Live(page, []zen.ID{pinID(1), pinID(2)})
		if err != nil {
			t.Fatal(err)
		}
		if !live[pinID(1)] || live[pinID(2)] {
			t.Errorf("check %d: live %v, want pin 1 only", i, live)
		}
		want := int64(0)
		if i == 0 {
			want = 1
		}
		if n := log.reads.Load() - before; n != want {
			t.Errorf("check %d of the page read the log %d times, want %d", i, n, want)
		}
	}
	// Outside a page (the generator's checks), every check reads the log.
	before := log.reads.Load()
	if _, err := set.Live(ctx, []zen.ID{pinID(1)}); err != nil {
		t.Fatal(err)
	}
	if n := log.reads.Load() - before; n != 1 {
		t.Errorf("a check outside a page read the log %d times, want 1", n)
	}
}
