package pinlater

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"go.uber.org/zap/zaptest"
)

// memOutbox is a hand-written in-memory OutboxStore (zen.Outbox in production).
type memOutbox struct {
	mu   sync.Mutex
	rows map[string][]byte
	fail atomic.Bool // every call fails
}

func newMemOutbox() *memOutbox { return &memOutbox{rows: map[string][]byte{}} }

var errOutboxDown = errors.New("outbox store down")

func (m *memOutbox) Put(_ context.Context, key, value []byte) error {
	if m.fail.Load() {
		return errOutboxDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[string(key)] = append([]byte(nil), value...)
	return nil
}

func (m *memOutbox) Delete(_ context.Context, key []byte) error {
	if m.fail.Load() {
		return errOutboxDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, string(key))
	return nil
}

func (m *memOutbox) Range(_ context.Context, start, stop []byte, limit int, fn func(k, v []byte) error) error {
	if m.fail.Load() {
		return errOutboxDown
	}
	m.mu.Lock()
	var keys []string
	for k := range m.rows {
		if bytes.Compare([]byte(k), start) >= 0 && (stop == nil || bytes.Compare([]byte(k), stop) < 0) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = m.rows[k]
	}
	m.mu.Unlock()
	for i, k := range keys {
		if err := fn([]byte(k), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (m *memOutbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows)
}

// durableOn builds a DurableClient over c with a relay that looks at every row at once.
func durableOn(t *testing.T, c *Client, box OutboxStore) *DurableClient {
	t.Helper()
	d, err := NewDurableClient(c, box, DurableOptions{EnqueueTimeout: 300 * time.Millisecond,
		RelayBatch: 7, Logger: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	d.o.Grace = 0
	return d
}

// pinTask is a distinct pin-delete task (deduplicated by pin).
func pinTask(i int) *Task {
	return mustTask(NewPinDelete(PinDeletePayload{Pin: uint64(i + 1), Author: 7}))
}

// TestDurableSurvivesRedisLoss: tasks acknowledged by a DurableClient run, exactly as many as
// were acknowledged, when Redis (1) was down at enqueue time, (2) lost its data after taking
// them. Without the outbox, both sets are lost.
func TestDurableSurvivesRedisLoss(t *testing.T) {
	rp := testenv.StartRedis(t)
	opt := asynq.RedisClientOpt{Addr: rp.Addr()}
	log := zaptest.NewLogger(t)
	c, err := NewClient(opt, log, prometheus.NewRegistry(), WithNamespace("dur"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	box := newMemOutbox()
	d := durableOn(t, c, box)
	ctx := t.Context()

	// Redis up: taken inline.
	for i := range 10 {
		info, err := d.Enqueue(ctx, pinTask(i))
		if err != nil || info.Deferred {
			t.Fatalf("enqueue %d with Redis up: %+v, %v", i, info, err)
		}
	}
	// Redis loses everything it held (a restart without its data).
	adm, err := NewAdmin(opt, WithNamespace("dur"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	// Redis down: still acknowledged, deferred to the relay.
	rp.Kill()
	for i := 10; i < 20; i++ {
		info, err := d.Enqueue(ctx, pinTask(i))
		if err != nil || !info.Deferred {
			t.Fatalf("enqueue %d with Redis down: %+v, %v; want OK, deferred", i, info, err)
		}
	}
	if n, err := d.RelayOnce(ctx); err == nil {
		t.Fatalf("relay with Redis down: %d, nil; want an error", n)
	}
	rp.Start()
	if box.len() != 20 {
		t.Fatalf("outbox holds %d rows, want 20", box.len())
	}
	n, err := d.RelayOnce(ctx)
	if err != nil || n != 20 {
		t.Fatalf("relay = %d, %v; want all 20 re-enqueued", n, err)
	}
	// A second pass finds them all in Redis: nothing is enqueued twice.
	if n, err := d.RelayOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second relay = %d, %v; want 0", n, err)
	}

	var mu sync.Mutex
	ran := map[uint64]int{}
	srv, err := NewServer(Config{Redis: opt, Namespace: "dur", Concurrency: 4, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: time.Second, Outbox: box}, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.Handle(TypePinDelete, Typed(func(_ context.Context, p PinDeletePayload) error {
		mu.Lock()
		ran[p.Pin]++
		mu.Unlock()
		return nil
	}))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	testenv.WaitFor(t, 20*time.Second, "the outbox to empty", func() bool { return box.len() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 20 {
		t.Fatalf("%d distinct tasks ran, want 20", len(ran))
	}
	for pin, k := range ran {
		if k != 1 {
			t.Errorf("pin %d ran %d times, want once", pin, k)
		}
	}
}

// TestDurableRefusesWithoutOutbox: when the outbox write fails, Enqueue fails and Redis gets
// nothing (no acknowledgement without a durable record).
func TestDurableRefusesWithoutOutbox(t *testing.T) {
	e := newEnv(t)
	box := newMemOutbox()
	d := durableOn(t, e.client, box)
	box.fail.Store(true)
	if _, err := d.Enqueue(t.Context(), pinTask(1)); !errors.Is(err, errOutboxDown) {
		t.Fatalf("enqueue with the outbox down: %v, want its error", err)
	}
	qs, err := e.admin.Queue(t.Context(), QueueDefault)
	if err == nil && qs.Pending+qs.Scheduled > 0 {
		t.Fatalf("queue holds %+v after a refused enqueue", qs)
	}
}

// TestDurableDrainingRefused: a draining queue refuses the task, and nothing stays behind in
// the outbox for the relay to push in later.
func TestDurableDrainingRefused(t *testing.T) {
	e := newEnv(t)
	box := newMemOutbox()
	d := durableOn(t, e.client, box)
	task := pinTask(1)
	if err := e.admin.SetDraining(t.Context(), task.Policy().Queue, true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the client to see the queue draining", func() bool {
		draining, err := e.client.isDraining(t.Context(), task.Policy().Queue)
		return err == nil && draining
	})
	if _, err := d.Enqueue(t.Context(), task); !errors.Is(err, ErrQueueDraining) {
		t.Fatalf("enqueue to a draining queue: %v", err)
	}
	if box.len() != 0 {
		t.Fatalf("refused task left %d outbox rows", box.len())
	}
}

// TestDurableDeadTaskClearsRow: a task that fails for good leaves Redis's dead set as its record
// and its outbox row goes, so the relay does not resurrect it.
func TestDurableDeadTaskClearsRow(t *testing.T) {
	e := newEnv(t)
	box := newMemOutbox()
	d := durableOn(t, e.client, box)
	if _, err := d.Enqueue(t.Context(), pinTask(1), MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Outbox = box
	e.start(cfg, map[string]Handler{TypePinDelete: HandlerFunc(func(context.Context, *Task) error {
		return errors.New("always fails")
	})})
	testenv.WaitFor(t, 10*time.Second, "the row to go", func() bool { return box.len() == 0 })
	if n, err := d.RelayOnce(t.Context()); err != nil || n != 0 {
		t.Fatalf("relay after the task died = %d, %v; want 0", n, err)
	}
}

// TestClaimNamespace: the first deployment owns the namespace, a second one is refused (its
// tasks would run against the wrong store), and a takeover purges the old owner's queues.
func TestClaimNamespace(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if prev, err := e.admin.ClaimNamespace(ctx, "dep-a", false); err != nil || prev != "" {
		t.Fatalf("first claim = %q, %v", prev, err)
	}
	if _, err := e.admin.ClaimNamespace(ctx, "dep-a", false); err != nil {
		t.Fatalf("the owner's restart: %v", err)
	}
	if _, err := e.client.Enqueue(ctx, pinTask(1)); err != nil {
		t.Fatal(err)
	}
	prev, err := e.admin.ClaimNamespace(ctx, "dep-b", false)
	if !errors.Is(err, ErrNamespaceOwned) || prev != "dep-a" {
		t.Fatalf("second deployment: %q, %v; want ErrNamespaceOwned naming dep-a", prev, err)
	}
	if prev, err := e.admin.ClaimNamespace(ctx, "dep-b", true); err != nil || prev != "dep-a" {
		t.Fatalf("takeover = %q, %v", prev, err)
	}
	if qs, err := e.admin.Queue(ctx, QueueDefault); err == nil && qs.Pending != 0 {
		t.Errorf("takeover left %d of the old owner's tasks", qs.Pending)
	}
	if _, err := e.admin.ClaimNamespace(ctx, "dep-a", false); !errors.Is(err, ErrNamespaceOwned) {
		t.Errorf("old owner after the takeover: %v, want ErrNamespaceOwned", err)
	}
}

// doneOutbox is a memOutbox that also deletes finished rows lazily (zen.Outbox's DeleteDone),
// counting which delete the server used.
type doneOutbox struct {
	*memOutbox
	deletes, done atomic.Int64
}

func (d *doneOutbox) Delete(ctx context.Context, key []byte) error {
	d.deletes.Add(1)
	return d.memOutbox.Delete(ctx, key)
}

func (d *doneOutbox) DeleteDone(ctx context.Context, key []byte) error {
	d.done.Add(1)
	return d.memOutbox.Delete(ctx, key)
}

// TestDoneRowDeletedLazily: the server removes a finished task's row with DeleteDone when the
// outbox has it (no fsync wait holds the task's slot), and only then.
func TestDoneRowDeletedLazily(t *testing.T) {
	e := newEnv(t)
	box := &doneOutbox{memOutbox: newMemOutbox()}
	d := durableOn(t, e.client, box)
	for i := range 3 {
		if _, err := d.Enqueue(t.Context(), pinTask(i)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.Outbox = box
	e.start(cfg, map[string]Handler{TypePinDelete: HandlerFunc(func(context.Context, *Task) error { return nil })})
	testenv.WaitFor(t, 10*time.Second, "the rows to go", func() bool { return box.len() == 0 })
	if got, del := box.done.Load(), box.deletes.Load(); got != 3 || del != 0 {
		t.Fatalf("finished rows removed with DeleteDone %d times and Delete %d times, want 3 and 0", got, del)
	}
}
