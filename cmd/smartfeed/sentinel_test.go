package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// sentinelEnv names the run folder of scripts/redis-sentinel.sh that the Sentinel fault test
// runs against (the script prints it).
const sentinelEnv = "SMARTFEED_REDIS_SENTINEL"

// sentinelSetup is the primary, replica and sentinels of scripts/redis-sentinel.sh: its folder
// holds n1/ and n2/ (the data nodes: port, redis.pid, redis.conf) and env (the master name and
// the sentinels' addresses).
type sentinelSetup struct {
	dir, master string
	sentinels   []string
}

// sentinelFromEnv returns the setup SMARTFEED_REDIS_SENTINEL names, or skips t.
func sentinelFromEnv(t *testing.T) *sentinelSetup {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Redis Sentinel setup, and -short is set")
	}
	dir := os.Getenv(sentinelEnv)
	if dir == "" {
		t.Skipf("needs a Redis Sentinel setup: run `scripts/redis-sentinel.sh up` and export the %s=... line it prints", sentinelEnv)
	}
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("%s=%s: %v (is scripts/redis-sentinel.sh up?)", sentinelEnv, dir, err)
	}
	testenv.LockSetup(t, dir)
	defer f.Close()
	s := &sentinelSetup{dir: dir}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "SMARTFEED_REDIS_SENTINEL_MASTER":
			s.master = v
		case "SMARTFEED_REDIS_SENTINEL_ADDRS":
			s.sentinels = config.SplitAddrs(v)
		}
	}
	if s.master == "" || len(s.sentinels) == 0 {
		t.Fatalf("%s/env names no master or no sentinels", dir)
	}
	return s
}

// primary is the address of the primary as the first sentinel that answers sees it.
func (s *sentinelSetup) primary(ctx context.Context) (string, error) {
	var last error
	for _, a := range s.sentinels {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: a, MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, s.master).Result()
		c.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the primary of %s: %v", s.master, last)
}

// node is the data node (its folder: n1, n2; c1..c6 in a cluster) listening on addr's port.
func (s *sentinelSetup) node(t *testing.T, addr string) string {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(s.dir, e.Name(), "port"))
		if err == nil && strings.TrimSpace(string(b)) == port {
			return e.Name()
		}
	}
	t.Fatalf("no data node of %s listens on %s", s.dir, addr)
	return ""
}

// failoverTarget is a Redis deployment with automatic failover whose primary a test kills.
type failoverTarget interface {
	// configure points the process's config at the deployment.
	configure(c *config.Config)
	// primaryOf is the address of the primary serving namespace ns's fanout queue.
	primaryOf(ctx context.Context, ns string) (string, error)
	node(t *testing.T, addr string) string
	kill(t *testing.T, node string)
	restart(t *testing.T, node string)
}

func (s *sentinelSetup) configure(c *config.Config) {
	c.Redis.Mode, c.Redis.SentinelMaster, c.Redis.SentinelAddrs = config.RedisSentinel, s.master, strings.Join(s.sentinels, ",")
}

func (s *sentinelSetup) primaryOf(ctx context.Context, _ string) (string, error) {
	return s.primary(ctx)
}

// clusterSetup is the Redis Cluster of scripts/redis-cluster.sh: its folder holds c1..c6 (port,
// redis.pid, redis.conf) and env (the nodes' addresses). It kills and restarts nodes as the
// Sentinel setup does.
type clusterSetup struct {
	sentinelSetup
	addrs string
}

