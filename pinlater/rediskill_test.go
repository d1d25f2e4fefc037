package pinlater

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestRedisKillOrphansReclaimed kills redis-server with SIGKILL while a server takes tasks as
// fast as they come, and starts it again with its append-only file. A dequeue whose script
// reached the file but whose answer was never sent leaves its task active in Redis with no
// worker (every run of this test made one or two). Every task whose enqueue was answered OK
// must still run, and within about one lease (30 s) of the kill, not asynq's 60–120 s: the
// reclaimer takes the orphans back (with Config.ReclaimAfter < 0 this test fails).
func TestRedisKillOrphansReclaimed(t *testing.T) {
	rp := testenv.StartRedis(t)
	e := newEnv(t)
	opt := asynq.RedisClientOpt{Addr: rp.Addr()}
	client, err := NewClient(opt, e.log, nil, WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var mu sync.Mutex
	ran := map[uint64]bool{}
	cfg := e.config()
	cfg.Redis, cfg.Concurrency, cfg.Dequeuers, cfg.PollInterval, cfg.ReclaimAfter = opt, 8, 4, 10*time.Millisecond, 2*time.Second
	s := e.start(cfg, map[string]Handler{TypeRespace: Typed(func(ctx context.Context, p RespacePayload) error {
		mu.Lock()
		ran[p.Board] = true
		mu.Unlock()
		return nil
	})})

	var next atomic.Uint64
	var acked sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				b := next.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				_, err := client.Enqueue(ctx, respaceTask(t, b))
				cancel()
				if err == nil {
					acked.Store(b, true)
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	rp.Kill()
	killed := time.Now()
	time.Sleep(time.Second)
	rp.Start()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	missing := func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		var out []uint64
		acked.Range(func(k, _ any) bool {
			if !ran[k.(uint64)] {
				out = append(out, k.(uint64))
			}
			return true
		})
		return out
	}
	n := 0
	acked.Range(func(_, _ any) bool { n++; return true })
	// An orphan runs about 30 s (its lease) + ReclaimAfter after the kill; asynq alone would run it
	// about 120 s after (it waits 30 s past the lease, and its recoverer last looked at the start).
	deadline := killed.Add(60 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	reclaimed := value(t, s.m.reclaimed.WithLabelValues(QueueDefault))
	t.Logf("%d tasks answered OK; %v reclaimed; all run %v after the kill", n, reclaimed, time.Since(killed).Round(100*time.Millisecond))
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d tasks answered OK never ran within %v of the kill: %v", len(m), n, deadline.Sub(killed), m)
	}
}
