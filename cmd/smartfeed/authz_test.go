package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/internal/config"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// TestAuthMatrix calls every method of every service of both ports (found from the servers, so
// a new method cannot be forgotten) with every kind of credential: none, a forged token (another
// key), an expired one, a ten-year one, the admin credential, the acting user's token, another
// user's token, a service token of each scope, and user tokens carrying service scopes (which
// grant a user nothing beyond their own calls). Each gets what auth.Policy says: Unauthenticated without a
// valid token; PermissionDenied for another user's data or a missing scope; through to the
// service otherwise. The admin port takes the admin credential only.
func TestAuthMatrix(t *testing.T) {
	dir := t.TempDir()
	key, jwks, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	forger, _, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	forger.KeyID = key.KeyID // same key ID, wrong key
	jwksPath, tokenPath := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "admin-token")
	adminToken := "admin-credential-0123456789abcdef"
	if err := os.WriteFile(jwksPath, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenPath, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, conn := startAllWith(t, func(c *config.Config) {
		c.Auth.JWKSFile = jwksPath
		c.Admin.TokenFile = tokenPath
		c.Feed.Faults = true
	})
	adminConn, err := grpc.NewClient(a.adminGRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer adminConn.Close()

	sign := func(sub string, scopes ...string) string {
		raw, err := auth.Mint(key, auth.Token{Subject: sub, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	with := func(tok string) context.Context {
		if tok == "" {
			return t.Context()
		}
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	// Fixtures, made by a signup service.
	svc := with(sign("signup", auth.ScopeGraphWrite))
	g := graphv1.NewGraphServiceClient(conn)
	mk := func(name string) uint64 {
		u, err := g.CreateUser(svc, &graphv1.CreateUserRequest{Username: name, Email: name + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetId()
	}
	alice, bob := mk("alice"), mk("bob")
	board, err := g.CreateBoard(svc, &graphv1.CreateBoardRequest{OwnerId: alice, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	pin, err := g.CreatePin(svc, &graphv1.CreatePinRequest{AuthorId: alice, BoardId: board.GetId(), ImageUrl: "https://i.example.com/a.jpg"})
	if err != nil {
		t.Fatal(err)
	}
	aliceSub, bobSub := "user:"+fmt.Sprint(alice), "user:"+fmt.Sprint(bob)

	forged, err := auth.Mint(forger, auth.Token{Subject: aliceSub, Scopes: []string{auth.ScopeGraphWrite, auth.ScopeFeedRead}})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := auth.Mint(key, auth.Token{Subject: aliceSub, Now: time.Now().Add(-3 * time.Hour), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	type cred struct {
		name, token string
		user        bool     // the acting user (alice)
		other       bool     // another user (bob)
		scopes      []string // a service's
		valid       bool
	}
	creds := []cred{
		{name: "none"},
		{name: "forged", token: forged},
		{name: "expired", token: expired},
		{name: "admin credential", token: adminToken},
		{name: "acting user", token: sign(aliceSub), user: true, valid: true},
		{name: "another user", token: sign(bobSub), other: true, valid: true},
	}
	longLived, err := auth.Mint(key, auth.Token{Subject: "svc-long", Scopes: []string{auth.ScopeGraphWrite}, TTL: 10 * 365 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	creds = append(creds, cred{name: "a ten-year token", token: longLived})
	all := []string{auth.ScopeFeedRead, auth.ScopeGraphWrite, auth.ScopeIngest, auth.ScopeGenerator}
	for _, s := range all {
		creds = append(creds, cred{name: "service " + s, token: sign("svc-"+s, s), scopes: []string{s}, valid: true})
		// A user's token carrying a service scope is still that user's token and nothing more.
		creds = append(creds, cred{name: "another user with scope " + s, token: sign(bobSub, s), other: true, valid: true})
	}
	creds = append(creds,
		cred{name: "acting user with every scope", token: sign(aliceSub, all...), user: true, valid: true},
		cred{name: "another user with every scope", token: sign(bobSub, all...), other: true, valid: true})

	// Every unary method of the public port, destructive ones last.
	type method struct{ svc, name string }
	var methods []method
	for svc, info := range a.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			if !m.IsClientStream && !m.IsServerStream {
				methods = append(methods, method{svc, m.Name})
			}
		}
	}
	last := map[string]int{"DeletePin": 1, "DeleteUser": 2}
	sort.Slice(methods, func(i, j int) bool {
		if last[methods[i].name] != last[methods[j].name] {
			return last[methods[i].name] < last[methods[j].name]
		}
		return methods[i].svc+methods[i].name < methods[j].svc+methods[j].name
	})
	request := func(md protoreflect.MethodDescriptor) *dynamicpb.Message {
		in := dynamicpb.NewMessage(md.Input())
		fields := md.Input().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if f.Name() == "include_objects" {
				// GetFeed's option answers under the method's own rule: another user's
				// pins come with that user's feed to nobody else.
				in.Set(f, protoreflect.ValueOfBool(true))
				continue
			}
			if f.IsList() || f.IsMap() || (f.Kind() != protoreflect.Fixed64Kind && f.Kind() != protoreflect.Uint64Kind) {
				continue
			}
			var v uint64
			switch f.Name() {
			case "user_id", "owner_id", "author_id", "user":
				v = alice
			case "target_id":
				v = bob
			case "board_id":
				v = board.GetId()
			case "pin_id":
				v = pin.GetId()
			}
			if v != 0 {
				in.Set(f, protoreflect.ValueOfUint64(v))
			}
		}
		return in
	}
	calls := 0
	for _, m := range methods {
		full := "/" + m.svc + "/" + m.name
		rule, ok := auth.Policy[full]
		if !ok {
			t.Errorf("%s has no rule in auth.Policy: every caller is refused", full)
			continue
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(m.svc))
		if err != nil {
			t.Fatal(err)
		}
		md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(m.name))
		// Refusals first: an allowed destructive call must not change what a later one sees.
		ordered := slices.Clone(creds)
		sort.SliceStable(ordered, func(i, j int) bool { return !ordered[i].valid && ordered[j].valid })
		for _, c := range ordered {
			var want string // "unauthenticated", "denied", "through"
			switch {
			case rule.Public:
				want = "through"
			case !c.valid:
				want = "unauthenticated"
			case rule.AnyCaller:
				want = "through"
			case len(c.scopes) > 0 && slices.ContainsFunc(c.scopes, func(s string) bool { return slices.Contains(rule.Scopes, s) }):
				want = "through"
			case c.user && (rule.Self != "" || rule.Owner != ""):
				want = "through"
			default:
				want = "denied"
			}
			ctx, cancel := context.WithTimeout(with(c.token), 10*time.Second)
			err := conn.Invoke(ctx, full, request(md), dynamicpb.NewMessage(md.Output()))
			cancel()
			calls++
			code := status.Code(err)
			var got string
			switch {
			case code == codes.Unauthenticated:
				got = "unauthenticated"
			case code == codes.PermissionDenied:
				got = "denied"
			default:
				got = "through"
			}
			if got != want {
				t.Errorf("%s with %s: %v (%v), want %s", full, c.name, code, status.Convert(err).Message(), want)
			}
		}
	}
	if len(methods) < 25 {
		t.Errorf("only %d methods found on the public port", len(methods))
	}

	// The admin port: FeedAdmin, with the admin credential only.
	var admin []method
	for svc, info := range a.adminGRPC.GetServiceInfo() {
		if strings.HasPrefix(svc, "grpc.") {
			continue
		}
		for _, m := range info.Methods {
			admin = append(admin, method{svc, m.Name})
		}
	}
	if len(admin) < 6 {
		t.Fatalf("admin port methods: %v", admin)
	}
	for _, m := range admin {
		full := "/" + m.svc + "/" + m.name
		d, _ := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(m.svc))
		md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(m.name))
		for _, c := range append(creds, cred{name: "admin credential", token: adminToken, valid: true}) {
			isAdmin := c.token == adminToken
			if strings.HasPrefix(m.name, "Set") && isAdmin {
				continue // a Get is enough to show the door opens; no knob is changed here
			}
			ctx, cancel := context.WithTimeout(with(c.token), 10*time.Second)
			err := adminConn.Invoke(ctx, full, request(md), dynamicpb.NewMessage(md.Output()))
			cancel()
			calls++
			if code := status.Code(err); isAdmin != (code != codes.Unauthenticated) {
				t.Errorf("admin %s with %s: %v", full, c.name, code)
			}
		}
		if err := conn.Invoke(t.Context(), full, request(md), dynamicpb.NewMessage(md.Output())); status.Code(err) != codes.Unimplemented && status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s on the public port: %v, want it absent", full, err)
		}
	}
	t.Logf("%d calls over %d public and %d admin methods", calls, len(methods), len(admin))
}

// TestRateLimitWired: with authentication on, a user's calls past its burst get
// RESOURCE_EXHAUSTED from the running server; another user still gets through.
func TestRateLimitWired(t *testing.T) {
	dir := t.TempDir()
	key, jwks, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	_, conn := startAllWith(t, func(c *config.Config) {
		c.Auth.JWKSFile = path
		c.Auth.UserRate, c.Auth.UserBurst = 0.5, 3
	})
	sign := func(sub string, scopes ...string) context.Context {
		raw, err := auth.Mint(key, auth.Token{Subject: sub, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+raw)
	}
	g := graphv1.NewGraphServiceClient(conn)
	svc := sign("signup", auth.ScopeGraphWrite)
	var users []uint64
	for _, n := range []string{"rl_a", "rl_b"} {
		u, err := g.CreateUser(svc, &graphv1.CreateUserRequest{Username: n, Email: n + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u.GetId())
	}
	a := sign("user:" + fmt.Sprint(users[0]))
	codesSeen := []codes.Code{}
	for range 4 {
		_, err := g.GetUser(a, &graphv1.GetUserRequest{UserId: users[0]})
		codesSeen = append(codesSeen, status.Code(err))
	}
	if want := []codes.Code{codes.OK, codes.OK, codes.OK, codes.ResourceExhausted}; !slices.Equal(codesSeen, want) {
		t.Errorf("a user's 4 calls: %v, want %v", codesSeen, want)
	}
	if _, err := g.GetUser(sign("user:"+fmt.Sprint(users[1])), &graphv1.GetUserRequest{UserId: users[1]}); err != nil {
		t.Errorf("another user: %v", err)
	}
}