// clusterFromEnv returns the cluster SMARTFEED_REDIS_CLUSTER names, or skips t.
func clusterFromEnv(t *testing.T) *clusterSetup {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a Redis Cluster, and -short is set")
	}
	dir := os.Getenv("SMARTFEED_REDIS_CLUSTER")
	if dir == "" {
		t.Skip("needs a Redis Cluster: run `scripts/redis-cluster.sh up` and export the SMARTFEED_REDIS_CLUSTER=... line it prints")
	}
	b, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatalf("SMARTFEED_REDIS_CLUSTER=%s: %v (is scripts/redis-cluster.sh up?)", dir, err)
	}
	testenv.LockSetup(t, dir)
	c := &clusterSetup{sentinelSetup: sentinelSetup{dir: dir}}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SMARTFEED_REDIS_CLUSTER_ADDRS="); ok {
			c.addrs = v
		}
	}
	if c.addrs == "" {
		t.Fatalf("%s/env names no nodes", dir)
	}
	testenv.WaitClusterHealthy(t, strings.Split(c.addrs, ","))
	return c
}

func (c *clusterSetup) configure(cfg *config.Config) {
	cfg.Redis.Mode, cfg.Redis.ClusterAddrs = config.RedisCluster, c.addrs
}

// primaryOf asks the cluster (a client of its own, with a fresh layout) which primary serves
// the slot of ns's fanout queue.
func (c *clusterSetup) primaryOf(ctx context.Context, ns string) (string, error) {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: config.SplitAddrs(c.addrs), MaxRetries: -1})
	defer cc.Close()
	m, err := cc.MasterForKey(ctx, "asynq:{"+ns+"-"+pinlater.QueueFanout+"}:pending")
	if err != nil {
		return "", err
	}
	return m.Options().Addr, nil
}

// kill sends SIGKILL to the redis-server of node n.
func (s *sentinelSetup) kill(t *testing.T, n string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, n, "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("%s/redis.pid: %v", n, err)
	}
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmd), "redis-server") {
		t.Fatalf("pid %d of %s is not a redis-server (%v)", pid, n, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", pid, n, err)
	}
}

// restart starts node n again from its config file (which Sentinel rewrites: it comes back
// as a replica of the new primary) and waits until it answers.
func (s *sentinelSetup) restart(t *testing.T, n string) {
	t.Helper()
	if out, err := exec.Command("redis-server", filepath.Join(s.dir, n, "redis.conf")).CombinedOutput(); err != nil {
		t.Errorf("restart %s: %v %s", n, err, out)
		return
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, n, "port"))
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:" + strings.TrimSpace(string(b)), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Errorf("%s did not answer within 30 s of its restart", n)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSentinelFailoverLosesNothing kills the Redis primary (kill -9) of a Sentinel setup as the
// fanout of one pin to 2,000 followers (10,000 with SMARTFEED_LONG=1) starts, while
// another author creates a pin every 50 ms. Sentinel promotes the replica; the process follows
// it (the failover client asks the sentinels where the primary is). Every follower holds the
// big pin exactly once (one pool row), and every pin whose CreatePin answered OK reaches every
// follower of its author: what the dead primary had acknowledged but not yet sent to the
// replica comes back through the outbox relay. It logs the promotion and recovery times.
func TestSentinelFailoverLosesNothing(t *testing.T) {
	testFailoverLosesNothing(t, sentinelFromEnv(t))
}

// TestClusterFailoverLosesNothing is TestSentinelFailoverLosesNothing on the Redis Cluster of
// scripts/redis-cluster.sh (SMARTFEED_REDIS_CLUSTER), the primary killed being the one serving
// the fanout queue's slot: its replica takes over, and the same checks hold.
func TestClusterFailoverLosesNothing(t *testing.T) {
	testFailoverLosesNothing(t, clusterFromEnv(t))
}

