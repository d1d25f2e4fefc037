package pinlater

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

func respaceTask(tb testing.TB, board uint64) *Task {
	return mustTask(NewRespace(RespacePayload{Board: board}))
}

func TestRetryThenSuccess(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	done := make(chan struct{})
	e.start(e.config(), map[string]Handler{TypeRespace: Typed(func(ctx context.Context, p RespacePayload) error {
		n := runs.Add(1)
		if n <= 2 {
			return RetryAfter(errors.New("store busy"), 100*time.Millisecond)
		}
		close(done)
		return nil
	})})
	if _, err := e.client.Enqueue(t.Context(), respaceTask(t, 7)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("task did not succeed; runs = %d", runs.Load())
	}
	testenv.WaitFor(t, 5*time.Second, "processed counter", func() bool {
		return value(t, e.client.m.processed.WithLabelValues(QueueDefault, TypeRespace)) == 1
	})
	if got := value(t, e.client.m.retried.WithLabelValues(QueueDefault, TypeRespace)); got != 2 {
		t.Errorf("retried = %v, want 2", got)
	}
	if got := value(t, e.client.m.archived.WithLabelValues(QueueDefault, TypeRespace)); got != 0 {
		t.Errorf("archived = %v, want 0", got)
	}
	st, err := e.admin.Queue(t.Context(), QueueDefault)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 || st.Retry != 0 || st.Pending != 0 {
		t.Errorf("queue after success: %+v", st)
	}
}

func TestAttemptNumbersAndBackoffPolicy(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var got []int
	done := make(chan struct{})
	e.start(e.config(), map[string]Handler{TypeUserDelete: HandlerFunc(func(ctx context.Context, tk *Task) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, tk.Attempt())
		if tk.Attempt() < 3 {
			return RetryAfter(errors.New("not yet"), 0)
		}
		close(done)
		return nil
	})})
	if _, err := e.client.Enqueue(t.Context(), mustTask(NewUserDelete(UserDeletePayload{User: 5}))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]int{1, 2, 3}, got); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
}

func TestExhaustionToDeadAndRetryDead(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	var heal atomic.Bool
	healed := make(chan struct{})
	e.start(e.config(), map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		if heal.Load() {
			close(healed)
			return nil
		}
		return RetryAfter(errors.New("board is corrupt"), 0)
	})})
	info, err := e.client.Enqueue(t.Context(), respaceTask(t, 9), MaxAttempts(3))
	if err != nil {
		t.Fatal(err)
	}
	var dead []DeadTask
	testenv.WaitFor(t, 20*time.Second, "task to die", func() bool {
		dead, err = e.admin.DeadTasks(t.Context(), QueueDefault, 1, 10)
		return err == nil && len(dead) == 1
	})
	if got := runs.Load(); got != 3 {
		t.Errorf("runs before death = %d, want 3 (MaxAttempts)", got)
	}
	d := dead[0]
	if d.ID != info.ID || d.Type != TypeRespace || d.Attempts != 3 || d.LastErr == "" {
		t.Errorf("dead task = %+v (want id %s, 3 attempts, an error)", d, info.ID)
	}
	if got := value(t, e.client.m.archived.WithLabelValues(QueueDefault, TypeRespace)); got != 1 {
		t.Errorf("archived counter = %v, want 1", got)
	}
	ts, err := e.admin.Task(t.Context(), QueueDefault, info.ID)
	if err != nil || ts.State != "archived" {
		t.Fatalf("Task() = %+v, %v; want state archived", ts, err)
	}
	// While it is dead its deduplication ID is taken: a new enqueue is reported as a duplicate.
	dup, err := e.client.Enqueue(t.Context(), respaceTask(t, 9))
	if err != nil || !dup.Duplicate {
		t.Fatalf("enqueue while dead = %+v, %v; want Duplicate", dup, err)
	}
	heal.Store(true)
	if err := e.admin.RetryDead(t.Context(), QueueDefault, info.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-healed:
	case <-time.After(10 * time.Second):
		t.Fatal("retried dead task did not run")
	}
	if err := e.admin.RetryDead(t.Context(), QueueDefault, "no-such-task"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RetryDead(unknown) = %v, want ErrNotFound", err)
	}
}

