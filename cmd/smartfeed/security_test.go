package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestAuditLogsBeforeAndAfter: an admin Set* call is logged with the caller, the request, the
// state before and the state after; a Get is not.
func TestAuditLogsBeforeAndAfter(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	state := "old"
	audit := auditUnary(zap.New(core), func(context.Context, string, any) any { return state })
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
	if f["method"] != "/smartfeed.feed.v1.FeedAdmin/SetServiceConfig" || f["before"] != "old" || f["after"] != "new" || f["request"] != "new" {
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
	a.setReady(true)
	var fail atomic.Bool
	fail.Store(true)
	deps := []dep{
		{"redis", func(context.Context) error { return nil }},
		{"hbase main store", func(context.Context) error {
			if fail.Load() {
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
	time.Sleep(100 * time.Millisecond) // several more failing checks
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
