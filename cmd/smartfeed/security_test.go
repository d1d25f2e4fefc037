package main

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
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