func TestDeleteDead(t *testing.T) {
	e := newEnv(t)
	e.start(e.config(), map[string]Handler{TypePinDelete: HandlerFunc(func(ctx context.Context, tk *Task) error {
		return errors.New("always")
	})})
	for pin := uint64(1); pin <= 3; pin++ {
		if _, err := e.client.Enqueue(t.Context(), mustTask(NewPinDelete(PinDeletePayload{Pin: pin, Author: 1})), MaxAttempts(1)); err != nil {
			t.Fatal(err)
		}
	}
	var dead []DeadTask
	testenv.WaitFor(t, 10*time.Second, "3 dead tasks", func() bool {
		dead, _ = e.admin.DeadTasks(t.Context(), QueueDefault, 1, 10)
		return len(dead) == 3
	})
	if err := e.admin.DeleteTask(t.Context(), QueueDefault, dead[0].ID); err != nil {
		t.Fatal(err)
	}
	n, err := e.admin.DeleteAllDead(t.Context(), QueueDefault)
	if err != nil || n != 2 {
		t.Fatalf("DeleteAllDead = %d, %v; want 2", n, err)
	}
	st, err := e.admin.Queue(t.Context(), QueueDefault)
	if err != nil || st.Dead != 0 {
		t.Fatalf("queue = %+v, %v; want no dead tasks", st, err)
	}
}

func TestInvalidPayloadGoesStraightToDead(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	e.start(e.config(), map[string]Handler{TypeRespace: Typed(func(ctx context.Context, p RespacePayload) error {
		runs.Add(1)
		return nil
	})})
	// A producer that bypasses the constructors (plain asynq) with a zero board ID and a bad version.
	ac := asynq.NewClient(e.opt)
	defer ac.Close()
	for _, body := range []string{`{"v":1,"board":0}`, `{"v":2,"board":5}`, `not json`} {
		if _, err := ac.Enqueue(asynq.NewTask(TypeRespace, []byte(body)), asynq.Queue(e.client.keys.queue(QueueDefault)), asynq.MaxRetry(5)); err != nil {
			t.Fatal(err)
		}
	}
	// And a type nobody handles.
	if _, err := ac.Enqueue(asynq.NewTask("no-such-type", nil), asynq.Queue(e.client.keys.queue(QueueDefault)), asynq.MaxRetry(5)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "4 dead tasks", func() bool {
		d, _ := e.admin.DeadTasks(t.Context(), QueueDefault, 1, 10)
		return len(d) == 4
	})
	if runs.Load() != 0 {
		t.Errorf("handler ran %d times on invalid payloads", runs.Load())
	}
	d, _ := e.admin.DeadTasks(t.Context(), QueueDefault, 1, 10)
	for _, x := range d {
		if x.Attempts != 1 {
			t.Errorf("dead task %s (%s) had %d attempts, want 1 (no retry for bad input)", x.ID, x.Payload, x.Attempts)
		}
	}
}

func TestPanicIsRecoveredAndRetried(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	done := make(chan struct{})
	e.start(e.config(), map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		if runs.Add(1) == 1 {
			panic("handler bug")
		}
		close(done)
		return nil
	})})
	if _, err := e.client.Enqueue(t.Context(), respaceTask(t, 3)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("task not retried after panic; runs = %d", runs.Load())
	}
	if got := value(t, e.client.m.panics.WithLabelValues(QueueDefault, TypeRespace)); got != 1 {
		t.Errorf("panics counter = %v, want 1", got)
	}
}

