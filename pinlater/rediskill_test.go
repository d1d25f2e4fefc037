package pinlater

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestRedisKillOrphansReclaimed kills redis-server with SIGKILL while a server takes tasks as
// fast as they come, and starts it again with its append-only file. A dequeue whose script
// reached the file but whose answer was never sent leaves its task active in Redis with no
// worker (every run of this test made one or two). Every task whose enqueue was answered OK
// must still run, and within Config.ReclaimAfter of its lease's end, not asynq's 60–120 s: the
// reclaimer takes the orphans back (with Config.ReclaimAfter < 0 this test fails whenever an
// answered task was orphaned). The orphans' leases are moved to end at once rather than waited out.
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
	ranCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	loadStart := time.Now()
	testenv.WaitFor(t, testenv.WaitTimeout, "the server to run 300 tasks of the load", func() bool { return ranCount() >= 300 })
	t.Logf("%d tasks run %v into the load", ranCount(), time.Since(loadStart).Round(time.Millisecond))
	rp.Kill()
	killed := time.Now()
	// sleep: Redis stays down a second, an outage the enqueuers and the server run through.
	time.Sleep(time.Second)
	rp.Start()
	restarted := next.Load() // later boards are enqueued after the restart
	testenv.WaitFor(t, testenv.WaitTimeout, "a task enqueued after the restart to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for b := range ran {
			if b > restarted {
				return true
			}
		}
		return false
	})
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
	// An orphan was dequeued before the kill, so its lease ends at most 30 s (asynq's lease, a
	// constant) after it; a task the live server dequeued after the restart has a later one. No
	// live worker extends an orphan's lease: it is moved to end now, which is what waiting out
	// the lease would leave, and the reclaimer must then take the orphan back within ReclaimAfter
	// and a pass. asynq alone would run it about a minute after its lease (its recoverer waits
	// 30 s past a lease and looks every minute from the server's start), past the deadline.
	orphans := moveOrphanLeases(t, rp.Addr(), client.keys.asynqQ(QueueDefault).lease(), killed.Add(asynqLease))
	deadline := time.Now().Add(25 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	reclaimed := value(t, s.m.reclaimed.WithLabelValues(QueueDefault))
	t.Logf("%d tasks answered OK; %d orphans, %v reclaimed; all run %v after the kill", n, orphans, reclaimed, time.Since(killed).Round(100*time.Millisecond))
	if m := missing(); len(m) > 0 {
		t.Fatalf("%d of %d tasks answered OK never ran within %v of the kill: %v", len(m), n, deadline.Sub(killed).Round(time.Second), m)
	}
}

// asynqLease is the length of asynq's lease on a task it runs (a constant, extended while the
// worker lives).
const asynqLease = 30 * time.Second

// moveOrphanLeases makes every lease in the lease set key of the Redis at addr that ends by
// `by` end now instead, and returns how many it moved.
func moveOrphanLeases(t *testing.T, addr, key string, by time.Time) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ids, err := rdb.ZRangeArgs(t.Context(), redis.ZRangeArgs{Key: key, ByScore: true, Start: "-inf", Stop: by.Unix()}).Result()
	if err != nil {
		t.Fatalf("leases of the orphans: %v", err)
	}
	for _, id := range ids {
		n, err := rdb.ZAddArgs(t.Context(), key, redis.ZAddArgs{XX: true, Ch: true,
			Members: []redis.Z{{Score: float64(time.Now().Unix()), Member: id}}}).Result()
		if err != nil {
			t.Fatalf("move the lease of %s: %v", id, err)
		}
		t.Logf("orphan %s: lease moved to now (%d changed)", id, n)
	}
	return len(ids)
}
