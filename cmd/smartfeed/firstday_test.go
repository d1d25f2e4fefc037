package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// reflectedServices lists the services a gRPC server names through reflection, as grpcurl's
// `list` does.
func reflectedServices(t *testing.T, addr string) []string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatalf("reflection on %s: %v", addr, err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	slices.Sort(names)
	return names
}

// TestAdminPortReflection: the admin gRPC port answers reflection, so grpcurl reaches FeedAdmin,
// QueueAdmin and ShardAdmin there without proto files, as docs/operations.md shows.
func TestAdminPortReflection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary's services")
	}
	a, _ := startAll(t)
	got := reflectedServices(t, a.adminGRPCAddr())
	want := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
		"smartfeed.feed.v1.FeedAdmin", "smartfeed.pinlater.v1.QueueAdmin", "smartfeed.shard.v1.ShardAdmin"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("admin port's services (-want +got):\n%s", d)
	}
}

// TestHedgeSuggestOnFreshAll: `hedge suggest` against a process that has served nothing yet
// says what it needs and exits 0, rather than failing.
func TestHedgeSuggestOnFreshAll(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary's services")
	}
	a, _ := startAll(t)
	var out bytes.Buffer
	hf := hedgeFlags{grpcAddr: a.adminGRPCAddr(), adminAddr: a.adminAddr(), timeout: 10 * time.Second}
	if err := hedgeSuggest(t.Context(), hf, &out, []time.Duration{time.Millisecond}, 10000); err != nil {
		t.Fatalf("hedge suggest on a fresh all: %v", err)
	}
	if !strings.Contains(out.String(), "nothing to replay yet") || !strings.Contains(out.String(), "Serve some feeds") {
		t.Errorf("hedge suggest on a fresh all printed:\n%s", out.String())
	}
}
