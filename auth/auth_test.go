package auth

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	boardv1 "github.com/smartfeed/smartfeed/proto/board/v1"
	_ "github.com/smartfeed/smartfeed/proto/engagement/v1"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	_ "github.com/smartfeed/smartfeed/proto/generator/v1" // request types of Policy's methods
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	_ "github.com/smartfeed/smartfeed/proto/ingest/v1"
	"github.com/smartfeed/smartfeed/zen"
)

func userID(t *testing.T, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(3, zen.TypeUser, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// keyFile writes a JWKS file and returns its path and the private key.
func keyFile(t testing.TB) (string, jose.JSONWebKey) {
	t.Helper()
	priv, jwks, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, priv
}

func TestVerify(t *testing.T) {
	path, key := keyFile(t)
	_, other := keyFile(t)
	now := time.Unix(1_800_000_000, 0)
	v, err := NewVerifier(path, "idp", "smartfeed", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	alice := userID(t, 7)
	board, _ := zen.NewID(3, zen.TypeBoard, 9)
	mint := func(k jose.JSONWebKey, mod func(*Token)) string {
		tok := Token{Subject: UserSubject(alice), Issuer: "idp", Audience: "smartfeed", Now: now, Scopes: []string{"feed:read"}}
		if mod != nil {
			mod(&tok)
		}
		raw, err := Mint(k, tok)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	// HS256 signed with the public key's bytes (the classic algorithm confusion).
	hsKey := jose.JSONWebKey{Key: []byte(strings.Repeat("k", 32)), KeyID: key.KeyID, Algorithm: string(jose.HS256)}
	tests := []struct {
		name    string
		raw     string
		want    Principal
		wantErr string
	}{
		{"user token", mint(key, nil), Principal{Subject: UserSubject(alice), User: alice, Scopes: map[string]bool{"feed:read": true}}, ""},
		{"service token", mint(key, func(t *Token) { t.Subject = "frontend"; t.Scopes = []string{"graph:write", "feed:read"} }),
			Principal{Subject: "frontend", Scopes: map[string]bool{"graph:write": true, "feed:read": true}}, ""},
		{"empty", "", Principal{}, "no bearer token"},
		{"garbage", "not.a.jwt", Principal{}, "malformed"},
		{"huge", strings.Repeat("a", 9000), Principal{}, "bytes"},
		{"forged (another key)", mint(other, nil), Principal{}, "not verified"},
		{"HS256 with a made-up secret", mint(hsKey, nil), Principal{}, "not verified"},
		{"expired", mint(key, func(t *Token) { t.Now = now.Add(-2 * time.Hour) }), Principal{}, "expired"},
		{"not yet valid", mint(key, func(t *Token) { t.Now = now.Add(time.Hour) }), Principal{}, "not valid yet"},
		{"wrong issuer", mint(key, func(t *Token) { t.Issuer = "evil" }), Principal{}, "issuer"},
		{"wrong audience", mint(key, func(t *Token) { t.Audience = "other" }), Principal{}, "audience"},
		{"no subject", mint(key, func(t *Token) { t.Subject = "" }), Principal{}, "subject"},
		{"user subject not a user ID", mint(key, func(t *Token) { t.Subject = "user:" + board.String() }), Principal{}, "subject"},
		{"user subject not a number", mint(key, func(t *Token) { t.Subject = "user:alice" }), Principal{}, "subject"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.Verify(tc.raw)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want unauthenticated: %q", err, tc.wantErr)
				}
				if len(tc.raw) > 20 && strings.Contains(err.Error(), tc.raw[:20]) {
					t.Errorf("error echoes the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeyRotation: a key added to the JWKS file is used without a restart.
func TestKeyRotation(t *testing.T) {
	path, key := keyFile(t)
	v, err := NewVerifier(path, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	next, nextSet, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := Mint(next, Token{Subject: "svc"})
	if _, err := v.Verify(raw); err == nil {
		t.Fatal("a token of an unknown key verified")
	}
	var old, add jose.JSONWebKeySet
	b, _ := os.ReadFile(path)
	_ = json.Unmarshal(b, &old)
	_ = json.Unmarshal(nextSet, &add)
	old.Keys = append(old.Keys, add.Keys...)
	b, _ = json.Marshal(old)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(path, later, later)
	v.mu.Lock()
	v.checked = time.Time{}
	v.mu.Unlock()
	if _, err := v.Verify(raw); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	oldRaw, _ := Mint(key, Token{Subject: "svc"})
	if _, err := v.Verify(oldRaw); err != nil {
		t.Fatalf("the old key after rotation: %v", err)
	}
}

type owners map[zen.ID]zen.ID

func (o owners) Owner(_ context.Context, id zen.ID) (zen.ID, error) {
	if u, ok := o[id]; ok {
		return u, nil
	}
	return 0, zen.ErrNotFound
}

// TestAuthorize: the rules of a few methods, for each kind of caller.
func TestAuthorize(t *testing.T) {
	path, key := keyFile(t)
	v, err := NewVerifier(path, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := userID(t, 1), userID(t, 2)
	board, _ := zen.NewID(3, zen.TypeBoard, 9)
	a, err := NewAuthorizer(v, owners{board: alice}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := func(sub string, scopes ...string) string {
		raw, err := Mint(key, Token{Subject: sub, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	call := func(method, token string, req any) codes.Code {
		ctx := context.Background()
		if token != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
		}
		_, err := a.Unary()(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	getFeed := &feedv1.GetFeedRequest{UserId: uint64(alice)}
	getFeedStr := &feedv1.GetFeedRequest{UserIdStr: alice.String()}
	follow := &graphv1.FollowRequest{UserId: uint64(alice), TargetId: uint64(bob)}
	for _, tc := range []struct {
		name   string
		method string
		token  string
		req    any
		want   codes.Code
	}{
		{"feed: no token", feedSvc + "GetFeed", "", getFeed, codes.Unauthenticated},
		{"feed: own", feedSvc + "GetFeed", tok(UserSubject(alice)), getFeed, codes.OK},
		{"feed: own, by string", feedSvc + "GetFeed", tok(UserSubject(alice)), getFeedStr, codes.OK},
		{"feed: another user's", feedSvc + "GetFeed", tok(UserSubject(bob)), getFeed, codes.PermissionDenied},
		{"feed: service with feed:read", feedSvc + "GetFeed", tok("frontend", ScopeFeedRead), getFeed, codes.OK},
		{"feed: service without", feedSvc + "GetFeed", tok("frontend", ScopeIngest), getFeed, codes.PermissionDenied},
		{"follow on someone's behalf", graphSvc + "Follow", tok(UserSubject(bob)), follow, codes.PermissionDenied},
		{"follow as oneself", graphSvc + "Follow", tok(UserSubject(alice)), follow, codes.OK},
		{"board move by its owner", boardSvc + "ReorderPin", tok(UserSubject(alice)), &boardv1.ReorderPinRequest{BoardId: uint64(board)}, codes.OK},
		{"board move by another user", boardSvc + "ReorderPin", tok(UserSubject(bob)), &boardv1.ReorderPinRequest{BoardId: uint64(board)}, codes.PermissionDenied},
		{"board move, board by string", boardSvc + "ReorderPin", tok(UserSubject(bob)), &boardv1.ReorderPinRequest{BoardIdStr: board.String()}, codes.PermissionDenied},
		{"board move of an unknown board (the service says NotFound)", boardSvc + "ReorderPin", tok(UserSubject(bob)), &boardv1.ReorderPinRequest{BoardId: uint64(board) + 1}, codes.OK},
		{"public read", graphSvc + "GetObjects", tok(UserSubject(bob)), &graphv1.GetObjectsRequest{}, codes.OK},
		{"public read without a token", graphSvc + "GetObjects", "", &graphv1.GetObjectsRequest{}, codes.Unauthenticated},
		{"health without a token", "/grpc.health.v1.Health/Check", "", nil, codes.OK},
		{"a method with no rule", "/smartfeed.feed.v1.FeedAdmin/SetServiceConfig", tok("ops", ScopeGraphWrite, ScopeFeedRead), nil, codes.PermissionDenied},
		{"ingest by a producer", ingestSvc + "Publish", tok("producer", ScopeIngest), nil, codes.OK},
		{"ingest by a user", ingestSvc + "Publish", tok(UserSubject(alice)), nil, codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := call(tc.method, tc.token, tc.req); got != tc.want {
				t.Errorf("code %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzVerify: no input makes the token parser panic, and random bytes never verify.
func FuzzVerify(f *testing.F) {
	path, key := keyFile(f)
	v, err := NewVerifier(path, "", "", nil)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := Mint(key, Token{Subject: "svc"})
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("a.b.c")
	f.Add(strings.Repeat(".", 100))
	b := make([]byte, 64)
	_, _ = rand.Read(b)
	f.Add(string(b))
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := v.Verify(raw)
		if err == nil && raw != good {
			t.Fatalf("input %q verified as %+v", raw, p)
		}
	})
}

// TestVerifyLifetime: a token living longer than the configured maximum is refused, whether
// its lifetime shows as exp - iat, exp - nbf, or (with neither) exp - now.
func TestVerifyLifetime(t *testing.T) {
	path, key := keyFile(t)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	def, err := NewVerifier(path, "", "", clock)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := NewVerifier(path, "", "", clock, WithMaxLifetime(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mint := func(ttl time.Duration) string {
		raw, err := Mint(key, Token{Subject: "svc", Now: now, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	// raw signs claims as given (no iat or nbf unless set).
	raw := func(claims map[string]any) string {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(claims)
		obj, err := sig.Sign(b)
		if err != nil {
			t.Fatal(err)
		}
		s, err := obj.CompactSerialize()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tenYears := 10 * 365 * 24 * time.Hour
	tests := []struct {
		name    string
		v       *Verifier
		raw     string
		wantErr string
	}{
		{"one hour, default cap", def, mint(time.Hour), ""},
		{"24 hours, default cap", def, mint(24 * time.Hour), ""},
		{"25 hours, default cap", def, mint(25 * time.Hour), "lifetime 25h0m0s is longer than the 24h0m0s"},
		{"ten years, default cap", def, mint(tenYears), "lifetime"},
		{"ten years without iat or nbf", def, raw(map[string]any{"sub": "svc", "exp": now.Add(tenYears).Unix()}), "lifetime"},
		{"ten years from nbf", def, raw(map[string]any{"sub": "svc", "nbf": now.Unix(), "exp": now.Add(tenYears).Unix()}), "lifetime"},
		{"iat long ago, exp soon", def, raw(map[string]any{"sub": "svc", "iat": now.Add(-30 * 24 * time.Hour).Unix(), "exp": now.Add(time.Minute).Unix()}), "lifetime"},
		{"no exp", def, raw(map[string]any{"sub": "svc", "iat": now.Unix()}), "without an expiry"},
		{"one hour, one-hour cap", hour, mint(time.Hour), ""},
		{"two hours, one-hour cap", hour, mint(2 * time.Hour), "longer than the 1h0m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.v.Verify(tc.raw)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want unauthenticated: %q", err, tc.wantErr)
			}
		})
	}
}

// TestUserScopesGrantNothing: over every rule of Policy, a user's token that also carries
// every service scope gets exactly what the same user's token without scopes gets: through
// for its own calls (Self, Owner) and for AnyCaller reads, refused for another user's data
// and for service-only methods. A service token with the rule's scope still gets through.
func TestUserScopesGrantNothing(t *testing.T) {
	path, key := keyFile(t)
	v, err := NewVerifier(path, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := userID(t, 1), userID(t, 2)
	aliceBoard, _ := zen.NewID(3, zen.TypeBoard, 9)
	bobBoard, _ := zen.NewID(3, zen.TypeBoard, 10)
	a, err := NewAuthorizer(v, owners{aliceBoard: alice, bobBoard: bob}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := []string{ScopeFeedRead, ScopeGraphWrite, ScopeIngest, ScopeGenerator}
	tok := func(sub string, scopes ...string) string {
		raw, err := Mint(key, Token{Subject: sub, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	aliceAll, aliceNone := tok(UserSubject(alice), all...), tok(UserSubject(alice))
	// req builds the method's request acting for (Self) or on the board of (Owner) user u.
	req := func(method string, r Rule, u zen.ID) proto.Message {
		m, ok := requestOf(t, method)
		if !ok {
			return nil
		}
		set := func(name string, id zen.ID) {
			f := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
			if f == nil {
				t.Fatalf("%s: no field %s", method, name)
			}
			m.ProtoReflect().Set(f, protoreflect.ValueOfUint64(uint64(id)))
		}
		if r.Self != "" {
			set(r.Self, u)
		}
		if r.Owner != "" {
			board := aliceBoard
			if u == bob {
				board = bobBoard
			}
			set(r.Owner, board)
		}
		return m
	}
	call := func(method, token string, m proto.Message) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		var in any = m
		_, err := a.Unary()(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	checked := 0
	for method, r := range Policy {
		if r.Public {
			continue
		}
		ownCalls := r.AnyCaller || r.Self != "" || r.Owner != ""
		want := func(through bool) codes.Code {
			if through {
				return codes.OK
			}
			return codes.PermissionDenied
		}
		cases := []struct {
			name  string
			token string
			for_  zen.ID
			want  codes.Code
		}{
			{"user with every scope, for themself", aliceAll, alice, want(ownCalls)},
			{"user without scopes, for themself", aliceNone, alice, want(ownCalls)},
			{"user with every scope, for another user", aliceAll, bob, want(r.AnyCaller)},
			{"user without scopes, for another user", aliceNone, bob, want(r.AnyCaller)},
		}
		for _, s := range r.Scopes {
			cases = append(cases, struct {
				name  string
				token string
				for_  zen.ID
				want  codes.Code
			}{"service with " + s + ", for a user", tok("svc", s), bob, codes.OK})
		}
		for _, tc := range cases {
			m := req(method, r, tc.for_)
			if m == nil && (r.Self != "" || r.Owner != "") {
				t.Fatalf("%s: no request type found", method)
			}
			if got := call(method, tc.token, m); got != tc.want {
				t.Errorf("%s, %s: %v, want %v", method, tc.name, got, tc.want)
			}
			checked++
		}
	}
	if checked < 4*25 {
		t.Errorf("only %d calls checked", checked)
	}
}

// requestOf returns an empty request message of a gRPC method ("/pkg.Service/Method"), from
// the registered descriptors.
func requestOf(t *testing.T, method string) (proto.Message, bool) {
	t.Helper()
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		t.Fatalf("method %q", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, false
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	if md == nil {
		t.Fatalf("%s: no such method", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return mt.New().Interface(), true
}
