package pinlater

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// clusterEnv names the run folder of scripts/redis-cluster.sh (the script prints it).
const clusterEnv = "SMARTFEED_REDIS_CLUSTER"

// clusterConfig is the RedisConfig of the cluster SMARTFEED_REDIS_CLUSTER names, and its folder;
// or it skips t.
func clusterConfig(t *testing.T) (RedisConfig, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Redis Cluster, and -short is set")
	}
	dir := os.Getenv(clusterEnv)
	if dir == "" {
		t.Skipf("needs a Redis Cluster: run `scripts/redis-cluster.sh up` and export the %s=... line it prints", clusterEnv)
	}
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("%s=%s: %v (is scripts/redis-cluster.sh up?)", clusterEnv, dir, err)
	}
	testenv.LockSetup(t, dir)
	defer f.Close()
	c := RedisConfig{Mode: RedisCluster}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SMARTFEED_REDIS_CLUSTER_ADDRS="); ok {
			c.ClusterAddrs = strings.Split(v, ",")
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("%s/env: %v", dir, err)
	}
	testenv.WaitClusterHealthy(t, c.ClusterAddrs)
	return c, dir
}

// clusterNode is the node folder (c1..c6) of the cluster in dir listening on addr.
func clusterNode(t *testing.T, dir, addr string) string {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "port")); err == nil && strings.TrimSpace(string(b)) == port {
			return e.Name()
		}
	}
	t.Fatalf("no node of %s listens on %s", dir, addr)
	return ""
}

// TestClusterPrimaryKilled runs pinlater on a real Redis Cluster (scripts/redis-cluster.sh):
// the rate limiter's script (three keys in one call) answers, tasks are enqueued by four
// producers and run by a server; then the primary holding the queue's slot is killed with
// SIGKILL. Its replica takes over; every task whose enqueue was answered OK runs; Purge leaves
// no key of the namespace on any primary. It logs how long enqueues failed.
func TestClusterPrimaryKilled(t *testing.T) {
	rc, dir := clusterConfig(t)
	e := newEnv(t)
	opt := rc.ConnOpt()
	ctx := t.Context()
	client, err := NewClient(opt, e.log, nil, WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := NewAdmin(opt, WithNamespace(e.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var mu sync.Mutex
	ran := map[uint64]bool{}
	cfg := e.config()
	cfg.Redis, cfg.ReclaimAfter = opt, 2*time.Second
	s := e.start(cfg, map[string]Handler{TypeRespace: Typed(func(ctx context.Context, p RespacePayload) error {
		mu.Lock()
		ran[p.Board] = true
		mu.Unlock()
		return nil
	})})
	// The rate limiter's script: rates, bucket and reservation keys in one call.
	if err := admin.SetRate(ctx, QueueDefault, 10000); err != nil {
		t.Fatal(err)
	}
	if d, _, err := s.lim.take(ctx, QueueDefault, "probe"); err != nil || d != decRun {
		t.Fatalf("rate limiter on the cluster: %v, %v", d, err)
	}
	if err := admin.SetRate(ctx, QueueDefault, -1); err != nil {
		t.Fatal(err)
	}

	var next atomic.Uint64
	var acked sync.Map
	var failing atomic.Int64 // unix ns of the first failed enqueue after the kill
	var lastFail atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				b := next.Add(1)
				ectx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := client.Enqueue(ectx, respaceTask(t, b))
				cancel()
				if err == nil {
					acked.Store(b, true)
					continue
				}
				now := time.Now().UnixNano()
				failing.CompareAndSwap(0, now)
				lastFail.Store(now)
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	for deadline := time.Now().Add(time.Minute); count() < 200; {
		if time.Now().After(deadline) {
			t.Fatal("tasks do not run on the cluster")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The primary of the queue's slot.
	cc, ok := client.rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client on a %T, want a cluster client", client.rdb)
	}
	master, err := cc.MasterForKey(ctx, client.keys.asynqQ(QueueDefault).pending())
	if err != nil {
		t.Fatal(err)
	}
	addr := master.Options().Addr
	node := clusterNode(t, dir, addr)
	b, err := os.ReadFile(filepath.Join(dir, node, "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatal(err)
	}
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmd), "redis-server") {
		t.Fatalf("pid %d of %s is not a redis-server", pid, node)
	}
	killed := time.Now()
	failing.Store(0)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("redis-server", filepath.Join(dir, node, "redis.conf")).CombinedOutput(); err != nil {
			t.Errorf("restart %s: %v %s", node, err, out)
		}
	})
	t.Logf("killed primary %s (%s) of the queue's slot after %d tasks ran", addr, node, count())
	for time.Since(killed) < 15*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if f := failing.Load(); f != 0 {
		last := time.Duration(lastFail.Load() - killed.UnixNano())
		t.Logf("enqueues failed from %v to %v after the kill (the replica's takeover)",
			time.Duration(f-killed.UnixNano()).Round(10*time.Millisecond), last.Round(10*time.Millisecond))
		// The replica takes over after the node timeout (2 s in the script) and an election.
		if last > 10*time.Second {
			t.Errorf("enqueues still failed %v after the kill: the client did not find the promoted replica", last.Round(10*time.Millisecond))
		}
	}

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
	deadline := killed.Add(90 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 {
		// A Cluster replicates asynchronously: an enqueue the dead primary acknowledged but had
		// not sent to its replica is gone. (The process's DurableClient re-enqueues such tasks
		// from its outbox; this test uses the plain client to measure the raw loss.)
		t.Logf("%d of %d tasks answered OK were lost with the primary (asynchronous replication): %v", len(m), n, m[:min(10, len(m))])
	}
	t.Logf("%d tasks answered OK, %d ran, %d missing, %v after the kill", n, count(), len(missing()), time.Since(killed).Round(100*time.Millisecond))

	// Purge leaves nothing of the namespace on any primary.
	if err := admin.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	var lmu sync.Mutex
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "*"+e.ns+"*").Result()
		lmu.Lock()
		left = append(left, keys...)
		lmu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("after Purge, %d keys of namespace %s are left, e.g. %q", len(left), e.ns, left[:min(5, len(left))])
	}
}
