package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
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
	c := ingestClient(t, NewIngestServer(w.pub, w.w, w.g))
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

// TestPublishRefusesUnknownObjects: an event naming an object the store does not hold (never
// created there) is refused with NOT_FOUND naming the event and the object, and nothing of the
// request is enqueued; deletions and unfollows, which are idempotent, and objects soft-deleted
// since (the task copes) are accepted.
func TestPublishRefusesUnknownObjects(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{TrimEvery: 1}, 3, nil)
	c := ingestClient(t, NewIngestServer(w.pub, w.w, w.g))
	pin, alice, travel, cats := w.pins[0], w.alice, w.travel, w.cats
	ghost := func(ty zen.Type) zen.ID {
		id, err := zen.NewID(pin.Shard(), ty, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ghostPin, ghostUser, ghostBoard, ghostInterest := ghost(zen.TypePin), ghost(zen.TypeUser), ghost(zen.TypeBoard), ghost(zen.TypeInterest)
	now := w.clk.now().UnixMilli()
	saved := func(p, u, b zen.ID, interests ...uint64) *ingestv1.Event {
		return &ingestv1.Event{Event: &ingestv1.Event_PinSaved{PinSaved: &ingestv1.PinSaved{Pin: uint64(p), User: uint64(u), Board: uint64(b),
			Interests: interests, CreatedMs: now}}}
	}
	follow := func(u, target zen.ID) *ingestv1.Event {
		return &ingestv1.Event{Event: &ingestv1.Event_Follow{Follow: &ingestv1.Follow{User: uint64(u), Target: uint64(target)}}}
	}
	for _, tt := range []struct {
		name   string
		events []*ingestv1.Event
		want   string // NOT_FOUND message
	}{
		{"pin saved, pin unknown", []*ingestv1.Event{saved(ghostPin, alice, travel)}, fmt.Sprintf("events[0]: pin %d: not in the store", ghostPin)},
		{"pin saved, user unknown", []*ingestv1.Event{saved(pin, ghostUser, travel)}, fmt.Sprintf("events[0]: user %d: not in the store", ghostUser)},
		{"pin saved, board unknown", []*ingestv1.Event{saved(pin, alice, ghostBoard)}, fmt.Sprintf("events[0]: board %d: not in the store", ghostBoard)},
		{"pin saved, interest unknown", []*ingestv1.Event{saved(pin, alice, travel, uint64(cats), uint64(ghostInterest))},
			fmt.Sprintf("events[0]: interests[1] %d: not in the store", ghostInterest)},
		{"follow, target unknown", []*ingestv1.Event{follow(alice, ghostUser)}, fmt.Sprintf("events[0]: target %d: not in the store", ghostUser)},
		{"second event unknown", []*ingestv1.Event{saved(pin, alice, travel), follow(ghostUser, alice)}, fmt.Sprintf("events[1]: user %d: not in the store", ghostUser)},
		{"related pins, pin unknown", []*ingestv1.Event{{Event: &ingestv1.Event_RelatedPins{RelatedPins: &ingestv1.RelatedPins{User: uint64(alice),
			Pins: []*ingestv1.RelatedPin{{Pin: uint64(ghostPin), Author: uint64(alice), Board: uint64(travel), CreatedMs: now}}}}}},
			fmt.Sprintf("events[0]: pins[0].pin %d: not in the store", ghostPin)},
		{"engagement, author unknown", []*ingestv1.Event{{Event: &ingestv1.Event_Engagement{Engagement: &ingestv1.Engagement{
			User: uint64(w.followers[0]), Pin: uint64(pin), Author: uint64(ghostUser)}}}}, fmt.Sprintf("events[0]: author %d: not in the store", ghostUser)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Publish(ctx, &ingestv1.PublishRequest{Events: tt.events})
			if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Fatalf("Publish: %v, want NOT_FOUND with %q", err, tt.want)
			}
			if n := w.q.len(); n != 0 {
				t.Fatalf("a refused request enqueued %d tasks", n)
			}
		})
	}

	// Idempotent events name objects that may be gone: accepted.
	for name, ev := range map[string]*ingestv1.Event{
		"unfollow an unknown user": {Event: &ingestv1.Event_Unfollow{Unfollow: &ingestv1.Follow{User: uint64(alice), Target: uint64(ghostUser)}}},
		"delete an unknown pin":    {Event: &ingestv1.Event_PinDeleted{PinDeleted: &ingestv1.PinDeleted{Pin: uint64(ghostPin), Author: uint64(alice)}}},
		"delete an unknown user":   {Event: &ingestv1.Event_UserDeleted{UserDeleted: &ingestv1.UserDeleted{User: uint64(ghostUser)}}},
	} {
		if _, err := c.Publish(ctx, &ingestv1.PublishRequest{Events: []*ingestv1.Event{ev}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A pin soft-deleted before its save is published: accepted, and its fanout completes.
	if err := w.g.Delete(ctx, w.pins[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, &ingestv1.PublishRequest{Events: []*ingestv1.Event{saved(w.pins[1], alice, travel)}}); err != nil {
		t.Fatalf("save of a soft-deleted pin: %v", err)
	}
	if err := w.q.run(ctx); err != nil {
		t.Fatalf("the accepted events' tasks: %v", err)
	}
}
