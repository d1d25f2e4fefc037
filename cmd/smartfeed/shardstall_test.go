package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	shardv1 "github.com/smartfeed/smartfeed/proto/shard/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// stallHelperEnv, when set, makes TestShardMoveWithAStalledProcess run the binary's main with
// these arguments instead of the test: the test starts itself as the second OS process.
const stallHelperEnv = "SMARTFEED_TEST_STALL_ARGS"

// TestShardMoveWithAStalledProcess runs two OS processes on one HBase that share the shard map
// through ZooKeeper: a graph process (a child, the one that stalls) that takes CreateUser calls,
// and an `all` process (this one) that moves shards 8–15, the only open shards, to another store.
// The graph process is stopped (SIGSTOP) before the move and continued (SIGCONT) after it: the
// move waits for its ZooKeeper session to expire and switches without it. Users keep being
// created through the graph process before, during and after the stall. Afterwards every user
// the graph process acknowledged must read back by name, from either process, as itself, and no
// two acknowledged users may share an ID: the woken process must not write by the map it had
// before the stall.
func TestShardMoveWithAStalledProcess(t *testing.T) {
	if args := os.Getenv(stallHelperEnv); args != "" {
		os.Args = append([]string{"smartfeed"}, strings.Fields(args)...)
		main()
		return
	}
	if testing.Short() {
		t.Skip("stalled process: two processes on HBase and a ZooKeeper session expiry; skipped with -short")
	}
	zk := testenv.HBase(t)
	redis, ns := testenv.RedisNamespace(t, "cmdstall")
	stamp := time.Now().UnixNano()
	prefix := fmt.Sprintf("cmdstall%d_", stamp)
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", stamp)
	m0, err := zen.ParseShardMap([]byte(`{"ranges": [{"from": 0, "to": 7, "store": "default"},
		{"from": 8, "to": 15, "store": "default", "open": true}, {"from": 16, "to": 4095, "store": "default"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := shardwatch.Publish(t.Context(), zk, zpath, m0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, p := range []string{prefix, namedStorePrefix(prefix, "cold")} {
			if hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: p}); err == nil {
				for _, name := range append(zenroute.ShardedTables(), tableMeta, tableGenState, tableFeed, zen.OutboxTable) {
					_ = hb.Drop(ctx, name)
				}
				hb.Close()
			}
		}
	})

	// The mover: this process.
	cfg := testConfig(t)
	cfg.Redis.Namespace = ns
	cfg.Storage.Backend = config.BackendHBase
	cfg.Storage.HBase.PoolsZK, cfg.Storage.HBase.PrimaryZK, cfg.Storage.HBase.StandbyZK = zk, zk, zk
	cfg.Storage.HBase.TablePrefix = prefix
	cfg.Storage.Stores = "cold=hbase:" + zk
	cfg.Storage.ShardMap.ZK, cfg.Storage.ShardMap.ZKPath = zk, zpath
	mover, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(t.Context())
	mdone := make(chan error, 1)
	go func() { mdone <- mover.run(mctx) }()
	t.Cleanup(func() {
		mcancel()
		if err := <-mdone; err != nil {
			t.Errorf("run mover: %v", err)
		}
	})

	// The graph process that stalls: a child OS process.
	addr := freeAddrs(t, 1)[0]
	logPath := filepath.Join(t.TempDir(), "graph.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestShardMoveWithAStalledProcess$")
	child.Env = append(os.Environ(), stallHelperEnv+"=graph --admin-addr= --admin-grpc-addr=",
		"SMARTFEED_STORAGE=hbase", "SMARTFEED_HBASE_POOLS_ZK="+zk, "SMARTFEED_HBASE_PRIMARY_ZK="+zk,
		"SMARTFEED_HBASE_STANDBY_ZK="+zk, "SMARTFEED_HBASE_TABLE_PREFIX="+prefix,
		"SMARTFEED_REDIS_ADDR="+redis, "SMARTFEED_REDIS_NAMESPACE="+ns, "SMARTFEED_LOG_FORMAT=json",
		"SMARTFEED_STORES=cold=hbase:"+zk, "SMARTFEED_SHARD_MAP_ZK="+zk, "SMARTFEED_SHARD_MAP_ZK_PATH="+zpath,
		"SMARTFEED_GRPC_ADDR="+addr)
	child.Stdout, child.Stderr = logf, logf
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childDone := make(chan struct{})
	go func() { _ = child.Wait(); _ = logf.Close(); close(childDone) }()
	t.Cleanup(func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Signal(syscall.SIGTERM)
		select {
		case <-childDone:
		case <-time.After(30 * time.Second):
			_ = child.Process.Kill()
			<-childDone
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("graph process log (tail):\n%s", b)
		}
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for deadline := time.Now().Add(90 * time.Second); ; {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		select {
		case <-childDone:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("graph process exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("graph process not serving within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	graph := graphv1.NewGraphServiceClient(conn)
	mconn, err := grpc.NewClient(mover.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer mconn.Close()
	moverGraph := graphv1.NewGraphServiceClient(mconn)

	// The writer: users through the graph process, the whole time. A refused call (Unavailable:
	// the shards fenced, or the map not confirmed current) is not acknowledged and is fine.
	type user struct {
		name string
		id   uint64
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    []user
		refused  int
		writeErr error
		created  = make(chan struct{}, 1)
	)
	wctx, stopWriter := context.WithCancel(t.Context())
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			name := fmt.Sprintf("shv_%d", i)
			ctx, cancel := context.WithTimeout(wctx, 60*time.Second)
			u, err := graph.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
			cancel()
			mu.Lock()
			switch {
			case err == nil:
				acked = append(acked, user{name, u.GetId()})
			case status.Code(err) == codes.Unavailable:
				refused++
			case wctx.Err() == nil:
				writeErr = fmt.Errorf("create %s: %w", name, err)
			}
			mu.Unlock()
			select {
			case created <- struct{}{}:
			default:
			}
			if writeErr != nil {
				return
			}
		}
	})
	countAcked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitAcked := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); countAcked() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("fewer than %d users acknowledged within 60s (err %v)", n, writeErr)
			}
			select {
			case <-created:
			case <-time.After(time.Second):
			}
		}
	}
	waitAcked(20)

	// Stall the graph process, move 8–15 while it is stopped, and wake it.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	adm := mover.cfg.Admin
	adm.GRPCAddr = mover.adminGRPCAddr()
	var out bytes.Buffer
	if err := shardsMove(t.Context(), adm, &shardv1.MoveShardsRequest{From: 8, To: 15, Target: "cold"}, &out); err != nil {
		_ = child.Process.Signal(syscall.SIGCONT)
		t.Fatalf("shards move: %v\n%s", err, out.String())
	}
	t.Logf("move while the graph process was stopped (%v): %s", time.Since(stalled).Round(time.Millisecond), lastLines(out.String(), 1))
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := countAcked()
	waitAcked(woke + 40) // well past the first seconds after the wake
	stopWriter()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}

	// Every acknowledged user reads back as itself, from the mover and from the woken process;
	// no two share an ID.
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d users acknowledged (%d after the wake), %d calls refused as unavailable", len(acked), len(acked)-woke, refused)
	owner := map[uint64]string{}
	var bad []string
	for _, u := range acked {
		if prev, ok := owner[u.id]; ok {
			bad = append(bad, fmt.Sprintf("%s and %s share ID %d", prev, u.name, u.id))
		}
		owner[u.id] = u.name
		for pname, c := range map[string]graphv1.GraphServiceClient{"mover": moverGraph, "graph process": graph} {
			r, err := c.GetUserByName(t.Context(), &graphv1.GetUserByNameRequest{Username: u.name})
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s: acknowledged user %s (ID %d): %v", pname, u.name, u.id, err))
			case r.GetId() != u.id || r.GetUsername() != u.name:
				bad = append(bad, fmt.Sprintf("%s: acknowledged user %s (ID %d) reads back as %s (ID %d)", pname, u.name, u.id,
					r.GetUsername(), r.GetId()))
			}
		}
	}
	if len(bad) > 0 {
		if len(bad) > 20 {
			bad = append(bad[:20], fmt.Sprintf("and %d more", len(bad)-20))
		}
		t.Errorf("acknowledged users lost or confused after the stall:\n%s", strings.Join(bad, "\n"))
	}
}
