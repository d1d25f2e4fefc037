package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/internal/config"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

func TestConsoleReach(t *testing.T) {
	tests := []struct {
		name                  string
		http, grpc, adminGRPC string
		wantPublic, wantAdmin bool
	}{
		{name: "all on loopback", http: "127.0.0.1:9091", grpc: "127.0.0.1:9090", adminGRPC: "127.0.0.1:9092",
			wantPublic: true, wantAdmin: true},
		{name: "console on localhost, ports open", http: "localhost:9091", grpc: ":9090", adminGRPC: ":9092",
			wantPublic: true, wantAdmin: true},
		{name: "console open, ports on loopback", http: ":9091", grpc: "127.0.0.1:9090", adminGRPC: "127.0.0.1:9092"},
		{name: "console open, public port open, admin port on loopback (the chart)", http: "0.0.0.0:9091",
			grpc: "0.0.0.0:9090", adminGRPC: "127.0.0.1:9092", wantPublic: true},
		{name: "console open, both ports open", http: "0.0.0.0:9091", grpc: "0.0.0.0:9090", adminGRPC: "0.0.0.0:9092",
			wantPublic: true, wantAdmin: true},
		{name: "console open, no admin port", http: "0.0.0.0:9091", grpc: "0.0.0.0:9090", wantPublic: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.DefaultConfig()
			cfg.Admin.Addr, cfg.GRPC.Addr, cfg.Admin.GRPCAddr = tt.http, tt.grpc, tt.adminGRPC
			public, admin := consoleReach(cfg)
			if diff := cmp.Diff([2]bool{tt.wantPublic, tt.wantAdmin}, [2]bool{public, admin}); diff != "" {
				t.Errorf("consoleReach [public admin] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConsoleAuth calls the console's JSON API of a running `all` with authentication on: each
// call gets what the gRPC port behind it decides (the public port's method table, the admin
// port's credential), and methods the console does not use are not reachable at all.
func TestConsoleAuth(t *testing.T) {
	dir := t.TempDir()
	key, jwks, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	jwksPath, tokenPath := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "admin-token")
	const adminToken = "admin-credential-0123456789abcdef"
	if err := os.WriteFile(jwksPath, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenPath, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, conn := startAllWith(t, func(c *config.Config) {
		c.Auth.JWKSFile = jwksPath
		c.Admin.TokenFile = tokenPath
	})
	sign := func(sub string, scopes ...string) string {
		raw, err := auth.Mint(key, auth.Token{Subject: sub, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	svc := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+sign("signup", auth.ScopeGraphWrite))
	g := graphv1.NewGraphServiceClient(conn)
	alice, err := g.CreateUser(svc, &graphv1.CreateUserRequest{Username: "alice", Email: "alice@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := g.CreateUser(svc, &graphv1.CreateUserRequest{Username: "bob", Email: "bob@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	aliceTok := sign(fmt.Sprint("user:", alice.GetId()))
	base := "http://" + a.adminAddr() + "/console/rpc/"
	feed := func(user string) string { return fmt.Sprintf(`{"userIdStr":%q}`, user) }

	tests := []struct {
		name, method, token, body string
		want                      int    // HTTP status
		wantCode                  string // Connect error code ("" on success)
	}{
		{"a feed without a token", "smartfeed.feed.v1.FeedService/GetFeed", "", feed(alice.GetIdStr()), 401, "unauthenticated"},
		{"alice's feed, alice's token", "smartfeed.feed.v1.FeedService/GetFeed", aliceTok, feed(alice.GetIdStr()), 200, ""},
		{"bob's feed, alice's token", "smartfeed.feed.v1.FeedService/GetFeed", aliceTok, feed(bob.GetIdStr()), 403, "permission_denied"},
		{"a user by name, alice's token", "smartfeed.graph.v1.GraphService/GetUserByName", aliceTok, `{"username":"bob"}`, 200, ""},
		{"a user by name, no token", "smartfeed.graph.v1.GraphService/GetUserByName", "", `{"username":"bob"}`, 401, "unauthenticated"},
		{"a write the console does not make", "smartfeed.graph.v1.GraphService/Follow", aliceTok, `{}`, 404, ""},
		{"FeedAdmin, a user's token", "smartfeed.feed.v1.FeedAdmin/GetHedgePolicy", aliceTok, `{}`, 401, "unauthenticated"},
		{"FeedAdmin, the admin credential", "smartfeed.feed.v1.FeedAdmin/GetHedgePolicy", adminToken, `{}`, 200, ""},
		{"FeedAdmin's validation", "smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", adminToken, `{"mode":"fixed","delayMs":5,"budget":3}`, 400, "invalid_argument"},
		{"QueueAdmin, no token", "smartfeed.pinlater.v1.QueueAdmin/ListQueues", "", `{}`, 401, "unauthenticated"},
		{"QueueAdmin, the admin credential", "smartfeed.pinlater.v1.QueueAdmin/ListQueues", adminToken, `{}`, 200, ""},
		{"a queue paused without the credential", "smartfeed.pinlater.v1.QueueAdmin/SetQueuePaused", aliceTok, `{"queue":"bulk","paused":true}`, 401, "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+tt.method, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Code string }
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
				_ = json.Unmarshal(b, &e)
			}
			if diff := cmp.Diff([2]any{tt.want, tt.wantCode}, [2]any{resp.StatusCode, e.Code}); diff != "" {
				t.Errorf("%s: [status code] (-want +got):\n%s\nbody: %s", tt.method, diff, b)
			}
		})
	}
}
