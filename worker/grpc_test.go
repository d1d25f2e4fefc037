package worker

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	ingestv1 "github.com/smartfeed/smartfeed/proto/ingest/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func ingestClient(t *testing.T, srv *IngestServer) ingestv1.IngestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	ingestv1.RegisterIngestServiceServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ingestv1.NewIngestServiceClient(conn)
}

// TestPublishGRPC publishes events over gRPC and checks the pools after the worker ran them; bad
// requests are refused with InvalidArgument and enqueue nothing.
func TestPublishGRPC(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{TrimEvery: 1}, 3, nil)
	c := ingestClient(t, NewIngestServer(w.pub, w.w))
	pin, alice, travel, cats := w.pins[0], w.alice, w.travel, w.cats

	bad := map[string]*ingestv1.PublishRequest{
		"no events":       {},
		"empty event":     {Events: []*ingestv1.Event{{}}},
		"pin is a board":  {Events: []*ingestv1.Event{{Event: &ingestv1.Event_PinSaved{PinSaved: &ingestv1.PinSaved{Pin: uint64(travel), User: uint64(alice), Board: uint64(travel), CreatedMs: 1}}}}},
		"twins disagree":  {Events: []*ingestv1.Event{{Event: &ingestv1.Event_UserDeleted{UserDeleted: &ingestv1.UserDeleted{User: uint64(alice), UserStr: "12"}}}}},
		"bad decimal":     {Events: []*ingestv1.Event{{Event: &ingestv1.Event_UserDeleted{UserDeleted: &ingestv1.UserDeleted{UserStr: "x1"}}}}},
		"follow a pin":    {Events: []*ingestv1.Event{{Event: &ingestv1.Event_Follow{Follow: &ingestv1.Follow{User: uint64(alice), Target: uint64(pin)}}}}},
		"follow yourself": {Events: []*ingestv1.Event{{Event: &ingestv1.Event_Follow{Follow: &ingestv1.Follow{User: uint64(alice), Target: uint64(alice)}}}}},
		"no created_ms":   {Events: []*ingestv1.Event{{Event: &ingestv1.Event_PinSaved{PinSaved: &ingestv1.PinSaved{Pin: uint64(pin), User: uint64(alice), Board: uint64(travel)}}}}},
		// a good event followed by a bad one: nothing at all is enqueued
		"second bad": {Events: []*ingestv1.Event{
			{Event: &ingestv1.Event_UserDeleted{UserDeleted: &ingestv1.UserDeleted{User: uint64(w.followers[0])}}},
			{Event: &ingestv1.Event_UserDeleted{UserDeleted: &ingestv1.UserDeleted{User: uint64(pin)}}},
		}},
	}
	for name, req := range bad {
		_, err := c.Publish(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if w.q.len() != 0 {
		t.Fatalf("refused requests enqueued %d tasks", w.q.len())
	}

	req := &ingestv1.PublishRequest{Events: []*ingestv1.Event{
		{Event: &ingestv1.Event_PinSaved{PinSaved: &ingestv1.PinSaved{PinStr: pin.String(), User: uint64(alice), Board: uint64(travel),
			InterestsStr: []string{cats.String()}, CreatedMs: w.clk.now().UnixMilli()}}},
		{Event: &ingestv1.Event_Engagement{Engagement: &ingestv1.Engagement{User: uint64(w.followers[1]), Pin: uint64(w.pins[2]), Author: uint64(alice)}}},
	}}
	resp, err := c.Publish(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != 2 || resp.GetResults()[0].GetDuplicate() || len(resp.GetResults()[0].GetTaskIds()) != 1 {
		t.Fatalf("results %v", resp.GetResults())
	}
	again, err := c.Publish(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetResults()[0].GetDuplicate() {
		t.Errorf("a retried publish was not reported duplicate")
	}
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if a, _ := w.w.Affinity(ctx, w.followers[1], alice); a != 1 {
		t.Errorf("affinity after engagement (twice) = %d, want 1", a)
	}
	for _, u := range w.followers[:3] {
		es, err := w.w.Pools().Top(ctx, u, zen.SourceFollowing, 10)
		if err != nil || len(es) != 1 || es[0].Pin != pin {
			t.Errorf("follower %d pool %v, %v; want [%d]", u, es, err, pin)
		}
	}
	f0, _ := w.w.Pools().Top(ctx, w.followers[0], zen.SourceFollowing, 1)
	f1, _ := w.w.Pools().Top(ctx, w.followers[1], zen.SourceFollowing, 1)
	if len(f0) == 1 && len(f1) == 1 && !(f1[0].Score > f0[0].Score) {
		t.Errorf("affinity did not raise the score: %v vs %v", f1[0].Score, f0[0].Score)
	}
}
