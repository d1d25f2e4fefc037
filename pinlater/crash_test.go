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
	info, err := e.client.Enqueue(ctx, respaceTask(t, 4242), MaxAttempts(3))
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
	waitFor(t, 30*time.Second, "the child to start the task", func() bool {
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
	killed := time.Now()

	// asynq's recoverer requeues tasks whose lease expired more than 30 s ago; it runs when a
	// server starts and then every minute. Start the fresh server once that point has passed, from
	// the lease expiry recorded in Redis, so the test does not depend on the recoverer's phase.
	exp, err := e.rdb.ZScore(ctx, "asynq:{"+e.client.keys.queue(QueueDefault)+"}:lease", info.ID).Result()
	if err != nil {
		t.Fatalf("lease of the killed task: %v", err)
	}
	ready := time.Unix(int64(exp), 0).Add(31 * time.Second)
	t.Logf("killed; lease expires %v after the kill; fresh server starts in %v",
		time.Unix(int64(exp), 0).Sub(killed).Round(time.Second), time.Until(ready).Round(time.Second))
	// Nothing runs it in the meantime: the task stays active, owned by a dead process.
	time.Sleep(time.Until(ready))

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
	// Two fresh servers, as after a restart of a worker fleet: still exactly one run.
	s1 := e.start(e.config(), map[string]Handler{TypeRespace: h})
	e.start(e.config(), map[string]Handler{TypeRespace: h})
	waitFor(t, 60*time.Second, "the task to complete after the kill", func() bool { return runs.Load() >= 1 })
	time.Sleep(300 * time.Millisecond)
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
