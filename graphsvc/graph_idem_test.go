package graphsvc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestRequestIDScopedToCallerAndMethod: a request_id is scoped to its caller and its method; a
// reuse with the same body replays the first answer, a reuse with another body is refused and
// reserves nothing, and nobody ever gets someone else's object.
func TestRequestIDScopedToCallerAndMethod(t *testing.T) {
	e := graphNewEnv(t, zenmem.New())
	ctx := context.Background()
	const R = "same-request-id"

	// Two different users created with the same request_id are two users.
	first := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "first", Email: "first@example.com", RequestId: R}))(t)
	second := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "second", Email: "second@example.com", RequestId: R}))(t)
	if second.Id == first.Id || second.Username != "second" {
		t.Fatalf("CreateUser(second, R) after CreateUser(first, R) = %d %q, want a new user named second", second.Id, second.Username)
	}
	if got := graphOK(e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: "second"}))(t); got.Id != second.Id {
		t.Errorf("GetUserByName(second) = %d, want %d", got.Id, second.Id)
	}
	// The same request again replays it.
	again := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "first", Email: "first@example.com", RequestId: R}))(t)
	graphDiff(t, first, again)
	// The same caller and request_id with another body is refused, and reserves nothing.
	_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "first", Email: "other@example.com", RequestId: R})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("reuse with another email: %v, want FailedPrecondition", err)
	}
	graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "third", Email: "other@example.com"}))(t)

	// Boards: the same request_id from two owners gives each their own board.
	ba := graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: first.Id, Name: "kitchens", RequestId: R}))(t)
	bb := graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: second.Id, Name: "gardens", RequestId: R}))(t)
	if bb.Id == ba.Id || bb.OwnerId != second.Id || bb.Name != "gardens" {
		t.Fatalf("second owner's CreateBoard(R) = board %d of %d named %q, want its own", bb.Id, bb.OwnerId, bb.Name)
	}
	graphDiff(t, ba, graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: first.Id, Name: "kitchens", RequestId: R}))(t))
	if _, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: first.Id, Name: "other", RequestId: R}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("board reuse with another name: %v, want FailedPrecondition", err)
	}

	// Pins: the same request_id from two authors gives each their own pin.
	pa := graphOK(e.c.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: first.Id, BoardId: ba.Id, ImageUrl: "https://i.example.com/a.jpg", RequestId: R}))(t)
	pb := graphOK(e.c.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: second.Id, BoardId: bb.Id, ImageUrl: "https://i.example.com/b.jpg", RequestId: R}))(t)
	if pb.Id == pa.Id || pb.AuthorId != second.Id {
		t.Fatalf("second author's CreatePin(R) = pin %d by %d, want its own", pb.Id, pb.AuthorId)
	}
	if _, err := e.c.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: first.Id, BoardId: ba.Id, ImageUrl: "https://i.example.com/other.jpg", RequestId: R}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("pin reuse with another image: %v, want FailedPrecondition", err)
	}
	// The same request_id on another method is another request.
	if _, err := e.c.CreateInterest(ctx, &graphv1.CreateInterestRequest{Name: "cats", RequestId: R}); err != nil {
		t.Errorf("CreateInterest with a request_id used by CreateUser: %v", err)
	}
}
