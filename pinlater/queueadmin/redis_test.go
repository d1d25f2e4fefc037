package queueadmin

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// TestOnRedis runs the server over a real pinlater.Admin: a task is enqueued and archived (dead),
// listed as dead, retried back to pending; its queue is paused and resumed.
func TestOnRedis(t *testing.T) {
	addr, ns := testenv.RedisNamespace(t, "queueadmintest")
	ctx := t.Context()
	r := pinlater.RedisAddr(addr)
	admin, err := pinlater.NewAdmin(r, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	client, err := pinlater.NewClient(r, zap.NewNop(), nil, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	task, err := pinlater.NewPinDelete(pinlater.PinDeletePayload{Pin: 7, Author: 1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := client.Enqueue(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ArchiveTask(ctx, info.Queue, info.ID); err != nil {
		t.Fatal(err)
	}
	s := New(admin)

	dead, err := s.ListTasks(ctx, &pinlaterv1.ListTasksRequest{Queue: info.Queue, State: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	want := &pinlaterv1.ListTasksResponse{Tasks: []*pinlaterv1.Task{{Id: info.ID, Queue: info.Queue, Type: info.Type,
		State: "dead", Attempts: 1}}}
	if diff := cmp.Diff(want, dead, protocmp.Transform(), protocmp.IgnoreFields(&pinlaterv1.Task{}, "payload", "next_process_ms", "last_failed_ms")); diff != "" {
		t.Errorf("dead tasks (-want +got):\n%s", diff)
	}
	retried, err := s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: info.Queue, Id: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if retried.GetRetried() != 1 {
		t.Errorf("retried %d, want 1", retried.GetRetried())
	}
	q, err := s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: info.Queue, Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([3]any{true, int64(1), int64(0)}, [3]any{q.GetPaused(), q.GetPending(), q.GetDead()}); diff != "" {
		t.Errorf("after the retry and the pause [paused pending dead] (-want +got):\n%s", diff)
	}
	q, err = s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: info.Queue})
	if err != nil {
		t.Fatal(err)
	}
	if q.GetPaused() {
		t.Error("still paused after the resume")
	}
}

// TestBadQueueNamesOnRedis: over a real pinlater.Admin, every QueueAdmin method answers a blank
// or malformed queue name with InvalidArgument and a queue the namespace does not have with
// NotFound (never Unavailable, which tells a client to retry), and leaves no setting behind for
// the unknown queue. A standard queue that never held a task is still a queue.
func TestBadQueueNamesOnRedis(t *testing.T) {
	addr, ns := testenv.RedisNamespace(t, "queueadminbad")
	ctx := t.Context()
	admin, err := pinlater.NewAdmin(pinlater.RedisAddr(addr), pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s := New(admin)
	methods := map[string]func(q string) error{
		"ListTasks": func(q string) error {
			_, err := s.ListTasks(ctx, &pinlaterv1.ListTasksRequest{Queue: q, State: "pending"})
			return err
		},
		"SetQueuePaused(true)": func(q string) error {
			_, err := s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: q, Paused: true})
			return err
		},
		"SetQueuePaused(false)": func(q string) error {
			_, err := s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: q})
			return err
		},
		"SetQueueDraining": func(q string) error {
			_, err := s.SetQueueDraining(ctx, &pinlaterv1.SetQueueDrainingRequest{Queue: q, Draining: true})
			return err
		},
		"SetQueueRate": func(q string) error {
			_, err := s.SetQueueRate(ctx, &pinlaterv1.SetQueueRateRequest{Queue: q, PerSecond: 0})
			return err
		},
		"SetDeadRetried(all)": func(q string) error {
			_, err := s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: q, All: true})
			return err
		},
		"SetDeadRetried(id)": func(q string) error {
			_, err := s.SetDeadRetried(ctx, &pinlaterv1.SetDeadRetriedRequest{Queue: q, Id: "t1"})
			return err
		},
	}
	names := []struct {
		name, queue string
		want        codes.Code
	}{
		{"empty", "", codes.InvalidArgument},
		{"blank", " ", codes.InvalidArgument},
		{"tab", "\t", codes.InvalidArgument},
		{"with a space", "fan out", codes.InvalidArgument},
		{"control character", "fan\x00out", codes.InvalidArgument},
		{"1 MB", strings.Repeat("q", 1<<20), codes.InvalidArgument},
		{"unknown", "no_such_queue", codes.NotFound},
	}
	got := map[string]codes.Code{}
	want := map[string]codes.Code{}
	for _, n := range names {
		for m, call := range methods {
			key := m + " " + n.name
			want[key] = n.want
			err := call(n.queue)
			got[key] = status.Code(err)
			if len(status.Convert(err).Message()) > 1024 {
				t.Errorf("%s: a message of %d bytes", key, len(status.Convert(err).Message()))
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
	// Nothing was set for the queue that does not exist.
	st, err := admin.Queue(ctx, pinlater.QueueBulk)
	if err != nil {
		t.Fatal(err)
	}
	rates, err := admin.Rates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rates["no_such_queue"]; ok || st.Paused {
		t.Errorf("settings left behind: rates %v", rates)
	}
	for _, q := range []string{"no_such_queue"} {
		if _, err := admin.Queue(ctx, q); !errors.Is(err, pinlater.ErrNotFound) {
			t.Errorf("Queue(%s) after the refusals: %v, want ErrNotFound (nothing created)", q, err)
		}
	}
	// A standard queue is a queue before it holds a task.
	q, err := s.SetQueuePaused(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: pinlater.QueueBulk, Paused: true})
	if err != nil || !q.GetPaused() {
		t.Fatalf("pause the empty standard queue bulk: %v, %v", q, err)
	}
}
