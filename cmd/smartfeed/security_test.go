package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/testenv"
	pinlaterv1 "github.com/smartfeed/smartfeed/proto/pinlater/v1"
)

// TestAuditLogsBeforeAndAfter: an admin Set* call is logged with the caller, the target, the
// outcome, the state before and the state after; a Get is not.
func TestAuditLogsBeforeAndAfter(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	state := "old"
	audit := auditUnary(zap.New(core), "admin credential", func(context.Context, string, any) any { return state })
	set := func(_ context.Context, req any) (any, error) { state = req.(string); return state, nil }
	if _, err := audit(context.Background(), "new", &grpc.UnaryServerInfo{FullMethod: "/smartfeed.feed.v1.FeedAdmin/SetServiceConfig"}, set); err != nil {
		t.Fatal(err)
	}
	if _, err := audit(context.Background(), "x", &grpc.UnaryServerInfo{FullMethod: "/smartfeed.feed.v1.FeedAdmin/GetServiceConfig"},
		func(context.Context, any) (any, error) { return state, nil }); err != nil {
		t.Fatal(err)
	}
	es := logs.All()
	if len(es) != 1 {
		t.Fatalf("%d audit entries, want 1 (the Set only)", len(es))
	}
	f := es[0].ContextMap()
	if f["method"] != "/smartfeed.feed.v1.FeedAdmin/SetServiceConfig" || f["before"] != "old" || f["after"] != "new" || f["target"] != "new" ||
		f["outcome"] != "OK" || !strings.HasPrefix(f["caller"].(string), "admin credential from") {
		t.Errorf("audit entry %v", f)
	}
}

// TestReadinessNamesTheDependency: while a dependency fails, readiness is false and the log says
// which one, once per change of state, not once per check.
func TestReadinessNamesTheDependency(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := testConfigNoServices()
	a := &app{role: roleGenerator, cfg: cfg, log: zap.New(core)}
	if err := a.buildGRPC(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.grpc.Stop)
	a.setReady(true)
	var fail atomic.Bool
	var failed atomic.Int64 // the failing checks so far
	fail.Store(true)
	deps := []dep{
		{"redis", func(context.Context) error { return nil }},
		{"hbase main store", func(context.Context) error {
			if fail.Load() {
				failed.Add(1)
				return errors.New("region server unreachable")
			}
			return nil
		}},
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.watchDeps(ctx, 10*time.Millisecond, deps); close(done) }()
	waitReady := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for a.ready.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("ready never became %v", want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitReady(false)
	seen := failed.Load()
	testenv.WaitFor(t, testenv.WaitTimeout, "several more failing checks", func() bool { return failed.Load() >= seen+5 })
	fail.Store(false)
	waitReady(true)
	cancel()
	<-done
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message+" "+fmt.Sprint(e.ContextMap()["dependency"]))
	}
	want := []string{"not ready: a dependency is unreachable hbase main store", "ready again: dependencies answer <nil>"}
	if !slices.Equal(msgs, want) {
		t.Errorf("log: %q, want %q", msgs, want)
	}
}

// testConfigNoServices is a config on loopback that needs no Redis or store.
func testConfigNoServices() config.Config {
	c := config.DefaultConfig()
	c.GRPC.Addr = "127.0.0.1:0"
	return c
}

// syncBuffer is a bytes.Buffer safe for a logger written from server goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// auditLines returns the JSON lines of the audit logger in log.
func auditLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %.200q: %v", l, err)
		}
		if m["logger"] == "audit" {
			m["bytes"] = len(l)
			out = append(out, m)
		}
	}
	return out
}

// TestAuditLineBounded: a 1 MB request, a 1 MB error and a 1 MB response each make an audit
// line of a few KiB, which still says the method, the caller, the target and the outcome.
func TestAuditLineBounded(t *testing.T) {
	var buf syncBuffer
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(&buf), zapcore.InfoLevel)).Named("audit")
	audit := auditUnary(log, "admin credential", func(context.Context, string, any) any { return &pinlaterv1.Queue{Name: "fanout"} })
	huge := strings.Repeat("q", 1<<20)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}})
	info := &grpc.UnaryServerInfo{FullMethod: "/smartfeed.pinlater.v1.QueueAdmin/SetQueuePaused"}
	_, _ = audit(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: huge, Paused: true}, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "queue "+huge+": bad")
	})
	_, _ = audit(ctx, &pinlaterv1.SetQueuePausedRequest{Queue: "fanout", Paused: true}, info, func(context.Context, any) (any, error) {
		return &pinlaterv1.Queue{Name: huge, Paused: true}, nil
	})
	lines := auditLines(t, buf.String())
	if len(lines) != 2 {
		t.Fatalf("%d audit lines, want 2", len(lines))
	}
	for i, want := range []map[string]any{
		{"method": info.FullMethod, "caller": "admin credential from 127.0.0.1:4242", "outcome": "InvalidArgument"},
		{"method": info.FullMethod, "caller": "admin credential from 127.0.0.1:4242", "outcome": "OK",
			"target": `queue="fanout" paused=true`, "before": `name="fanout"`},
	} {
		l := lines[i]
		if n := l["bytes"].(int); n > 4096 {
			t.Errorf("line %d: %d bytes, want at most 4096", i, n)
		}
		got := map[string]any{}
		for k := range want {
			got[k] = l[k]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("line %d (-want +got):\n%s", i, diff)
		}
		if _, ok := l["request"]; ok {
			t.Errorf("line %d carries the whole request", i)
		}
	}
	if tg, _ := lines[0]["target"].(string); !strings.HasPrefix(tg, `queue="qqqq`) || !strings.Contains(tg, "(1048576 bytes)") || !strings.Contains(tg, "paused=true") {
		t.Errorf("target of the huge request: %.300q", tg)
	}
}

// TestAuditThroughAdminPort: through the running admin gRPC port, Set* calls with a 1 MB queue
// name are each audited in a bounded line naming the method, the caller, the target and the
// refusal.
func TestAuditThroughAdminPort(t *testing.T) {
	var buf syncBuffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&buf), zapcore.InfoLevel))
	a, err := newApp(t.Context(), roleAll, testConfig(t), log, newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(a.adminGRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qa := pinlaterv1.NewQueueAdminClient(conn)
	huge := strings.Repeat("q", 1<<20)
	const calls = 6
	for range calls {
		if _, err := qa.SetQueuePaused(t.Context(), &pinlaterv1.SetQueuePausedRequest{Queue: huge, Paused: true}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("SetQueuePaused with a 1 MB name: %v, want InvalidArgument", err)
		}
	}
	lines := auditLines(t, buf.String())
	if len(lines) != calls {
		t.Fatalf("%d audit lines, want %d", len(lines), calls)
	}
	total := 0
	for _, l := range lines {
		total += l["bytes"].(int)
		caller, _ := l["caller"].(string)
		if l["method"] != "/smartfeed.pinlater.v1.QueueAdmin/SetQueuePaused" || l["outcome"] != "InvalidArgument" ||
			!strings.HasPrefix(caller, "no credential (loopback port) from 127.0.0.1:") || !strings.Contains(l["target"].(string), "(1048576 bytes)") {
			t.Errorf("audit line %v", l)
		}
	}
	if total > calls*4096 {
		t.Errorf("%d audit lines of %d bytes in all, want at most 4 KiB each", calls, total)
	}
	t.Logf("%d audit lines, %d bytes in all", calls, total)
}