func testFailoverLosesNothing(t *testing.T, sn failoverTarget) {
	n := 2_000
	if os.Getenv("SMARTFEED_LONG") == "1" {
		n = 10_000
	}
	ctx := t.Context()
	a, conn := startAllWith(t, func(c *config.Config) {
		sn.configure(c)
		c.Worker.OutboxGrace = jsontime.Duration(2 * time.Second)
		c.Worker.OutboxRelayInterval = jsontime.Duration(500 * time.Millisecond)
		// Runs after the app stopped (cleanups run last first): the namespace's keys go.
		rc := c.Redis
		t.Cleanup(func() {
			admin, err := pinlater.NewAdmin(redisOpt(rc), pinlater.WithNamespace(rc.Namespace))
			if err != nil {
				t.Error(err)
				return
			}
			defer admin.Close()
			if err := admin.Purge(context.Background()); err != nil {
				t.Errorf("purge namespace %s: %v", rc.Namespace, err)
			}
		})
	})
	g := graphv1.NewGraphServiceClient(conn)
	mk := func(name string) uint64 {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetId()
	}
	big, small := mk("bigauthor"), mk("streamer")
	bigBoard, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: big, Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	smallBoard, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: small, Name: "stream"})
	if err != nil {
		t.Fatal(err)
	}
	// The followers of the big author, made 8 at a time; the streamer's own three.
	followers := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: fmt.Sprintf("f%d", i), Email: fmt.Sprintf("f%d@example.com", i)})
				if err == nil {
					followers[i] = u.GetId()
					_, err = g.Follow(ctx, &graphv1.FollowRequest{UserId: u.GetId(), TargetId: big})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// The streamer's followers: three whose pools are checked, three who read their feeds
	// (a page served takes its pins out of the pools, so they are not counted).
	var streamFollowers, readers []uint64
	for i := range 6 {
		u := mk(fmt.Sprintf("reader%d", i))
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: u, TargetId: small}); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			streamFollowers = append(streamFollowers, u)
		} else {
			readers = append(readers, u)
		}
	}

	poolsT, err := a.shardTable(ctx, tablePools)
	if err != nil {
		t.Fatal(err)
	}
	// pinRows returns the Following pool rows of user that hold pin (Top shows a pin once however
	// many rows it has; a fanout run twice with different scores would leave two).
	pinRows := func(user, pin uint64) ([]zen.KV, error) {
		prefix := make([]byte, 9)
		binary.BigEndian.PutUint64(prefix, user)
		prefix[8] = byte(zen.SourceFollowing)
		kvs, err := poolsT.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
		if err != nil {
			return nil, err
		}
		var out []zen.KV
		for _, kv := range kvs {
			if len(kv.Key) >= 25 && binary.BigEndian.Uint64(kv.Key[17:25]) == pin {
				out = append(out, kv)
			}
		}
		return out, nil
	}
	rows := func(user, pin uint64) (int, error) {
		kvs, err := pinRows(user, pin)
		return len(kvs), err
	}

	// The stream: a pin every 50 ms until stop closes. A watcher notes when each pin answered
	// OK has reached all the streamer's followers.
	var mu sync.Mutex
	var okPins []uint64
	created, delivered := map[uint64]time.Time{}, map[uint64]time.Time{}
	failed, okAfterKill := 0, 0
	var killAt time.Time
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			mu.Lock()
			var todo []uint64
			for _, p := range okPins {
				if _, ok := delivered[p]; !ok {
					todo = append(todo, p)
				}
			}
			mu.Unlock()
			for _, p := range todo {
				all := true
				for _, u := range streamFollowers {
					if c, err := rows(u, p); err != nil || c == 0 {
						all = false
						break
					}
				}
				if all {
					mu.Lock()
					delivered[p] = time.Now()
					mu.Unlock()
				}
			}
		}
	})
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			p, err := g.CreatePin(wctx, &graphv1.CreatePinRequest{AuthorId: small, BoardId: smallBoard.GetId(),
				ImageUrl: fmt.Sprintf("https://i.example.com/s%d.jpg", i), RequestId: fmt.Sprintf("sentinel-%d", i)})
			cancel()
			mu.Lock()
			if err != nil {
				failed++
				t.Logf("CreatePin %d: %v", i, err)
			} else {
				okPins = append(okPins, p.GetId())
				created[p.GetId()] = time.Now()
				if !killAt.IsZero() {
					okAfterKill++
				}
			}
			mu.Unlock()
		}
	})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); writer.Wait() }
	defer halt()

	// Some pins before the kill.
	for deadline := time.Now().Add(time.Minute); ; {
		mu.Lock()
		k := len(delivered)
		mu.Unlock()
		if k >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream's pins are not delivered")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The big pin; the primary dies as soon as CreatePin answers, the fanout event in Redis
	// (and, or not yet, on the replica) and its tasks about to run. (Waiting for some of its
	// pool rows does not land in the middle: the chunk tasks run side by side and finish
	// within a few milliseconds of each other, 2,000 or 10,000 followers alike.)
	inserts0 := gatherSum(a.reg, "smartfeed_worker_pool_inserts_total")
	bp, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: big, BoardId: bigBoard.GetId(),
		ImageUrl: "https://i.example.com/big.jpg", RequestId: "sentinel-big"})
	if err != nil {
		t.Fatal(err)
	}
	bigPin := bp.GetId()
	before, err := sn.primaryOf(ctx, a.cfg.Redis.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	node := sn.node(t, before)
	// Readers: each reads its first page every 50 ms.
	type read struct {
		at, took time.Duration // since the kill (negative before it), and the call's time
		failed   bool
	}
	var reads []read
	f := feedv1.NewFeedServiceClient(conn)
	for _, u := range readers {
		writer.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				t0 := time.Now()
				_, err := f.GetFeed(rctx, &feedv1.GetFeedRequest{UserId: u, PageSize: 10})
				took := time.Since(t0)
				cancel()
				mu.Lock()
				if !killAt.IsZero() {
					reads = append(reads, read{at: t0.Sub(killAt), took: took, failed: err != nil})
				}
				mu.Unlock()
			}
		})
	}
	// Readiness through the failover: when /readyz first refused after the kill, and when it
	// answered 200 again.
	var notReady, readyAgain time.Time
	writer.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get("http://" + a.adminAddr() + "/readyz")
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			switch {
			case killAt.IsZero():
			case code != http.StatusOK && notReady.IsZero():
				notReady = time.Now()
			case code == http.StatusOK && !notReady.IsZero() && readyAgain.IsZero():
				readyAgain = time.Now()
			}
			mu.Unlock()
		}
	})
	mu.Lock()
	killAt = time.Now()
	mu.Unlock()
	sn.kill(t, node)
	t.Cleanup(func() { sn.restart(t, node) })
	atKill := gatherSum(a.reg, "smartfeed_worker_pool_inserts_total") - inserts0
	t.Logf("primary %s (%s) killed after about %d pool inserts of a %d-follower fanout", before, node, atKill, n)
	if atKill >= int64(n) {
		t.Logf("the fanout had finished before the kill: only the stream ran through the failover")
	}

	// Sentinel promotes the replica.
	var promoted time.Duration
	for {
		if p, err := sn.primaryOf(ctx, a.cfg.Redis.Namespace); err == nil && p != before {
			promoted = time.Since(killAt)
			t.Logf("%s is the primary %v after the kill", p, promoted.Round(10*time.Millisecond))
			break
		}
		if time.Since(killAt) > time.Minute {
			t.Fatal("no replica promoted within a minute of the kill")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The stream goes on 10 s past the kill, then every pin answered OK, and the big one, must
	// reach every follower.
	for time.Since(killAt) < 10*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	halt()
	mu.Lock()
	pins := append([]uint64(nil), okPins...)
	t.Logf("%d stream pins answered OK (%d after the kill), %d failed", len(pins), okAfterKill, failed)
	mu.Unlock()
	if okAfterKill == 0 {
		t.Error("no CreatePin answered OK after the kill")
	}
	// While no primary answered, the write path left its tasks to the outbox: proof that the
	// process was on the Sentinel setup and lived through the failover.
	// GetFeed while no primary answered: every call answered, p99 reported and bounded.
	mu.Lock()
	var during []time.Duration
	readErrs := 0
	for _, r := range reads {
		if r.at < 0 || r.at > promoted {
			continue
		}
		during = append(during, r.took)
		if r.failed {
			readErrs++
		}
	}
	mu.Unlock()
	if len(during) == 0 {
		t.Error("no GetFeed while no primary answered")
	} else {
		slices.Sort(during)
		p99 := during[len(during)*99/100]
		t.Logf("GetFeed while no primary answered: %d calls, %d errors, p50 %v, p99 %v", len(during), readErrs,
			during[len(during)/2].Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
		if readErrs > 0 {
			t.Errorf("%d of %d GetFeed calls failed during the failover", readErrs, len(during))
		}
		// The bound of TestRedisOutageLosesNothing, for its reason: a GetFeed that waited on
		// the dead primary would take the enqueue timeout (500 ms).
		if p99 > 400*time.Millisecond {
			t.Errorf("GetFeed p99 during the failover %v: reads wait on Redis", p99)
		}
	}
	mu.Lock()
	switch {
	case notReady.IsZero():
		t.Logf("/readyz answered 200 throughout")
	case readyAgain.IsZero():
		t.Errorf("/readyz refused from %v after the kill and never answered 200 again", notReady.Sub(killAt).Round(10*time.Millisecond))
	default:
		t.Logf("/readyz refused from %v to %v after the kill", notReady.Sub(killAt).Round(10*time.Millisecond), readyAgain.Sub(killAt).Round(10*time.Millisecond))
	}
	mu.Unlock()
	if d := gatherSum(a.reg, "pinlater_outbox_deferred_total"); d == 0 {
		t.Errorf("no task was deferred to the outbox while the primary was dead: the process never lost its Redis (is it on the Sentinel setup?)")
	} else {
		t.Logf("%d tasks went to the outbox relay while no primary answered", d)
	}

	type pair struct{ user, pin uint64 }
	count := func(u, p uint64) int {
		c, err := rows(u, p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func() (missing, dup []pair) {
		for _, u := range followers {
			switch c := count(u, bigPin); {
			case c == 0:
				missing = append(missing, pair{u, bigPin})
			case c > 1:
				dup = append(dup, pair{u, bigPin})
			}
		}
		for _, u := range streamFollowers {
			for _, p := range pins {
				switch c := count(u, p); {
				case c == 0:
					missing = append(missing, pair{u, p})
				case c > 1:
					dup = append(dup, pair{u, p})
				}
			}
		}
		return missing, dup
	}
	var missing, dup []pair
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing, dup = check()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	recovered := time.Since(killAt)
	if len(missing) > 0 {
		t.Errorf("%d (follower, pin) pairs never delivered within 2 min of the kill, e.g. %v", len(missing), missing[:min(5, len(missing))])
		seen := map[uint64]bool{}
		for _, m := range missing {
			if !seen[m.pin] && len(seen) < 5 {
				seen[m.pin] = true
				author, board := small, smallBoard.GetId()
				if m.pin == bigPin {
					author, board = big, bigBoard.GetId()
				}
				t.Logf("pin %d: %s", m.pin, fanoutState(ctx, a, m.pin, author, board))
			}
		}
	}
	if len(dup) > 0 {
		t.Errorf("%d (follower, pin) pairs delivered more than once (several pool rows), e.g. %v", len(dup), dup[:min(5, len(dup))])
		// What differs between the rows: the score (in the key) says which feature a second
		// delivery read differently; the value, which delivery wrote it.
		for _, d := range dup[:min(3, len(dup))] {
			kvs, err := pinRows(d.user, d.pin)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				_, _, score, _, err := zen.ParsePoolKey(kv.Key)
				if err != nil || len(kv.Value) < 32 {
					t.Logf("user %d pin %d: row %x -> %x (%v)", d.user, d.pin, kv.Key, kv.Value, err)
					continue
				}
				t.Logf("user %d pin %d: row score %v, created ms %d, reason %q", d.user, d.pin, score,
					binary.BigEndian.Uint64(kv.Value[24:32]), kv.Value[32:])
			}
		}
	}
	// Recovery: when the first pin created after the kill reached its followers (the queues
	// run again), and the longest a pin created after the kill took to reach them.
	var resumed, worst time.Duration
	mu.Lock()
	for _, p := range pins {
		c, d := created[p], delivered[p]
		if c.Before(killAt) || d.IsZero() {
			continue
		}
		if at := d.Sub(killAt); resumed == 0 || at < resumed {
			resumed = at
		}
		worst = max(worst, d.Sub(c))
	}
	mu.Unlock()
	t.Logf("failover: replica promoted %v after the kill; fanout of new pins resumed %v after the kill; "+
		"slowest pin created after the kill reached its followers in %v; everything delivered (%d followers of the big pin, %d stream pins) %v after the kill",
		promoted.Round(10*time.Millisecond), resumed.Round(10*time.Millisecond), worst.Round(10*time.Millisecond), n, len(pins), recovered.Round(10*time.Millisecond))
	for _, q := range pinlater.QueueNames() {
		if st, err := a.pinAdmin.Queue(ctx, q); err == nil && st.Dead != 0 {
			t.Errorf("queue %s: %d dead tasks after the failover", q, st.Dead)
		}
	}
}

// TestClusterWholeProcess runs the whole process on the Redis Cluster of
// scripts/redis-cluster.sh (SMARTFEED_REDIS_CLUSTER names its run folder; skipped without
// it): pins created through the graph API reach every follower, with the rate limit of the
// fanout queue set (the limiter's script on the cluster), and Purge empties the namespace.
func TestClusterWholeProcess(t *testing.T) {
	cl := clusterFromEnv(t)
	a, conn := startAllWith(t, func(c *config.Config) {
		cl.configure(c)
		rc := c.Redis
		t.Cleanup(func() {
			admin, err := pinlater.NewAdmin(redisOpt(rc), pinlater.WithNamespace(rc.Namespace))
			if err != nil {
				t.Error(err)
				return
			}
			defer admin.Close()
			if err := admin.Purge(context.Background()); err != nil {
				t.Errorf("purge namespace %s: %v", rc.Namespace, err)
			}
		})
	})
	ctx := t.Context()
	if err := a.pinAdmin.SetRate(ctx, pinlater.QueueFanout, 1000); err != nil {
		t.Fatal(err)
	}
	g := graphv1.NewGraphServiceClient(conn)
	mk := func(name string) uint64 {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetId()
	}
	author := mk("author")
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: author, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var followers []uint64
	for i := range 3 {
		u := mk(fmt.Sprintf("f%d", i))
		if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: u, TargetId: author}); err != nil {
			t.Fatal(err)
		}
		followers = append(followers, u)
	}
	var pins []uint64
	for i := range 5 {
		p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: author, BoardId: board.GetId(),
			ImageUrl: fmt.Sprintf("https://i.example.com/%d.jpg", i), RequestId: fmt.Sprintf("cluster-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		pins = append(pins, p.GetId())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var missing []uint64
		for _, u := range followers {
			top, err := a.pools.Top(ctx, zen.ID(u), zen.SourceFollowing, 100)
			if err != nil {
				t.Fatal(err)
			}
			in := map[uint64]bool{}
			for _, e := range top {
				in[uint64(e.Pin)] = true
			}
			for _, p := range pins {
				if !in[p] {
					missing = append(missing, p)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("on the Redis Cluster, %d (follower, pin) pairs never delivered: %v", len(missing), missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := gatherSum(a.reg, "pinlater_outbox_deferred_total"); d != 0 {
		t.Errorf("%d tasks deferred to the outbox: the cluster refused enqueues", d)
	}
}
