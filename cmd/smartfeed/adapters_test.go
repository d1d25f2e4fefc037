package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/smartfeed/smartfeed/auth"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestSplitRoles runs a generator process and a feedsvc process that reaches it over gRPC
// (the shape of the Helm chart): pins put in the user's pools come back fresh from GetFeed;
// with authentication on, the feed process presents its generator token; include_objects reads
// the page's pins from the generator process's graph.
func TestSplitRoles(t *testing.T) {
	t.Run("plain", func(t *testing.T) { splitRoles(t, false, false) })
	t.Run("authenticated", func(t *testing.T) { splitRoles(t, true, false) })
	t.Run("authenticated over mTLS", func(t *testing.T) { splitRoles(t, true, true) })
}

func splitRoles(t *testing.T, authOn, tlsOn bool) {
	base := testConfig(t)
	dialCreds := insecure.NewCredentials()
	var caFile string
	if tlsOn {
		dir := t.TempDir()
		ca := newTestCA(t)
		caFile = filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		base.TLS.CertFile, base.TLS.KeyFile = ca.issue(t, dir, "role", 7)
		base.TLS.ClientCAFile = caFile
		cf, kf := ca.issue(t, dir, "frontend", 8)
		cc, err := tls.LoadX509KeyPair(cf, kf)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.pem)
		dialCreds = credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cc}})
	}
	var userToken string
	mintFor := func(zen.ID) string { return "" }
	if authOn {
		key, jwks, err := auth.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		base.Auth.JWKSFile = filepath.Join(dir, "jwks.json")
		base.Generator.TokenFile = filepath.Join(dir, "generator-token")
		if err := os.WriteFile(base.Auth.JWKSFile, jwks, 0o600); err != nil {
			t.Fatal(err)
		}
		genTok, err := auth.Mint(key, auth.Token{Subject: "feedsvc", Scopes: []string{auth.ScopeGenerator}})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(base.Generator.TokenFile, []byte(genTok), 0o600); err != nil {
			t.Fatal(err)
		}
		mintFor = func(u zen.ID) string {
			raw, err := auth.Mint(key, auth.Token{Subject: auth.UserSubject(u)})
			if err != nil {
				t.Fatal(err)
			}
			return raw
		}
	}
	gen, err := newApp(t.Context(), roleGenerator, base, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if gen.feed != nil || gen.pinServer != nil || gen.gen == nil {
		t.Fatalf("generator role built feed %v, pinlater server %v, generator %v", gen.feed != nil, gen.pinServer != nil, gen.gen != nil)
	}
	// Fill a user's pool before serving.
	user, _ := zen.NewID(7, zen.TypeUser, 1)
	var entries []zen.PoolEntry
	for i := range 5 {
		// The pin exists in the graph: the generator serves live pins only (graphLiveness).
		obj, err := gen.graph.Create(t.Context(), zen.TypePin, user, map[string]any{"title": "test"})
		if err != nil {
			t.Fatal(err)
		}
		pin := obj.ID
		author, _ := zen.NewID(7, zen.TypeUser, uint64(200+i))
		entries = append(entries, zen.PoolEntry{User: user, Source: zen.SourceFollowing, Score: float64(10 - i), Pin: pin,
			Author: author, CreatedMs: time.Now().UnixMilli(), Reason: "test"})
	}
	if _, err := gen.pools.Insert(t.Context(), entries); err != nil {
		t.Fatal(err)
	}
	fcfg := base
	fcfg.Generator.Addr = "passthrough:///" + gen.grpcAddr()
	fcfg.Generator.CAFile = caFile
	feed, err := newApp(t.Context(), roleFeed, fcfg, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if feed.gen != nil || feed.graph != nil {
		t.Fatal("feedsvc with --generator-addr built an in-process generator or graph")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	go func() { done <- gen.run(ctx) }()
	go func() { done <- feed.run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}()

	conn, err := grpc.NewClient(feed.grpcAddr(), grpc.WithTransportCredentials(dialCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var resp *feedv1.GetFeedResponse
	if userToken = mintFor(user); userToken != "" {
		conn.Close()
		conn, err = grpc.NewClient(feed.grpcAddr(), grpc.WithTransportCredentials(dialCreds),
			grpc.WithPerRPCCredentials(bearerCreds(userToken)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err = feedv1.NewFeedServiceClient(conn).GetFeed(t.Context(), &feedv1.GetFeedRequest{UserId: uint64(user), IncludeObjects: true})
		if err == nil && resp.GetFreshStatus() == feedv1.FreshStatus_FRESH_STATUS_INCLUDED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetFeed: %v, status %v, want a fresh chunk from the remote generator", err, resp.GetFreshStatus())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(resp.GetItems()) != 5 || resp.GetItems()[0].GetPinId() != uint64(entries[0].Pin) || !resp.GetItems()[0].GetFresh() {
		t.Errorf("GetFeed items = %v, want the 5 pool entries best first, fresh", resp.GetItems())
	}
	// include_objects: the pins come from the generator process's graph, over the connection
	// (and with the credentials) the feed process calls it with.
	if resp.GetObjectsUnavailable() {
		t.Errorf("include_objects through the remote generator: objects unavailable: %s", resp.GetObjectsDetail())
	}
	for i, it := range resp.GetItems() {
		if it.GetPin().GetId() != it.GetPinId() {
			t.Errorf("item %d: pin %d carries the object %v, want that pin's", i, it.GetPinId(), it.GetPin())
		}
	}
}
