package worker

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestTouchOverQueue: a feed service in another process reports a read as a "touch" task; run
// by the worker it is Touch: a returning inactive user's pools are rebuilt with the pins the
// fanout skipped, as TestRebuildSignal's in-process Touch does.
func TestTouchOverQueue(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{InactiveAfter: 24 * time.Hour}, 2, nil)
	away := w.followers[0]
	if err := w.w.SetLastActive(ctx, away, w.clk.now().Add(-48*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	w.q.Enqueue(ctx, w.fanoutTask(t, 0))
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.w.Pools().Size(ctx, away, 0); n != 0 {
		t.Fatalf("inactive user got %d entries, want 0 (skipped)", n)
	}
	task, err := pinlater.NewTouch(pinlater.TouchPayload{User: uint64(away), AtMs: w.clk.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	w.q.Enqueue(ctx, task)
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.w.Pools().Size(ctx, away, 0); n != 4 {
		t.Fatalf("rebuilt pools hold %d entries, want alice's 4 pins", n)
	}
	// A touch naming a pin is archived, not retried.
	if err := w.w.HandleTouch(ctx, pinlater.TouchPayload{V: 1, User: uint64(w.pins[0]), AtMs: 1}); err == nil {
		t.Error("touch of a pin ID: no error")
	}
}

// enqueueRecorder records the tasks enqueued through it.
type enqueueRecorder struct{ tasks []*pinlater.Task }

func (r *enqueueRecorder) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	r.tasks = append(r.tasks, t)
	return &pinlater.Info{ID: t.ID()}, nil
}

// TestPinlaterFeedRemover: with the feed service in another process, a user delete enqueues one
// feed-delete task naming the user, on the queue the feed role runs.
func TestPinlaterFeedRemover(t *testing.T) {
	rec := &enqueueRecorder{}
	user, _ := zen.NewID(3, zen.TypeUser, 9)
	if err := (PinlaterFeedRemover{Client: rec}).DeleteFeed(t.Context(), user); err != nil {
		t.Fatal(err)
	}
	if len(rec.tasks) != 1 {
		t.Fatalf("%d tasks enqueued, want 1", len(rec.tasks))
	}
	p, err := pinlater.Decode[pinlater.FeedDeletePayload](rec.tasks[0])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(pinlater.FeedDeletePayload{V: pinlater.PayloadVersion, User: uint64(user)}, p); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
	if q := rec.tasks[0].Policy().Queue; q != pinlater.QueueCritical {
		t.Errorf("queue %q, want %q (run by the feed role)", q, pinlater.QueueCritical)
	}
}
