package queueadmin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// TestOnRedis runs the server over a real pinlater.Admin: a task is enqueued and archived (dead),
// listed as dead, retried back to pending; its queue is paused and resumed.
func TestOnRedis(t *testing.T) {
	addr := testenv.Redis(t)
	ctx := t.Context()
	ns := fmt.Sprintf("queueadmintest%d", time.Now().UnixNano())
	r := pinlater.RedisAddr(addr)
	admin, err := pinlater.NewAdmin(r, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	t.Cleanup(func() { _ = admin.Purge(context.Background()) })
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
