package graphsvc_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/graphsvc"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestReadOnly: the read-only GraphService answers reads as the full one does, over the same
// graph, and refuses writes without touching the graph.
func TestReadOnly(t *testing.T) {
	e := graphNewEnv(t, zenmem.New())
	u := e.user(t)
	ro := graphsvc.NewReadOnly(e.g, nil)
	ctx := t.Context()
	req := &graphv1.GetObjectsRequest{Ids: []uint64{u.GetId()}}
	want, err := e.c.GetObjects(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ro.GetObjects(ctx, req)
	if err != nil {
		t.Fatalf("read-only GetObjects: %v", err)
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("GetObjects (-full service +read-only):\n%s", d)
	}
	byName, err := ro.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: u.GetUsername()})
	if err != nil || byName.GetId() != u.GetId() {
		t.Errorf("read-only GetUserByName(%q) = %v, %v; want user %d", u.GetUsername(), byName, err, u.GetId())
	}
	if _, err := ro.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "eve", Email: "eve@example.com"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("read-only CreateUser: %v, want Unimplemented", err)
	}
	if _, err := e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: "eve"}); status.Code(err) != codes.NotFound {
		t.Errorf("after a refused CreateUser, GetUserByName(eve): %v, want NotFound", err)
	}
}
