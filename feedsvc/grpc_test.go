package feedsvc

import (
	"context"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

func dial(t *testing.T, e *env) (feedv1.FeedServiceClient, feedv1.FeedAdminClient) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	Register(srv, e.svc, true, e.primary, e.standby)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return feedv1.NewFeedServiceClient(conn), feedv1.NewFeedAdminClient(conn)
}

func TestGRPCGetFeed(t *testing.T) {
	e := newEnv(t, nil)
	feed, admin := dial(t, e)
	ctx := t.Context()
	resp, err := feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserIdStr: e.user.String(), PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Items) != 3 || !resp.FreshIncluded || resp.FreshStatus != feedv1.FreshStatus_FRESH_STATUS_INCLUDED ||
		resp.ServedFrom != feedv1.Store_STORE_PRIMARY || resp.NextCursor == "" {
		t.Fatalf("first page = %v", resp)
	}
	if it := resp.Items[0]; it.PinId != uint64(pinID(1)) || it.PinIdStr != pinID(1).String() || !it.Fresh ||
		it.Source != feedv1.Source_SOURCE_FOLLOWING {
		t.Errorf("first item = %v", it)
	}
	resp, err = feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: uint64(e.user), Cursor: resp.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Items) != 2 || resp.FreshStatus != feedv1.FreshStatus_FRESH_STATUS_NOT_FIRST_PAGE || resp.NextCursor != "" {
		t.Errorf("second page = %v", resp)
	}

	for name, req := range map[string]*feedv1.GetFeedRequest{
		"zero user":   {},
		"bad id str":  {UserIdStr: "abc"},
		"disagree":    {UserId: uint64(e.user), UserIdStr: (e.user + 1).String()},
		"bad cursor":  {UserId: uint64(e.user), Cursor: "zzz"},
		"page size":   {UserId: uint64(e.user), PageSize: 100000},
		"not a user":  {UserId: uint64(pinID(1))},
		"negative pg": {UserId: uint64(e.user), PageSize: -5},
	} {
		if _, err := feed.GetFeed(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}

	// Fault injection through the admin API: primary down, served from the standby.
	e.materialize(t)
	e.flush(t)
	if _, err := admin.SetFaults(ctx, &feedv1.Faults{Store: feedv1.Store_STORE_PRIMARY, Outage: true}); err != nil {
		t.Fatal(err)
	}
	resp, err = feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: uint64(e.user)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ServedFrom != feedv1.Store_STORE_STANDBY || !resp.Hedged || len(resp.Items) != 5 ||
		resp.FreshStatus != feedv1.FreshStatus_FRESH_STATUS_PERSIST_FAILED {
		t.Errorf("primary down: %v", resp)
	}
	if _, err := admin.SetFaults(ctx, &feedv1.Faults{Store: feedv1.Store_STORE_STANDBY, Outage: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: uint64(e.user)}); status.Code(err) != codes.Unavailable {
		t.Errorf("both down: %v, want Unavailable", err)
	}
	if _, err := admin.SetFaults(ctx, &feedv1.Faults{Store: feedv1.Store_STORE_STANDBY, ErrorRate: 3}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad faults: %v, want InvalidArgument", err)
	}
	if _, err := admin.SetFaults(ctx, &feedv1.Faults{Store: feedv1.Store_STORE_UNSPECIFIED}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("unknown store: %v, want FailedPrecondition", err)
	}
	f, err := admin.GetFaults(ctx, &feedv1.GetFaultsRequest{Store: feedv1.Store_STORE_PRIMARY})
	if err != nil || !f.Outage {
		t.Errorf("GetFaults = %v, %v", f, err)
	}
}

func TestGRPCAdminPolicy(t *testing.T) {
	e := newEnv(t, nil)
	_, admin := dial(t, e)
	ctx := t.Context()
	p, err := admin.GetHedgePolicy(ctx, &feedv1.GetHedgePolicyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != "percentile" || p.Percentile != 99.9 || p.MaxMs != 100 || p.CurrentCutoffMs != 100 {
		t.Errorf("default policy = %v", p)
	}
	p.Mode, p.DelayMs, p.Warmup = "fixed", 7, 0.25
	got, err := admin.SetHedgePolicy(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentCutoffMs != 7 || e.svc.Hedger().Policy().Warmup != 0.25 {
		t.Errorf("after SetHedgePolicy: %v", got)
	}
	for name, bad := range map[string]func(*feedv1.HedgePolicy){
		"mode":        func(p *feedv1.HedgePolicy) { p.Mode = "maybe" },
		"negative ms": func(p *feedv1.HedgePolicy) { p.MinMs = -1 },
		"percentile":  func(p *feedv1.HedgePolicy) { p.Percentile = 120 },
	} {
		q := proto.Clone(got).(*feedv1.HedgePolicy)
		bad(q)
		if _, err := admin.SetHedgePolicy(ctx, q); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if e.svc.Hedger().Policy().Mode != "fixed" {
		t.Error("a refused policy changed the hedger")
	}
	c, err := admin.GetServiceConfig(ctx, &feedv1.GetServiceConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c.GeneratorDeadlineMs = 40
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Fatal(err)
	}
	if d := e.svc.Config().GeneratorDeadline.Milliseconds(); d != 40 {
		t.Errorf("generator deadline = %dms, want 40", d)
	}
	c.MaxItems = 0
	if _, err := admin.SetServiceConfig(ctx, c); status.Code(err) != codes.InvalidArgument {
		t.Errorf("max items 0: %v, want InvalidArgument", err)
	}
	// max_items 1 would trim every feed to one item at its next update: refused live.
	c.MaxItems = 1
	if _, err := admin.SetServiceConfig(ctx, c); status.Code(err) != codes.InvalidArgument {
		t.Errorf("max items 1: %v, want InvalidArgument", err)
	}
	if got := e.svc.Config().MaxItems; got != DefaultConfig().MaxItems {
		t.Errorf("max items after refused changes = %d", got)
	}
	c.MaxItems = MinLiveMaxItems
	if _, err := admin.SetServiceConfig(ctx, c); err != nil {
		t.Errorf("max items at the floor: %v", err)
	}
}

// TestGRPCErrorUnavailable: a store error a retry may not meet (zen.ErrUnavailable, e.g. shards
// fenced for a move) is Unavailable.
func TestGRPCErrorUnavailable(t *testing.T) {
	if got := status.Code(grpcError(fmt.Errorf("x: %w", zen.ErrUnavailable))); got != codes.Unavailable {
		t.Errorf("code %v, want Unavailable", got)
	}
}
