package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/internal/config"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
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

// TestGetFeedIncludeObjects: a page asked with include_objects carries each item's pin and its
// author, so a frontend renders it without a second call; without the option it carries IDs
// only.
func TestGetFeedIncludeObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary's services")
	}
	_, conn := startAll(t)
	g := graphv1.NewGraphServiceClient(conn)
	ctx := t.Context()
	mk := func(name string) *graphv1.User {
		u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ada, bob := mk("ada"), mk("bob")
	board, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ada.GetId(), Name: "Kitchens"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Follow(ctx, &graphv1.FollowRequest{UserId: bob.GetId(), TargetId: ada.GetId()}); err != nil {
		t.Fatal(err)
	}
	pin, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: ada.GetId(), BoardId: board.GetId(),
		Details: "open shelves", ImageUrl: "https://img.example.com/shelves.jpg"})
	if err != nil {
		t.Fatal(err)
	}
	f := feedv1.NewFeedServiceClient(conn)
	// The fanout runs in the background: wait for the pin to reach bob's feed.
	var page *feedv1.GetFeedResponse
	for deadline := time.Now().Add(30 * time.Second); ; {
		if page, err = f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.GetId(), IncludeObjects: true}); err != nil {
			t.Fatal(err)
		}
		if len(page.GetItems()) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, not waiting for time to pass
	}
	if len(page.GetItems()) != 1 {
		t.Fatalf("bob's feed: %v", page.GetItems())
	}
	it := page.GetItems()[0]
	if d := cmp.Diff(pin, it.GetPin(), protocmp.Transform()); d != "" {
		t.Errorf("item's pin (-CreatePin's answer +GetFeed's):\n%s", d)
	}
	if d := cmp.Diff(ada, it.GetAuthor(), protocmp.Transform()); d != "" {
		t.Errorf("item's author (-CreateUser's answer +GetFeed's):\n%s", d)
	}
	// Without the option: IDs only (a later page of the same feed, so no new chunk is taken).
	plain, err := f.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: bob.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plain.GetItems() {
		if it.GetPin() != nil || it.GetAuthor() != nil {
			t.Errorf("an item without include_objects carries objects: %v", it)
		}
	}
}

// TestStartErrorsNameTheirFix: a server that cannot take its address or its data directory says
// which flag and environment variable to change.
func TestStartErrorsNameTheirFix(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*config.Config)
		want []string
	}{
		{"grpc port taken", func(c *config.Config) { c.GRPC.Addr = taken.Addr().String() },
			[]string{"grpc listener", "address already in use", "another process listens there", "--grpc-addr (or SMARTFEED_GRPC_ADDR)"}},
		{"admin port taken", func(c *config.Config) { c.Admin.Addr = taken.Addr().String() },
			[]string{"admin (metrics, console) listener", "address already in use", "--admin-addr (or SMARTFEED_ADMIN_ADDR)"}},
		{"admin gRPC port taken", func(c *config.Config) { c.Admin.GRPCAddr = taken.Addr().String() },
			[]string{"admin gRPC (FeedAdmin) listener", "address already in use", "--admin-grpc-addr (or SMARTFEED_ADMIN_GRPC_ADDR)"}},
		{"data dir unwritable", func(c *config.Config) { c.Storage.DataDir = filepath.Join(file, "data") },
			[]string{"data directory", "not a directory", "pass a writable directory with --data-dir (or SMARTFEED_DATA_DIR)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			tt.mod(&cfg)
			a, err := newApp(t.Context(), roleAll, cfg, zap.NewNop(), newRegistry())
			if err == nil {
				a.closeAll()
				t.Fatal("newApp: no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestServingLineNamesURLs: `all` says at start where its console and its metrics are.
func TestServingLineNamesURLs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	cfg := testConfig(t)
	var logs syncBuffer
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logs), zap.InfoLevel))
	a, err := newApp(t.Context(), roleAll, cfg, lg, newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), `"msg":"serving"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no serving line:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the log for a condition
	}
	for _, w := range []string{`"console":"http://` + a.adminAddr() + `/console/"`, `"metrics":"http://` + a.adminAddr() + `/metrics"`} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("serving line lacks %s:\n%s", w, logs.String())
		}
	}
}
