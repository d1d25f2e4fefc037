package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// testConfig is an "all" config on loopback ports chosen by the kernel, Pebble in a temp dir
// and a Redis namespace of the test's own.
func testConfig(t *testing.T) config.Config {
	c := config.DefaultConfig()
	c.Redis.Addr, c.Redis.Namespace = testenv.RedisNamespace(t, "cmdtest")
	c.Storage.DataDir = t.TempDir()
	c.Storage.PebbleNoSync = true
	c.GRPC.Addr = "127.0.0.1:0"
	c.Admin.Addr = "127.0.0.1:0"
	c.Admin.GRPCAddr = "127.0.0.1:0"
	// The lifecycle test leaves a reflection stream open: shutdown must cut it after a third
	// of this bound and still finish its other steps.
	c.ShutdownTimeout = jsontime.Duration(6 * time.Second)
	return c
}

// TestServeLifecycle starts `all`, checks health, reflection, metrics and a GetFeed, then
// stops it and checks that it went not-ready, returned cleanly and released its stores.
func TestServeLifecycle(t *testing.T) {
	cfg := testConfig(t)
	cfg.Admin.Pprof = true
	a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if !a.workerWired {
		t.Error("all: worker handlers not registered")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()

	conn, err := grpc.NewClient(a.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	waitStatus(t, hc, "", healthpb.HealthCheckResponse_SERVING)
	for _, svc := range []string{"smartfeed.feed.v1.FeedService", "smartfeed.generator.v1.GeneratorService", livenessService} {
		if r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %s = %v, %v; want SERVING", svc, r.GetStatus(), err)
		}
	}
	// Reflection lists the services (what grpcurl needs without proto files).
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "smartfeed.feed.v1.FeedService") {
		t.Errorf("reflection lists %v, want FeedService among them", names)
	}
	// The admin plane is not on the public port at all.
	if strings.Contains(strings.Join(names, " "), "FeedAdmin") {
		t.Errorf("the public port serves FeedAdmin: %v", names)
	}
	if _, err := feedv1.NewFeedAdminClient(conn).GetHedgePolicy(t.Context(), &feedv1.GetHedgePolicyRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("FeedAdmin on the public port: %v, want Unimplemented", err)
	}
	// An empty feed of a user that exists is served (nothing fanned out yet); a user that was
	// never created is NotFound; a bad ID is refused.
	fc := feedv1.NewFeedServiceClient(conn)
	u, err := graphv1.NewGraphServiceClient(conn).CreateUser(t.Context(), &graphv1.CreateUserRequest{Username: "lifecycle", Email: "lifecycle@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserId: u.GetId()}); err != nil {
		t.Errorf("GetFeed of a user that exists: %v", err)
	}
	if _, err := fc.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserIdStr: "241294629943640797"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetFeed of a user never created: %v, want NotFound", err)
	}
	if _, err := fc.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserIdStr: "nope"}); err == nil {
		t.Error("GetFeed of a bad ID: no error")
	}
	for path, want := range map[string]string{"/metrics": "smartfeed_hedge_policy", "/readyz": "ready", "/debug/pprof/": "goroutine"} {
		body := httpGet(t, "http://"+a.adminAddr()+path)
		if !strings.Contains(body, want) {
			t.Errorf("GET %s: %.200q does not contain %q", path, body, want)
		}
	}
	// pprof has no cmdline page: it would show the process's arguments.
	if resp, err := http.Get("http://" + a.adminAddr() + "/debug/pprof/cmdline"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/debug/pprof/cmdline is served")
		}
	}
	// The hedge command reads and changes the live policy.
	var out bytes.Buffer
	args := []string{"hedge", "set", "--cutoff", "7ms", "--budget", "0.05", "--admin-grpc-addr", a.adminGRPCAddr(), "--admin-addr", a.adminAddr()}
	if err := run(t.Context(), args, &out, io.Discard); err != nil {
		t.Fatalf("hedge set: %v", err)
	}
	if p := a.feed.Hedger().Policy(); p.Mode != "fixed" || p.Delay != 7*time.Millisecond || p.Budget != 0.05 {
		t.Errorf("policy after hedge set = %+v, want fixed 7ms budget 0.05", p)
	}
	out.Reset()
	if err := run(t.Context(), []string{"hedge", "--admin-grpc-addr", a.adminGRPCAddr(), "--admin-addr", a.adminAddr()}, &out, io.Discard); err != nil {
		t.Fatalf("hedge show: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "mode           fixed") || !strings.Contains(s, "primary") ||
		!strings.Contains(s, "standby fed by    change-log replicator") || !strings.Contains(s, "staleness bound   30s") ||
		!strings.Contains(s, "standby reads     served") {
		t.Errorf("hedge show output:\n%s", s)
	}
	if err := run(t.Context(), []string{"hedge", "set", "--budget", "2", "--admin-grpc-addr", a.adminGRPCAddr()}, io.Discard, io.Discard); err == nil {
		t.Error("hedge set --budget 2: no error")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancel")
	}
	if a.ready.Load() {
		t.Error("still ready after shutdown")
	}
	// The stores are closed: Pebble's lock is free again.
	for _, name := range []string{storeMain, storePrimary, storeStandby} {
		s, err := zenpebble.Open(filepath.Join(cfg.Storage.DataDir, name))
		if err != nil {
			t.Fatalf("reopen %s after shutdown: %v", name, err)
		}
		_ = s.Close()
	}
}

func waitStatus(t *testing.T, hc healthpb.HealthClient, svc string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err == nil && r.GetStatus() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %q: %v, %v; want %v", svc, r.GetStatus(), err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSetReadyFlipsHealth checks the first shutdown step on its own: readiness off turns the
// overall and per-service health NOT_SERVING while liveness stays SERVING.
func TestSetReadyFlipsHealth(t *testing.T) {
	a := &app{role: roleGenerator, cfg: config.DefaultConfig(), log: zap.NewNop()}
	if err := a.buildGRPC(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.grpc.Stop)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := a.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("check %q: %v", svc, err)
		}
		return r.GetStatus()
	}
	if check("") != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("ready before run")
	}
	a.setReady(true)
	if check("") != healthpb.HealthCheckResponse_SERVING || check(livenessService) != healthpb.HealthCheckResponse_SERVING {
		t.Error("not serving after setReady(true)")
	}
	a.setReady(false)
	if check("") != healthpb.HealthCheckResponse_NOT_SERVING || check("grpc.reflection.v1.ServerReflection") != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Error("still serving after setReady(false)")
	}
	if check(livenessService) != healthpb.HealthCheckResponse_SERVING {
		t.Error("liveness dropped with readiness")
	}
}