// TestDuplicateDelivery: the same logical task enqueued many times at once (a producer retrying,
// two feed servers materializing the same chunk) is enqueued once and runs once.
func TestDuplicateDelivery(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	e.start(e.config(), map[string]Handler{TypeMaterialize: Typed(func(ctx context.Context, p MaterializePayload) error {
		runs.Add(1)
		// sleep: a run lasts 100 ms, so the duplicates meet the task still queued or running.
		time.Sleep(100 * time.Millisecond)
		return nil
	})})
	p := MaterializePayload{User: 42, ChunkID: "c-1", Pins: []MaterializedPin{{Pin: 1, Source: 1, Score: 0.5}}}
	var wg sync.WaitGroup
	var enq, dups atomic.Int32
	for range 10 {
		wg.Go(func() {
			info, err := e.client.Enqueue(context.Background(), mustTask(NewMaterialize(p)))
			if err != nil {
				t.Error(err)
				return
			}
			if info.Duplicate {
				dups.Add(1)
			} else {
				enq.Add(1)
			}
		})
	}
	wg.Wait()
	if enq.Load() != 1 || dups.Load() != 9 {
		t.Fatalf("enqueued %d, duplicates %d; want 1 and 9", enq.Load(), dups.Load())
	}
	testenv.WaitFor(t, 10*time.Second, "one run", func() bool { return runs.Load() == 1 })
	// While the run is finishing, more duplicates are still dropped; a second chunk is not.
	p2 := p
	p2.ChunkID = "c-2"
	if info, err := e.client.Enqueue(t.Context(), mustTask(NewMaterialize(p2))); err != nil || info.Duplicate {
		t.Fatalf("different chunk: %+v, %v", info, err)
	}
	testenv.WaitFor(t, 10*time.Second, "second chunk", func() bool { return runs.Load() == 2 })
	e.waitQueueEmpty(t, QueueCritical)
	if got := runs.Load(); got != 2 {
		t.Errorf("runs = %d, want 2", got)
	}
	if got := value(t, e.client.m.duplicates.WithLabelValues(QueueCritical, TypeMaterialize)); got != 9 {
		t.Errorf("duplicate counter = %v, want 9", got)
	}
}

func TestPauseAndResume(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	e.start(e.config(), map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		return nil
	})})
	ctx := t.Context()
	// Rate 0 pauses the queue.
	if err := e.admin.SetRate(ctx, QueueDefault, 0); err != nil {
		t.Fatal(err)
	}
	for b := uint64(1); b <= 5; b++ {
		if _, err := e.client.Enqueue(ctx, respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.admin.Queue(ctx, QueueDefault)
	if err != nil || !st.Paused || st.Rate != 0 {
		t.Fatalf("after rate 0: %+v, %v; want paused, rate 0", st, err)
	}
	// sleep: 20 polls' time (50 ms each) in which the paused queue must run nothing.
	time.Sleep(time.Second)
	if got := runs.Load(); got != 0 {
		t.Fatalf("%d tasks ran while paused", got)
	}
	if st, _ := e.admin.Queue(ctx, QueueDefault); st.Pending != 5 {
		t.Fatalf("pending while paused = %d, want 5", st.Pending)
	}
	// A positive rate resumes.
	if err := e.admin.SetRate(ctx, QueueDefault, 1000); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "5 runs after resume", func() bool { return runs.Load() == 5 })

	// Pause/Resume proper.
	if err := e.admin.Pause(ctx, QueueDefault); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Pause(ctx, QueueDefault); err != nil {
		t.Fatalf("pausing twice: %v", err)
	}
	if _, err := e.client.Enqueue(ctx, respaceTask(t, 6)); err != nil {
		t.Fatal(err)
	}
	// sleep: 10 polls' time (50 ms each) in which the paused queue must run nothing.
	time.Sleep(500 * time.Millisecond)
	if got := runs.Load(); got != 5 {
		t.Fatalf("runs while paused = %d, want 5", got)
	}
	if err := e.admin.Resume(ctx, QueueDefault); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "run after resume", func() bool { return runs.Load() == 6 })
}

