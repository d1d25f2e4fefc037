package pinlater

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
)

// TestAsynqLayoutContract holds asynqlayout.go to the asynq of go.mod, against a real Redis: what
// it reads of asynq's private layout agrees with what asynq's public API (Client, Inspector) says
// of the same tasks and queues. An asynq upgrade that moves a key fails here. (The lease and
// active keys of the reclaimer are checked with a real worker killed mid-task by
// TestOrphanReclaimed.)
func TestAsynqLayoutContract(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	k := e.client.keys
	q := QueueDefault
	phys := k.queue(q)
	ac := asynq.NewClient(e.opt)
	defer ac.Close()
	insp := asynq.NewInspector(e.opt)
	defer insp.Close()

	// The pause mark of a queue that never held a task: Inspector does not see the queue.
	if err := insp.PauseQueue(phys); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.GetQueueInfo(phys); !queueNotFound(err) {
		t.Errorf("GetQueueInfo of a paused queue without tasks: %v; the pause-mark read is needed only while it is not found", err)
	}
	if paused, err := k.asynqPausedMark(ctx, e.rdb, q); err != nil || !paused {
		t.Errorf("pause mark after Inspector.PauseQueue: %v, %v; want set", paused, err)
	}
	if err := insp.UnpauseQueue(phys); err != nil {
		t.Fatal(err)
	}
	if paused, err := k.asynqPausedMark(ctx, e.rdb, q); err != nil || paused {
		t.Errorf("pause mark after Inspector.UnpauseQueue: %v, %v; want unset", paused, err)
	}

	// Tasks in every state asynq keeps, and gone ones: asynqTasksExist agrees with GetTaskInfo.
	enqueue := func(id string, opts ...asynq.Option) {
		t.Helper()
		opts = append(opts, asynq.Queue(phys), asynq.TaskID(id))
		if _, err := ac.Enqueue(asynq.NewTask("layout", nil), opts...); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("pending")
	enqueue("scheduled", asynq.ProcessIn(time.Hour))
	enqueue("archived")
	if err := insp.ArchiveTask(phys, "archived"); err != nil {
		t.Fatal(err)
	}
	enqueue("deleted")
	if err := insp.DeleteTask(phys, "deleted"); err != nil {
		t.Fatal(err)
	}
	ids := []string{"pending", "scheduled", "archived", "deleted", "never"}
	refs := make([]asynqTaskRef, len(ids))
	for i, id := range ids {
		refs[i] = asynqTaskRef{queue: q, id: id}
	}
	got, err := k.asynqTasksExist(ctx, e.rdb, refs)
	if err != nil {
		t.Fatal(err)
	}
	var want []bool
	for _, id := range ids {
		_, err := insp.GetTaskInfo(phys, id)
		if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Fatal(err)
		}
		want = append(want, err == nil)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tasks held (ids %v; -Inspector.GetTaskInfo +asynqTasksExist):\n%s", ids, d)
	}
	if !slices.Equal(want, []bool{true, true, true, false, false}) {
		t.Errorf("Inspector.GetTaskInfo found %v of %v: the test's setup did not make the states it means to", want, ids)
	}

	// The queue's keys: its pending list and task hashes are where the layout says, and its
	// pattern (what Purge deletes) matches them; asynq lists the queue where Purge looks.
	pattern := asynqQueuePattern(phys)
	matched, err := e.rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.asynqQ(q).pending(), k.asynqQ(q).task("pending"), k.asynqQ(q).task("archived")} {
		if !slices.Contains(matched, key) {
			t.Errorf("key %s: not among the queue's keys %v", key, matched)
		}
	}
	if in, err := e.rdb.SIsMember(ctx, asynqAllQueues, phys).Result(); err != nil || !in {
		t.Errorf("queue %s in %s: %v, %v; want listed", phys, asynqAllQueues, in, err)
	}
	if err := e.admin.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := e.rdb.Keys(ctx, pattern).Result(); err != nil || len(left) != 0 {
		t.Errorf("keys of the queue after Purge: %v, %v", left, err)
	}
	if qs, err := insp.Queues(); err != nil || slices.Contains(qs, phys) {
		t.Errorf("Inspector.Queues after Purge: %v, %v; want without %s", qs, err, phys)
	}
}