// TestRunRefusesBadConfig: a bad flag or value fails before anything starts.
func TestRunRefusesBadConfig(t *testing.T) {
	for _, args := range [][]string{
		{"all", "--storage", "mysql"},
		{"feedsvc", "--hedge-budget", "3"},
		{"worker", "--no-such-flag"},
	} {
		var stderr bytes.Buffer
		if err := run(t.Context(), args, io.Discard, &stderr); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestRunNeedsOnlyItsStores: on HBase each role needs the ZooKeeper quorums of the clusters it
// opens, and only those. With nothing listening at the quorums given, a role whose addresses
// are complete gets as far as its dependency check (which names what is unreachable); a role
// missing one of its own is refused as an invalid config naming the setting.
func TestRunNeedsOnlyItsStores(t *testing.T) {
	const dead = "127.0.0.1:1" // nothing listens on port 1
	// The quorums come from the flags alone: make test exports the test HBases' addresses.
	for _, v := range []string{"SMARTFEED_HBASE_POOLS_ZK", "SMARTFEED_HBASE_PRIMARY_ZK", "SMARTFEED_HBASE_STANDBY_ZK"} {
		t.Setenv(v, "")
	}
	base := []string{"--storage", "hbase", "--redis-addr", dead}
	pools := []string{"--hbase-pools-zk", dead}
	feed := []string{"--hbase-primary-zk", dead, "--hbase-standby-zk", "127.0.0.2:1"}
	for _, tc := range []struct {
		role  string
		flags [][]string
		want  string // in the error
	}{
		{roleGraph, [][]string{pools}, "is unreachable"},
		{roleWorker, [][]string{pools}, "is unreachable"},
		{roleGenerator, [][]string{pools}, "is unreachable"},
		{roleFeed, [][]string{feed, {"--generator-addr", "gen:9090"}}, "is unreachable"},
		{roleFeed, [][]string{pools, feed}, "is unreachable"},
		{roleAll, [][]string{pools, feed}, "is unreachable"},
		{roleGraph, nil, "storage.hbase.pools_zk: empty"},
		{roleFeed, [][]string{pools}, "storage.hbase.primary_zk: empty"},
		{roleFeed, [][]string{feed}, "storage.hbase.pools_zk: empty"},
		{roleAll, [][]string{pools}, "storage.hbase.standby_zk: empty"},
	} {
		args := append([]string{tc.role}, base...)
		for _, f := range tc.flags {
			args = append(args, f...)
		}
		err := run(t.Context(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("smartfeed %s: error %v, want one containing %q", strings.Join(args, " "), err, tc.want)
		}
	}
}

// TestBackgroundLanes: feed.background_lanes 0 is feedsvc's default (half the processors) on
// Pebble and no bound on HBase; a value set is kept on either.
func TestBackgroundLanes(t *testing.T) {
	for _, tc := range []struct {
		backend string
		set     int
		want    int
	}{
		{config.BackendPebble, 0, feedsvc.DefaultBackgroundLanes()},
		{config.BackendHBase, 0, feedsvc.MaxBackgroundLanes},
		{config.BackendPebble, 3, 3},
		{config.BackendHBase, 2, 2},
	} {
		c := config.DefaultConfig()
		c.Storage.Backend, c.Feed.BackgroundLanes = tc.backend, tc.set
		if got := backgroundLanes(c); got != tc.want {
			t.Errorf("backgroundLanes(%s, %d) = %d, want %d", tc.backend, tc.set, got, tc.want)
		}
	}
}

// TestFeedConfigDefaultsAreTheService: the binary's default configuration, mapped to the feed
// service's, is the service's own default except the binary's documented opt-ins; a feedsvc
// knob whose default the binary drops or changes shows here.
func TestFeedConfigDefaultsAreTheService(t *testing.T) {
	want := feedsvc.DefaultConfig()
	want.PrepareAfter, want.MinChunkInterval = config.DefaultPrepareAfter, config.DefaultMinChunkInterval
	want.PrepareReturning = true
	if diff := cmp.Diff(want, feedConfig(config.DefaultConfig())); diff != "" {
		t.Errorf("feedConfig(config.DefaultConfig()) (-feedsvc default +binary):\n%s", diff)
	}
	// On HBase the generator calls at once are not bounded unless asked for.
	hb := config.DefaultConfig()
	hb.Storage.Backend = config.BackendHBase
	if got := feedConfig(hb).MaxGenerating; got != feedsvc.MaxMaxInflight {
		t.Errorf("feedConfig on hbase: max generating %d, want %d (no bound)", got, feedsvc.MaxMaxInflight)
	}
	hb.Feed.MaxGenerating = 3
	if got := feedConfig(hb).MaxGenerating; got != 3 {
		t.Errorf("feedConfig on hbase with feed.max_generating 3: %d", got)
	}
}