// TestRateLimitHeld checks the limit on counts: with the limiter's clock frozen, exactly the burst
// runs however often the deferred tasks come back; each advance of the clock by one second lets
// exactly `rate` more run.
func TestRateLimitHeld(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var clockMs atomic.Int64
	clockMs.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	const rate, total = 4, 12
	if err := e.admin.SetRate(ctx, QueueDefault, rate); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	cfg := e.config()
	cfg.Clock = func() time.Time { return time.UnixMilli(clockMs.Load()) }
	// Two servers: the bucket is shared through Redis, not per process.
	h := map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		return nil
	})}
	e.start(cfg, h)
	e.start(cfg, h)
	for b := uint64(1); b <= total; b++ {
		if _, err := e.client.Enqueue(ctx, respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	deferred := func() float64 { return value(t, e.client.m.deferred.WithLabelValues(QueueDefault, TypeRespace)) }
	// Wait until every deferred task has come back at least once more and been refused again.
	testenv.WaitFor(t, 30*time.Second, "deferred tasks to cycle twice", func() bool { return deferred() >= 2*(total-rate) })
	if got := runs.Load(); got != rate {
		t.Fatalf("runs with the clock frozen = %d, want the burst %d", got, rate)
	}
	for step := 1; step <= (total-rate)/rate; step++ {
		clockMs.Add(1000)
		want := int32(rate * (step + 1))
		testenv.WaitFor(t, 30*time.Second, "runs after a clock step", func() bool { return runs.Load() >= want })
		base := deferred()
		if step < (total-rate)/rate {
			testenv.WaitFor(t, 30*time.Second, "another cycle", func() bool { return deferred() >= base+float64(total)-float64(want) })
		}
		if got := runs.Load(); got != want {
			t.Fatalf("after %d s: runs = %d, want %d", step, got, want)
		}
	}
	st, err := e.admin.Queue(ctx, QueueDefault)
	if err != nil || st.Dead != 0 {
		t.Fatalf("queue = %+v, %v: rate limiting must never kill tasks", st, err)
	}
}

// TestRateChangeIsLive: lifting a rate limit takes effect on running servers without restart.
func TestRateChangeIsLive(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var clockMs atomic.Int64
	clockMs.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	if err := e.admin.SetRate(ctx, QueueDefault, 1); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	cfg := e.config()
	cfg.Clock = func() time.Time { return time.UnixMilli(clockMs.Load()) }
	cfg.RateHorizon = 500 * time.Millisecond // no reservations beyond the first
	e.start(cfg, map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		return nil
	})})
	for b := uint64(1); b <= 6; b++ {
		if _, err := e.client.Enqueue(ctx, respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "deferrals", func() bool {
		return value(t, e.client.m.deferred.WithLabelValues(QueueDefault, TypeRespace)) >= 10
	})
	if got := runs.Load(); got != 1 {
		t.Fatalf("runs at rate 1 with a frozen clock = %d, want 1", got)
	}
	rates, err := e.admin.Rates(ctx)
	if err != nil || rates[QueueDefault] != 1 {
		t.Fatalf("Rates = %v, %v", rates, err)
	}
	if err := e.admin.SetRate(ctx, QueueDefault, -1); err != nil { // unlimited
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "all runs once unlimited", func() bool { return runs.Load() == 6 })
}

// TestShutdownMidTaskLosesNothing: a task still running when Shutdown's timeout ends is handed
// back and completed by the next server.
func TestShutdownMidTaskLosesNothing(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{}, 1)
	var firstCancelled atomic.Bool
	cfg := e.config()
	cfg.ShutdownTimeout = 500 * time.Millisecond
	s1 := e.start(cfg, map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		started <- struct{}{}
		<-ctx.Done() // long work, interrupted by shutdown
		firstCancelled.Store(true)
		return ctx.Err()
	})})
	info, err := e.client.Enqueue(t.Context(), respaceTask(t, 77))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("task did not start")
	}
	s1.Shutdown()
	testenv.WaitFor(t, 5*time.Second, "handler context cancelled by shutdown", firstCancelled.Load)
	ts, err := e.admin.Task(t.Context(), QueueDefault, info.ID)
	if err != nil || ts.State != "pending" {
		t.Fatalf("after shutdown the task is %+v, %v; want pending (handed back)", ts, err)
	}
	var runs atomic.Int32
	e.start(e.config(), map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		return nil
	})})
	testenv.WaitFor(t, 10*time.Second, "task completed by the second server", func() bool { return runs.Load() == 1 })
	testenv.WaitFor(t, 5*time.Second, "queue empty", func() bool {
		st, err := e.admin.Queue(t.Context(), QueueDefault)
		return err == nil && st.Pending+st.Active+st.Retry+st.Dead == 0
	})
}

