package pinlater

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestLimiterCounts drives the queue rate limit in Redis with a test clock and checks decisions by count.
func TestLimiterCounts(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var nowMs atomic.Int64
	nowMs.Store(1_900_000_000_000)
	lim := &limiter{rdb: e.rdb, keys: keys{ns: e.ns}, horizon: 2 * time.Second, ttl: time.Nanosecond,
		now: func() time.Time { return time.UnixMilli(nowMs.Load()) }}
	q := QueueDefault
	take := func(id string) (decision, time.Duration) {
		t.Helper()
		d, w, err := lim.take(ctx, q, id)
		if err != nil {
			t.Fatal(err)
		}
		return d, w
	}
	// No rate: everything runs.
	for i := range 50 {
		if d, _ := take(fmt.Sprint("free", i)); d != decRun {
			t.Fatalf("unlimited queue: decision %v", d)
		}
	}
	if err := e.admin.SetRate(ctx, q, 5); err != nil {
		t.Fatal(err)
	}
	// Burst of 5, then reservations 200 ms apart up to the 2 s horizon, then "later".
	type got struct {
		D    string
		Wait time.Duration
	}
	var gots []got
	for i := range 17 {
		d, w := take(fmt.Sprint("t", i))
		gots = append(gots, got{d.String(), w})
	}
	var want []got
	for range 5 {
		want = append(want, got{"run", 0})
	}
	for i := 1; i <= 10; i++ {
		want = append(want, got{"reserved", time.Duration(i) * 200 * time.Millisecond})
	}
	want = append(want, got{"later", 2 * time.Second}, got{"later", 2 * time.Second})
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Fatalf("decisions (-want +got):\n%s", diff)
	}
	// A reserved task asking again before its slot is told the remaining wait, and takes nothing.
	if d, w := take("t5"); d != decReserved || w != 200*time.Millisecond {
		t.Fatalf("early return: %v %v", d, w)
	}
	// One second later: the first five reservations are due and run exactly once each; the bucket
	// is still in debt, so a new task waits.
	nowMs.Add(1000)
	runs := 0
	for i := 5; i < 15; i++ {
		if d, _ := take(fmt.Sprint("t", i)); d == decRun {
			runs++
		}
	}
	if runs != 5 {
		t.Fatalf("runs after 1 s = %d, want 5", runs)
	}
	if d, _ := take("t5"); d != decReserved && d != decLater {
		// t5's reservation was consumed: it is a new request now and must wait like any other.
		t.Fatalf("t5 again after its run: %v, want to wait", d)
	}
	// Rate 0: paused.
	if err := e.admin.SetRate(ctx, q, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := take("new"); d != decPaused {
		t.Fatalf("rate 0: %v, want paused", d)
	}
}

// TestLimiterSharedAcrossProcesses: many limiters (one per process) over one bucket grant, in
// total, exactly the burst with the clock frozen, however the calls interleave.
func TestLimiterSharedAcrossProcesses(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if err := e.admin.SetRate(ctx, QueueFanout, 20); err != nil {
		t.Fatal(err)
	}
	frozen := func() time.Time { return time.UnixMilli(1_900_000_000_000) }
	var granted, reserved atomic.Int32
	var wg sync.WaitGroup
	for p := range 4 {
		lim := &limiter{rdb: e.rdb, keys: keys{ns: e.ns}, horizon: time.Second, ttl: time.Second, now: frozen}
		wg.Go(func() {
			for i := range 25 {
				d, _, err := lim.take(ctx, QueueFanout, fmt.Sprintf("p%d-%d", p, i))
				if err != nil {
					t.Error(err)
					return
				}
				switch d {
				case decRun:
					granted.Add(1)
				case decReserved:
					reserved.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 20 tokens now, and 20 reserved slots within the 1 s horizon (50 ms apart).
	if granted.Load() != 20 || reserved.Load() != 20 {
		t.Fatalf("granted %d, reserved %d; want 20 and 20", granted.Load(), reserved.Load())
	}
}

// TestAdmitThroughRedisOutage: while the limiter's Redis is down, a queue without a rate keeps
// running on the rates read before; with no rates read yet, a task that asynq would still retry
// is put off (not counted), and one on its last retry waits for Redis instead of being put off
// (asynq would send it to the dead set on any error).
func TestAdmitThroughRedisOutage(t *testing.T) {
	rp := testenv.StartRedis(t)
	ctx := t.Context()
	newServer := func() *Server {
		s, err := NewServer(Config{Redis: asynq.RedisClientOpt{Addr: rp.Addr(), DialTimeout: 100 * time.Millisecond},
			RateCheckInterval: time.Nanosecond}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		return s
	}
	warm, cold := newServer(), newServer()
	if err := warm.admit(ctx, QueueDefault, TypeRespace, "a", true); err != nil {
		t.Fatalf("admit with Redis up: %v", err)
	}
	rp.Kill()
	if err := warm.admit(ctx, QueueDefault, TypeRespace, "b", true); err != nil {
		t.Errorf("admit with the rates read before the outage: %v, want nil (no rate on the queue)", err)
	}
	var d *deferError
	c0 := time.Now()
	if err := cold.admit(ctx, QueueDefault, TypeRespace, "c", true); !errors.As(err, &d) {
		t.Errorf("admit of a retriable task, no rates known, Redis down: %v, want a deferral", err)
	}
	// One failed call to the dead Redis takes the client's retries; the outage lasts well past
	// a few of them, so a task that did not wait would be seen returning.
	outage := max(3*time.Second, 3*time.Since(c0))
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- cold.admit(ctx, QueueDefault, TypeRespace, "d", false) }()
	select {
	case err := <-done:
		t.Fatalf("admit of a task on its last retry returned %v while Redis was down, want it to wait", err)
	case <-time.After(outage):
	}
	rp.Start()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("admit of the waiting task once Redis was back: %v", err)
		}
		t.Logf("the task on its last retry ran %v after it asked, once Redis answered", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("admit still waiting 10 s after Redis came back")
	}
}
