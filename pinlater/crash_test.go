package pinlater

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/smartfeed/smartfeed/internal/testenv"
)

// The crash test re-executes the test binary as a worker process: TestMain sees crashChildEnv and
// runs runCrashChild instead of the tests.
const (
	crashChildEnv = "PINLATER_CRASH_CHILD" // namespace to serve
	crashAddrEnv  = "PINLATER_CRASH_ADDR"
)

func crashStartedKey(ns string) string { return "pinlater:" + ns + ":test:started" }

// runCrashChild serves the namespace with a handler that records that it started and then works
// forever, until the parent kills the process.
func runCrashChild() int {
	ns, addr := os.Getenv(crashChildEnv), os.Getenv(crashAddrEnv)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: testDB})
	s, err := NewServer(Config{Redis: asynq.RedisClientOpt{Addr: addr, DB: testDB}, Namespace: ns, Concurrency: 1,
		PollInterval: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	s.HandleFunc(TypeRespace, func(ctx context.Context, t *Task) error {
		rdb.Incr(ctx, crashStartedKey(ns))
		<-ctx.Done() // never returns on its own
		return ctx.Err()
	})
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	return 0
}

// TestKill9MidTask: a worker process is killed with SIGKILL in the middle of a task; the task's
// lease expires, a fresh server's recoverer puts it back, and it runs to completion.
func TestKill9MidTask(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	id, leaseEnd := killChildMidTask(t, e, 4242)
	killed := time.Now()

	// asynq's recoverer requeues tasks whose lease expired more than 30 s ago; it runs when a
	// server starts and then every minute. The fresh servers start once that point has passed:
	// the lease recorded in Redis is moved back to end 31 s ago, which is what a minute of
	// waiting would leave (a dead worker's lease is never extended, and asynq's 30 s lease
	// length is a constant), so the test does not depend on the recoverer's phase.
	t.Logf("killed; lease expires %v after the kill; moved back to 31s ago", leaseEnd.Sub(killed).Round(time.Second))
	// Nothing runs it in the meantime: the task stays active, owned by a dead process.
	endLease(t, e, id, time.Now().Add(-31*time.Second))

	var runs atomic.Int32
	var attempt atomic.Int32
	h := HandlerFunc(func(ctx context.Context, tk *Task) error {
		p, err := Decode[RespacePayload](tk)
		if err != nil || p.Board != 4242 {
			return fmt.Errorf("wrong payload %+v: %v", p, err)
		}
		attempt.Store(int32(tk.Attempt()))
		runs.Add(1)
		return nil
	})
	// Two fresh servers, as after a restart of a worker fleet: still exactly one run. Without
	// the reclaimer: this is asynq's own recovery (TestOrphanReclaimed is the reclaimer's).
	cfg := e.config()
	cfg.ReclaimAfter = -1
	s1 := e.start(cfg, map[string]Handler{TypeRespace: h})
	e.start(cfg, map[string]Handler{TypeRespace: h})
	testenv.WaitFor(t, 60*time.Second, "the task to complete after the kill", func() bool { return runs.Load() >= 1 })
	e.waitQueueEmpty(t, QueueDefault)
	if got := runs.Load(); got != 1 {
		t.Errorf("runs after recovery = %d, want 1", got)
	}
	if got := attempt.Load(); got != 2 {
		t.Errorf("attempt of the recovered run = %d, want 2 (the killed run counts)", got)
	}
	if got := value(t, s1.m.orphaned.WithLabelValues("unknown", TypeRespace)); got != 1 {
		t.Errorf("orphaned runs counted = %v, want 1 (the killed worker's run, logged)", got)
	}
	if n, _ := e.rdb.Get(ctx, crashStartedKey(e.ns)).Int(); n != 1 {
		t.Errorf("child runs = %d, want 1", n)
	}
	st, err := e.admin.Queue(ctx, QueueDefault)
	if err != nil || st.Pending+st.Active+st.Retry+st.Dead != 0 {
		t.Fatalf("queue after recovery = %+v, %v; want empty", st, err)
	}
	t.Logf("recovered and completed %v after the kill", time.Since(killed).Round(time.Second))
}

// killChildMidTask enqueues a respace task, lets a child worker process start it and kills the
// child with SIGKILL: the task stays active in Redis, held by no live worker, its lease running
// out. It returns the task's ID and the end of its lease.
func killChildMidTask(t *testing.T, e *env, board uint64) (string, time.Time) {
	t.Helper()
	ctx := t.Context()
	info, err := e.client.Enqueue(ctx, respaceTask(t, board), MaxAttempts(3))
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+e.ns, crashAddrEnv+"="+e.opt.Addr)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	testenv.WaitFor(t, 30*time.Second, "the child to start the task", func() bool {
		n, _ := e.rdb.Get(ctx, crashStartedKey(e.ns)).Int()
		return n == 1
	})
	if ts, err := e.admin.Task(ctx, QueueDefault, info.ID); err != nil || ts.State != "active" {
		t.Fatalf("task before the kill = %+v, %v; want active", ts, err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	exp, err := e.rdb.ZScore(ctx, e.client.keys.asynqQ(QueueDefault).lease(), info.ID).Result()
	if err != nil {
		t.Fatalf("lease of the killed task: %v", err)
	}
	return info.ID, time.Unix(int64(exp), 0)
}

// endLease makes the lease of the killed worker's task id end at `at` instead: what waiting for
// asynq's 30 s lease to run out would leave in Redis, since no live worker extends it. The task
// stays active, held by no one.
func endLease(t *testing.T, e *env, id string, at time.Time) {
	t.Helper()
	n, err := e.rdb.ZAddArgs(t.Context(), e.client.keys.asynqQ(QueueDefault).lease(),
		redis.ZAddArgs{XX: true, Ch: true, Members: []redis.Z{{Score: float64(at.Unix()), Member: id}}}).Result()
	if err != nil || n != 1 {
		t.Fatalf("move the lease of %s: %d changed, %v; want 1", id, n, err)
	}
	if ts, err := e.admin.Task(t.Context(), QueueDefault, id); err != nil || ts.State != "active" {
		t.Fatalf("task after its lease was moved = %+v, %v; want active", ts, err)
	}
}

// TestOrphanReclaimed: a task whose worker died (or whose dequeue's answer Redis never sent, as
// when Redis is killed) is taken back by the reclaimer ReclaimAfter after its lease ends, not
// asynq's 60–120 s; never while its lease runs; not more than reclaimMax times; and it runs once
// more, not counted as a failed attempt.
func TestOrphanReclaimed(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	id, leaseEnd := killChildMidTask(t, e, 4343)
	state := func() string {
		ts, err := e.admin.Task(ctx, QueueDefault, id)
		if err != nil {
			t.Fatal(err)
		}
		return ts.State
	}
	if got := state(); got != "active" {
		t.Fatalf("task after the kill: %s, want active", got)
	}
	// A server not started: its reclaimOnce is called with chosen clocks, so the test does not
	// wait for the lease.
	cfg := e.config()
	cfg.ReclaimAfter = 5 * time.Second
	s, err := NewServer(cfg, e.log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	for _, at := range []time.Time{time.Now(), leaseEnd, leaseEnd.Add(4 * time.Second)} {
		if n, err := s.reclaimOnce(ctx, at); err != nil || n != 0 {
			t.Fatalf("reclaim at lease end %+v: %d, %v; want 0 (the lease has not ended %v ago)", at.Sub(leaseEnd), n, err, cfg.ReclaimAfter)
		}
	}
	if got := state(); got != "active" {
		t.Fatalf("task after reclaims within its lease: %s, want active", got)
	}
	later := leaseEnd.Add(6 * time.Second)
	taskKey := e.client.keys.asynqQ(QueueDefault).task(id)
	if err := e.rdb.HSet(ctx, taskKey, "pinlater_reclaims", reclaimMax).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.reclaimOnce(ctx, later); err != nil || n != 0 {
		t.Fatalf("reclaim of a task reclaimed %d times already: %d, %v; want 0 (left to asynq)", reclaimMax, n, err)
	}
	if err := e.rdb.HSet(ctx, taskKey, "pinlater_reclaims", reclaimMax-1).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.reclaimOnce(ctx, later); err != nil || n != 1 {
		t.Fatalf("reclaim after the lease ended: %d, %v; want 1", n, err)
	}
	if got := state(); got != "pending" {
		t.Fatalf("reclaimed task: %s, want pending", got)
	}
	if n, err := s.reclaimOnce(ctx, later); err != nil || n != 0 {
		t.Fatalf("second reclaim: %d, %v; want 0", n, err)
	}
	if got := value(t, s.m.reclaimed.WithLabelValues(QueueDefault)); got != 1 {
		t.Errorf("reclaimed counted = %v, want 1", got)
	}

	var runs, attempt atomic.Int32
	e.start(e.config(), map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		attempt.Store(int32(tk.Attempt()))
		runs.Add(1)
		return nil
	})})
	testenv.WaitFor(t, 10*time.Second, "the reclaimed task to run", func() bool { return runs.Load() >= 1 })
	e.waitQueueEmpty(t, QueueDefault)
	if got := runs.Load(); got != 1 {
		t.Errorf("runs = %d, want 1", got)
	}
	if got := attempt.Load(); got != 1 {
		t.Errorf("attempt of the reclaimed run = %d, want 1 (a reclaim is not a failed run)", got)
	}
}

