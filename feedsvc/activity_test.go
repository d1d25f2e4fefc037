package feedsvc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// taskRecorder records the tasks enqueued through it.
type taskRecorder struct {
	mu    sync.Mutex
	tasks []*pinlater.Task
}

func (r *taskRecorder) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, t)
	return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
}

// TestPinlaterActivityPerFewSeconds: with the activity over the queue (split roles), a user
// reading page after page enqueues one touch task in the first seconds, not one per page.
func TestPinlaterActivityPerFewSeconds(t *testing.T) {
	e := newEnv(t, nil)
	rec := &taskRecorder{}
	clk := &settableClock{t: time.Unix(1_800_000_000, 0)}
	e.rebuild(t, func(d *Deps) { d.Activity = PinlaterActivity{Client: rec, Now: clk.now}; d.Now = clk.now })
	for range 10 {
		e.get(t, "", 10)
		e.svc.Wait()
		clk.advance(activityFresh / 20)
	}
	if n := len(rec.tasks); n != 1 {
		t.Errorf("10 pages in %v enqueued %d touch tasks, want 1", activityFresh/2, n)
	}
}

// TestPinlaterActivity: a touch over the queue is a "touch" task for the worker naming the user
// and the time, one per user per minute, and never reports a rebuild it cannot know of.
func TestPinlaterActivity(t *testing.T) {
	u1, u2 := userID(t, 1), userID(t, 2)
	base := time.UnixMilli(1_700_000_040_000) // a minute boundary
	tests := []struct {
		name   string
		user   zen.ID
		at     time.Time
		sameAs int // index of the touch whose task ID this one shares; -1: none
	}{
		{"first", u1, base, -1},
		{"same minute", u1, base.Add(59 * time.Second), 0},
		{"next minute", u1, base.Add(time.Minute), -1},
		{"other user", u2, base, -1},
	}
	rec := &taskRecorder{}
	for i, tt := range tests {
		a := PinlaterActivity{Client: rec, Now: func() time.Time { return tt.at }}
		rebuilding, err := a.Touch(t.Context(), tt.user)
		if err != nil || rebuilding {
			t.Fatalf("%s: Touch = %v, %v; want false, nil", tt.name, rebuilding, err)
		}
		task := rec.tasks[i]
		p, err := pinlater.Decode[pinlater.TouchPayload](task)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(pinlater.TouchPayload{V: pinlater.PayloadVersion, User: uint64(tt.user), AtMs: tt.at.UnixMilli()}, p); diff != "" {
			t.Errorf("%s: payload (-want +got):\n%s", tt.name, diff)
		}
		for j := range i {
			if same := rec.tasks[j].ID() == task.ID(); same != (j == tt.sameAs) {
				t.Errorf("%s: task ID %q vs %q of %q: same = %v", tt.name, task.ID(), rec.tasks[j].ID(), tests[j].name, same)
			}
		}
	}
	if _, err := (PinlaterActivity{Client: rec}).Touch(t.Context(), pinID(1)); err == nil {
		t.Error("Touch of a pin ID: no error")
	}
}

// TestHandleFeedDelete: the task a worker in another process enqueues removes the feed; a
// payload that names no user is archived, not retried.
func TestHandleFeedDelete(t *testing.T) {
	e := newEnv(t, nil)
	e.get(t, "", 10)
	e.svc.Wait()
	e.materialize(t)
	e.flush(t)
	if rowsOf(t, e.primary, e.user) == 0 {
		t.Fatal("setup: no feed")
	}
	if err := e.svc.HandleFeedDelete(t.Context(), pinlater.FeedDeletePayload{V: pinlater.PayloadVersion, User: uint64(e.user)}); err != nil {
		t.Fatal(err)
	}
	if n := rowsOf(t, e.primary, e.user); n != 0 {
		t.Errorf("%d rows of the user left after the feed-delete task", n)
	}
	err := e.svc.HandleFeedDelete(t.Context(), pinlater.FeedDeletePayload{V: pinlater.PayloadVersion, User: uint64(pinID(1))})
	if !errors.Is(err, pinlater.ErrInvalidPayload) {
		t.Errorf("feed-delete of a pin ID: %v, want ErrInvalidPayload", err)
	}
}

// slowEnqueuer takes its time, like a Redis under load.
type slowEnqueuer struct{ d time.Duration }

func (s slowEnqueuer) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	// sleep: the enqueue's slowness is what the page must not wait for.
	time.Sleep(s.d)
	return &pinlater.Info{ID: t.ID()}, nil
}

// TestPinlaterActivityDoesNotHoldPages: a touch over the queue cannot report a rebuild, so a
// page never waits for its enqueue.
func TestPinlaterActivityDoesNotHoldPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.svc.activity = PinlaterActivity{Client: slowEnqueuer{d: 300 * time.Millisecond}}
		e.svc.activityWait = time.Second
		start := time.Now()
		p := e.get(t, "", 10)
		if took := time.Since(start); took > 200*time.Millisecond {
			t.Errorf("GetFeed took %s with a slow touch enqueue: the page waited for it", took)
		}
		if p.Rebuilding {
			t.Error("page says rebuilding: a queued touch cannot know")
		}
	})
}

// TestRecentActivityDoesNotHoldPages: once the hook said "not rebuilding" for a user, the user's
// pages in the next seconds do not wait for it again (a rebuild starts only after a long
// absence): in the first half of activityFresh they do not call it at all, in the second half
// they call it without waiting; a "rebuilding" answer is not remembered, so the pages after it
// wait and say so.
func TestRecentActivityDoesNotHoldPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		act := &fakeActivity{}
		clk := &settableClock{t: time.Unix(1_800_000_000, 0)}
		e.rebuild(t, func(d *Deps) { d.Activity = act; d.ActivityWait = time.Second; d.Now = clk.now })
		if p := e.get(t, "", 10); p.Rebuilding {
			t.Fatal("first page says rebuilding")
		}
		e.svc.Wait()
		if n := act.touched(); n != 1 {
			t.Fatalf("first page called the hook %d times, want 1", n)
		}
		block := make(chan struct{})
		act.mu.Lock()
		act.block, act.rebuilding = block, true
		act.mu.Unlock()

		clk.advance(activityFresh/2 - time.Second)
		if p := e.get(t, "", 10); p.Rebuilding {
			t.Error("page right after a not-rebuilding answer says rebuilding")
		}
		if n := act.touched(); n != 1 {
			t.Errorf("page %v after a not-rebuilding answer called the hook (%d calls, want 1)", activityFresh/2-time.Second, n)
		}

		clk.advance(2 * time.Second) // past the first half: the hook is called, not waited for
		start := time.Now()
		p := e.get(t, "", 10)
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("page took %s: it waited for the hook that answered moments ago", took)
		}
		if p.Rebuilding {
			t.Error("page says rebuilding before the hook answered")
		}
		act.mu.Lock()
		act.block = nil
		act.mu.Unlock()
		close(block)
		e.svc.Wait() // the blocked touch answers "rebuilding": forgotten
		if n := act.touched(); n != 2 {
			t.Errorf("hook called %d times, want 2 (the page in the second half renews the answer)", n)
		}
		if p := e.get(t, "", 10); !p.Rebuilding {
			t.Error("page after a rebuilding answer does not wait for the hook and say so")
		}
	})
}