// TestServerDrainFinishesInFlight: Drain stops taking tasks but lets the running one finish.
func TestServerDrainFinishesInFlight(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	var done atomic.Int32
	cfg := e.config()
	cfg.Concurrency = 1
	s := e.start(cfg, map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		started <- struct{}{}
		<-release
		done.Add(1)
		return nil
	})})
	for b := uint64(1); b <= 3; b++ {
		if _, err := e.client.Enqueue(t.Context(), respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	s.Drain()
	close(release)
	testenv.WaitFor(t, 5*time.Second, "in-flight task done", func() bool { return done.Load() == 1 })
	// sleep: 10 polls' time (50 ms each) in which the draining server must take no task.
	time.Sleep(500 * time.Millisecond)
	if got := done.Load(); got != 1 {
		t.Fatalf("a draining server ran %d tasks, want only the in-flight 1", got)
	}
	st, err := e.admin.Queue(t.Context(), QueueDefault)
	if err != nil || st.Pending != 2 {
		t.Fatalf("queue = %+v, %v; want 2 pending", st, err)
	}
}

// TestQueueDrainMode: a draining queue refuses enqueues while the workers empty it.
func TestQueueDrainMode(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var runs atomic.Int32
	for b := uint64(1); b <= 4; b++ {
		if _, err := e.client.Enqueue(ctx, respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.admin.SetDraining(ctx, QueueDefault, true); err != nil {
		t.Fatal(err)
	}
	// The client's copy of the drain set, taken by the enqueues above, is refreshed within its
	// drain-check interval (50 ms here).
	testenv.WaitFor(t, testenv.WaitTimeout, "the client to see the queue draining", func() bool {
		draining, err := e.client.isDraining(ctx, QueueDefault)
		return err == nil && draining
	})
	_, err := e.client.Enqueue(ctx, respaceTask(t, 99))
	if !errors.Is(err, ErrQueueDraining) {
		t.Fatalf("enqueue to a draining queue: %v, want ErrQueueDraining", err)
	}
	// Other queues still take tasks.
	if _, err := e.client.Enqueue(ctx, mustTask(NewMaterialize(MaterializePayload{User: 1, ChunkID: "x"}))); err != nil {
		t.Fatalf("enqueue to critical: %v", err)
	}
	e.start(e.config(), map[string]Handler{
		TypeRespace:     HandlerFunc(func(ctx context.Context, tk *Task) error { runs.Add(1); return nil }),
		TypeMaterialize: HandlerFunc(func(ctx context.Context, tk *Task) error { return nil }),
	})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.admin.WaitDrained(wctx, QueueDefault, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := runs.Load(); got != 4 {
		t.Errorf("runs = %d, want the 4 enqueued before draining", got)
	}
	st, err := e.admin.Queue(ctx, QueueDefault)
	if err != nil || !st.Draining {
		t.Fatalf("queue = %+v, %v; want draining", st, err)
	}
	if err := e.admin.SetDraining(ctx, QueueDefault, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the client to see drain mode lifted", func() bool {
		draining, err := e.client.isDraining(ctx, QueueDefault)
		return err == nil && !draining
	})
	if _, err := e.client.Enqueue(ctx, respaceTask(t, 100)); err != nil {
		t.Fatalf("enqueue after drain mode lifted: %v", err)
	}
	if got := value(t, e.client.m.rejected.WithLabelValues(QueueDefault, TypeRespace)); got != 1 {
		t.Errorf("rejected counter = %v, want 1", got)
	}
}

func TestPriorityStrict(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// Fill the fanout queue first, then one critical task; with strict priority and one slot the
	// critical task runs before every remaining fanout task.
	for pin := uint64(1); pin <= 5; pin++ {
		if _, err := e.client.Enqueue(ctx, mustTask(NewFanout(FanoutPayload{Pin: pin, Author: 1, Board: 2, CreatedMs: 1}))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.Enqueue(ctx, mustTask(NewMaterialize(MaterializePayload{User: 1, ChunkID: "c"}))); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	rec := HandlerFunc(func(ctx context.Context, tk *Task) error {
		mu.Lock()
		order = append(order, tk.Type())
		mu.Unlock()
		return nil
	})
	cfg := e.config()
	cfg.Concurrency = 1
	cfg.StrictPriority = true
	e.start(cfg, map[string]Handler{TypeFanout: rec, TypeMaterialize: rec})
	testenv.WaitFor(t, 10*time.Second, "6 runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 6 })
	if order[0] != TypeMaterialize {
		t.Errorf("order = %v, want materialize first", order)
	}
}

func TestQueuesListing(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.client.Enqueue(ctx, respaceTask(t, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, respaceTask(t, 2), InQueue("custom")); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.SetRate(ctx, QueueFanout, 2.5); err != nil {
		t.Fatal(err)
	}
	qs, err := e.admin.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name    string
		Pending int
		Rate    float64
	}
	var got []row
	for _, q := range qs {
		got = append(got, row{q.Name, q.Pending, q.Rate})
	}
	want := []row{{QueueCritical, 0, -1}, {QueueDefault, 1, -1}, {QueueFanout, 0, 2.5}, {QueueBulk, 0, -1}, {"custom", 1, -1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("queues (-want +got):\n%s", diff)
	}
	// The Prometheus collector reports the same.
	if n := len(collect(e.admin.Collector(), "pinlater_queue_size")); n != 5*5 {
		t.Errorf("queue size series = %d, want 25", n)
	}
}

// TestDeadlines: a run's context carries the enqueue-time timeout, else the type's policy.
func TestDeadlines(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	left := map[uint64]time.Duration{}
	e.start(e.config(), map[string]Handler{TypeRespace: Typed(func(ctx context.Context, p RespacePayload) error {
		dl, ok := ctx.Deadline()
		if !ok {
			return SkipRetry
		}
		mu.Lock()
		left[p.Board] = time.Until(dl)
		mu.Unlock()
		return nil
	})})
	ctx := t.Context()
	for b, opts := range map[uint64][]Option{1: nil, 2: {Timeout(300 * time.Millisecond)}, 3: {Timeout(20 * time.Minute)}} {
		if _, err := e.client.Enqueue(ctx, respaceTask(t, b), opts...); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "3 runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(left) == 3 })
	pol, _ := DefaultPolicy(TypeRespace)
	for b, want := range map[uint64]time.Duration{1: pol.Timeout, 2: 300 * time.Millisecond, 3: 20 * time.Minute} {
		if got := left[b]; got > want || got < want-5*time.Second/2 && want > 5*time.Second || got <= 0 {
			t.Errorf("board %d: %v left of the deadline, want just under %v", b, got, want)
		}
	}
}

// TestDequeuersShareSlots: the Concurrency slots are split over the Dequeuers processors, so
// with 3 slots over 2 of them exactly 3 tasks run at once, and every task runs once.
func TestDequeuersShareSlots(t *testing.T) {
	e := newEnv(t)
	var running, most, runs atomic.Int32
	release := make(chan struct{})
	cfg := e.config()
	cfg.Concurrency = 3
	cfg.Dequeuers = 2
	e.start(cfg, map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		running.Add(-1)
		runs.Add(1)
		return nil
	})})
	for b := uint64(1); b <= 7; b++ {
		if _, err := e.client.Enqueue(t.Context(), respaceTask(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "3 tasks running", func() bool { return running.Load() == 3 })
	// sleep: 6 polls' time (50 ms each) in which a fourth slot would take one of the 4 pending tasks.
	time.Sleep(300 * time.Millisecond)
	if got := most.Load(); got != 3 {
		t.Fatalf("%d tasks ran at once, want the 3 slots", got)
	}
	// Two asynq servers (processors) in Redis' registry, of 2 and 1 slots, each serving every
	// queue.
	in := asynq.NewInspector(e.opt)
	defer in.Close()
	var slots []int
	testenv.WaitFor(t, 10*time.Second, "2 processors registered", func() bool {
		all, err := in.Servers()
		if err != nil {
			return false
		}
		slots = slots[:0]
		for _, si := range all {
			if _, ours := si.Queues[e.client.keys.queue(QueueDefault)]; ours {
				if len(si.Queues) != len(DefaultQueueWeights()) {
					t.Errorf("processor serves %v, want every queue", si.Queues)
				}
				slots = append(slots, si.Concurrency)
			}
		}
		return len(slots) == 2
	})
	slices.Sort(slots)
	if d := cmp.Diff([]int{1, 2}, slots); d != "" {
		t.Errorf("processors' slots (-want +got):\n%s", d)
	}
	close(release)
	testenv.WaitFor(t, 10*time.Second, "7 runs", func() bool { return runs.Load() == 7 })
	e.waitQueueEmpty(t, QueueDefault)
	if got := runs.Load(); got != 7 {
		t.Errorf("%d runs of 7 tasks, want each once", got)
	}
}
