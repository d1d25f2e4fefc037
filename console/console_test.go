package console

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// fakeFeed answers GetFeed with one item per call, and says who called (the authorization
// header reaches the gRPC handler as metadata).
type fakeFeed struct {
	feedv1.UnimplementedFeedServiceServer
}

func (fakeFeed) GetFeed(ctx context.Context, r *feedv1.GetFeedRequest) (*feedv1.GetFeedResponse, error) {
	if r.GetUserIdStr() == "" {
		return nil, status.Error(codes.InvalidArgument, "user_id_str: empty")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	reason := "anonymous"
	if a := md.Get("authorization"); len(a) > 0 {
		reason = a[0]
	}
	return &feedv1.GetFeedResponse{Items: []*feedv1.FeedItem{{PinIdStr: "7", Source: feedv1.Source_SOURCE_FOLLOWING,
		Score: 0.5, Fresh: true, Reason: reason}}, NextCursor: "c" + r.GetCursor(), ServedFrom: feedv1.Store_STORE_STANDBY}, nil
}

type fakeGraph struct {
	graphv1.UnimplementedGraphServiceServer
}

func (fakeGraph) CreateUser(context.Context, *graphv1.CreateUserRequest) (*graphv1.User, error) {
	return &graphv1.User{IdStr: "1"}, nil
}

type fakeAdmin struct {
	feedv1.UnimplementedFeedAdminServer
}

func (fakeAdmin) SetHedgePolicy(_ context.Context, p *feedv1.HedgePolicy) (*feedv1.HedgePolicy, error) {
	if p.GetBudget() > 1 {
		return nil, status.Error(codes.InvalidArgument, "budget must be in [0, 1]")
	}
	return p, nil
}

// adminToken is the admin port's rule, in small: a bearer token on every call.
func adminToken(tok string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if a := md.Get("authorization"); len(a) == 0 || a[0] != "Bearer "+tok {
			return nil, status.Error(codes.Unauthenticated, "admin: missing or wrong admin credential")
		}
		return h(ctx, req)
	}
}

func newConsole(t *testing.T, withAdmin bool) http.Handler {
	t.Helper()
	pub := grpc.NewServer()
	feedv1.RegisterFeedServiceServer(pub, fakeFeed{})
	graphv1.RegisterGraphServiceServer(pub, fakeGraph{})
	opts := Options{Public: pub}
	if withAdmin {
		adm := grpc.NewServer(grpc.UnaryInterceptor(adminToken("secret-secret-secret")))
		feedv1.RegisterFeedAdminServer(adm, fakeAdmin{})
		opts.Admin = adm
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// reply is what a test reads of a response: the status, and either the JSON body (decoded)
// or the text's first line.
type reply struct {
	Status int
	JSON   map[string]any
	Text   string
}

func do(h http.Handler, method, path, auth, body string) reply {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	out := reply{Status: rec.Code}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		_ = json.Unmarshal(b, &out.JSON)
	} else {
		out.Text, _, _ = strings.Cut(string(b), "\n")
	}
	return out
}

func TestConsoleRoutes(t *testing.T) {
	withAdmin, noAdmin := newConsole(t, true), newConsole(t, false)
	tests := []struct {
		name         string
		h            http.Handler
		method, path string
		auth, body   string
		want         reply
	}{
		{name: "page", h: noAdmin, method: "GET", path: "/console/",
			want: reply{Status: 200, Text: "<!doctype html>"}},
		{name: "script", h: noAdmin, method: "GET", path: "/console/app.js",
			want: reply{Status: 200, Text: "// SmartFeed console. Every JSON call is the Connect protocol (POST rpc/<service>/<method>)"}},
		{name: "missing asset", h: noAdmin, method: "GET", path: "/console/nope.js",
			want: reply{Status: 404, Text: "404 page not found"}},
		{name: "GetFeed through the public server, header as metadata", h: noAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedService/GetFeed", auth: "Bearer user-jwt",
			body: `{"userIdStr":"1","cursor":"x"}`,
			want: reply{Status: 200, JSON: map[string]any{"items": []any{map[string]any{"pinId": "0", "pinIdStr": "7",
				"source": "SOURCE_FOLLOWING", "score": 0.5, "authorId": "0", "boardId": "0", "fresh": true,
				"reason": "Bearer user-jwt", "pin": nil, "author": nil}}, "nextCursor": "cx", "freshIncluded": false,
				"freshStatus": "FRESH_STATUS_UNSPECIFIED", "freshDetail": "", "servedFrom": "STORE_STANDBY",
				"hedged": false, "rebuilding": false, "objectsUnavailable": false, "objectsDetail": ""}}},
		{name: "the server's error code", h: noAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedService/GetFeed", body: `{}`,
			want: reply{Status: 400, JSON: map[string]any{"code": "invalid_argument", "message": "user_id_str: empty"}}},
		{name: "a method the console does not call is not reachable", h: noAdmin, method: "POST",
			path: "/console/rpc/smartfeed.graph.v1.GraphService/CreateUser", body: `{}`,
			want: reply{Status: 404, Text: "404 page not found"}},
		{name: "GET on a method", h: noAdmin, method: "GET",
			path: "/console/rpc/smartfeed.feed.v1.FeedService/GetFeed",
			want: reply{Status: 405, Text: "method not allowed"}},
		{name: "FeedAdmin absent without an admin server", h: noAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", body: `{}`,
			want: reply{Status: 404, Text: "404 page not found"}},
		{name: "FeedAdmin without the credential", h: withAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", body: `{"mode":"fixed"}`,
			want: reply{Status: 401, JSON: map[string]any{"code": "unauthenticated", "message": "admin: missing or wrong admin credential"}}},
		{name: "FeedAdmin with a wrong credential", h: withAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", auth: "Bearer guess",
			body: `{"mode":"fixed"}`,
			want: reply{Status: 401, JSON: map[string]any{"code": "unauthenticated", "message": "admin: missing or wrong admin credential"}}},
		{name: "FeedAdmin with the credential", h: withAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", auth: "Bearer secret-secret-secret",
			body: `{"mode":"fixed","delayMs":20}`,
			want: reply{Status: 200, JSON: map[string]any{"mode": "fixed", "delayMs": 20.0, "percentile": 0.0,
				"minMs": 0.0, "maxMs": 0.0, "budget": 0.0, "budgetBurst": 0.0, "warmup": 0.0, "minSamples": 0.0,
				"currentCutoffMs": 0.0}}},
		{name: "the server's validation", h: withAdmin, method: "POST",
			path: "/console/rpc/smartfeed.feed.v1.FeedAdmin/SetHedgePolicy", auth: "Bearer secret-secret-secret",
			body: `{"mode":"fixed","budget":2}`,
			want: reply{Status: 400, JSON: map[string]any{"code": "invalid_argument", "message": "budget must be in [0, 1]"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := do(tt.h, tt.method, tt.path, tt.auth, tt.body)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tt.method, tt.path, diff)
			}
		})
	}
}

func TestSplitMethod(t *testing.T) {
	for _, m := range append(PublicMethods(), AdminMethods()...) {
		if _, _, ok := splitMethod(m); !ok {
			t.Errorf("splitMethod(%q) refused a generated method name", m)
		}
	}
	for _, bad := range []string{"", "/", "pkg.S/M", "/pkg.S", "/pkg.S/M/x", "//M"} {
		if _, _, ok := splitMethod(bad); ok {
			t.Errorf("splitMethod(%q) accepted a bad name", bad)
		}
	}
}