// TestReclaimerRuns: a started server's reclaimer takes an orphan back on its own, soon after its
// lease ends (here ReclaimAfter 1 s; asynq's recoverer would wait 30 s more and look once a
// minute).
func TestReclaimerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	e := newEnv(t)
	id, _ := killChildMidTask(t, e, 4444)
	// The orphan's 30 s lease runs out now rather than in 30 s (see endLease).
	leaseEnd := time.Now().Truncate(time.Second)
	endLease(t, e, id, leaseEnd)
	var runs atomic.Int32
	cfg := e.config()
	cfg.ReclaimAfter = time.Second
	e.start(cfg, map[string]Handler{TypeRespace: HandlerFunc(func(ctx context.Context, tk *Task) error {
		runs.Add(1)
		return nil
	})})
	testenv.WaitFor(t, time.Until(leaseEnd)+15*time.Second, "the orphan to run again", func() bool { return runs.Load() >= 1 })
	if late := time.Since(leaseEnd); late > 10*time.Second {
		t.Errorf("orphan ran %v after its lease ended, want within a few seconds", late.Round(time.Second))
	}
	t.Logf("orphan ran %v after its lease ended", time.Since(leaseEnd).Round(100*time.Millisecond))
}

// TestOrphanReportedOnce: every server's recoverer can find the same expired lease at once (two
// did in a CI run of TestKill9MidTask); the orphaned run is counted and logged once for the fleet,
// and a later orphaned run of the same task is counted again.
func TestOrphanReportedOnce(t *testing.T) {
	e := newEnv(t)
	s1, err := NewServer(e.config(), e.log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewServer(e.config(), e.log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	at := asynq.NewTask(TypeRespace, []byte(`{"board":4242}`))
	other := asynq.NewTask(TypeRespace, []byte(`{"board":4243}`))
	for _, s := range []*Server{s1, s2, s1} {
		if d := s.retryDelay(0, asynq.ErrLeaseExpired, at); d != time.Second {
			t.Fatalf("retry delay of an orphaned run = %v, want 1s", d)
		}
	}
	if got := value(t, s1.m.orphaned.WithLabelValues("unknown", TypeRespace)); got != 1 {
		t.Errorf("orphaned runs counted after three reports of one run = %v, want 1", got)
	}
	s2.retryDelay(1, asynq.ErrLeaseExpired, at)    // the next run died too
	s1.retryDelay(0, asynq.ErrLeaseExpired, other) // another task
	if got := value(t, s1.m.orphaned.WithLabelValues("unknown", TypeRespace)); got != 3 {
		t.Errorf("orphaned runs counted = %v, want 3 (two runs of one task, one of another)", got)
	}
}
