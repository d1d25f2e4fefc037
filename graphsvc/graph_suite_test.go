package graphsvc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// graphRunSuite runs every method and error case against a store from open.
func graphRunSuite(t *testing.T, open func(t *testing.T) zen.Store) {
	e := graphNewEnv(t, open(t))
	// An ID of each type that was never created.
	ghost := func(ty zen.Type) uint64 {
		id, err := zen.NewID(4000, ty, 1<<35)
		if err != nil {
			t.Fatal(err)
		}
		return uint64(id)
	}
	t.Run("Users", func(t *testing.T) { graphTestUsers(t, e, ghost) })
	t.Run("DeleteUser", func(t *testing.T) { graphTestDeleteUser(t, e, ghost) })
	t.Run("BoardsAndInterests", func(t *testing.T) { graphTestBoards(t, e, ghost) })
	t.Run("Pins", func(t *testing.T) { graphTestPins(t, e, ghost) })
	t.Run("SaveLikeDelete", func(t *testing.T) { graphTestSaveLikeDelete(t, e, ghost) })
	t.Run("Follow", func(t *testing.T) { graphTestFollow(t, e, ghost) })
	t.Run("GetObjects", func(t *testing.T) { graphTestGetObjects(t, e, ghost) })
	t.Run("Paging", func(t *testing.T) { graphTestPaging(t, e, ghost) })
	t.Run("EnqueueFailureRetry", func(t *testing.T) { graphTestEnqueueRetry(t, e) })
	t.Run("Concurrent", func(t *testing.T) { graphTestConcurrent(t, e) })
}

func graphTestUsers(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	n := e.name("Ann_")
	u := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: n, Email: "X" + n + "@Example.com", DisplayName: "Ann"}))(t)
	want := &graphv1.User{Id: u.Id, IdStr: zen.ID(u.Id).String(), Username: n, Email: strings.ToLower("X" + n + "@Example.com"), DisplayName: "Ann"}
	graphDiff(t, want, u, graphIgnoreCreated)
	if zen.ID(u.Id).Type() != zen.TypeUser || u.CreatedMs == 0 {
		t.Errorf("user %d: type %d created_ms %d", u.Id, zen.ID(u.Id).Type(), u.CreatedMs)
	}
	graphDiff(t, u, graphOK(e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: u.Id}))(t))
	graphDiff(t, u, graphOK(e.c.GetUser(ctx, &graphv1.GetUserRequest{UserIdStr: u.IdStr}))(t))
	graphDiff(t, u, graphOK(e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: u.Id, UserIdStr: u.IdStr}))(t))
	graphDiff(t, u, graphOK(e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: strings.ToUpper(n)}))(t))

	// request_id: a retry of the same request returns the first user.
	rn := e.name("retry")
	r1 := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: rn, Email: rn + "@example.com", RequestId: "req-" + rn}))(t)
	r2 := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: rn, Email: rn + "@example.com", RequestId: "req-" + rn}))(t)
	graphDiff(t, r1, r2)

	// A refused email frees the username it had claimed.
	bn := e.name("bob")
	_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: bn, Email: want.Email})
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("taken email: got %v, want AlreadyExists", err)
	}
	graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: bn, Email: bn + "@example.com"}))(t)

	b := e.board(t, e.user(t))
	graphRunErrCases(t, []graphErrCase{
		{"duplicate username ignoring case", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: strings.ToUpper(n), Email: e.name("z") + "@example.com"})
			return err
		}, codes.AlreadyExists, "username"},
		{"duplicate email", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: e.name("z"), Email: strings.ToUpper(want.Email)})
			return err
		}, codes.AlreadyExists, "email"},
		{"empty username", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Email: "a@b.c"})
			return err
		}, codes.InvalidArgument, "username is required"},
		{"username too long", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: strings.Repeat("a", 31), Email: "a@b.c"})
			return err
		}, codes.InvalidArgument, "at most 30"},
		{"username characters", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "a b", Email: "a@b.c"})
			return err
		}, codes.InvalidArgument, "only letters"},
		{"empty email", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "abc"})
			return err
		}, codes.InvalidArgument, "email is required"},
		{"email without @", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "abc", Email: "abc.example.com"})
			return err
		}, codes.InvalidArgument, "not an address"},
		{"email too long", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "abc", Email: strings.Repeat("a", 250) + "@b.cd"})
			return err
		}, codes.InvalidArgument, "at most 254"},
		{"display name too long", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "abc", Email: "a@b.c", DisplayName: strings.Repeat("x", 101)})
			return err
		}, codes.InvalidArgument, "display_name"},
		{"request id too long", func(ctx context.Context) error {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "abc", Email: "a@b.c", RequestId: strings.Repeat("r", 129)})
			return err
		}, codes.InvalidArgument, "request_id"},
		{"get: no id", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{})
			return err
		}, codes.InvalidArgument, "user_id is required"},
		{"get: board id", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: b.Id})
			return err
		}, codes.InvalidArgument, "expected a user ID"},
		{"get: malformed string", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserIdStr: "12ab"})
			return err
		}, codes.InvalidArgument, `user_id: parse id "12ab"`},
		{"get: reserved bits", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: 1<<63 | u.Id})
			return err
		}, codes.InvalidArgument, "not a valid ID"},
		{"get: id and id_str disagree", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: u.Id, UserIdStr: fmt.Sprint(ghost(zen.TypeUser))})
			return err
		}, codes.InvalidArgument, "disagree"},
		{"get: unknown", func(ctx context.Context) error {
			_, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: ghost(zen.TypeUser)})
			return err
		}, codes.NotFound, "not found"},
		{"by name: unknown", func(ctx context.Context) error {
			_, err := e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: e.name("nobody")})
			return err
		}, codes.NotFound, "no user named"},
		{"by name: empty", func(ctx context.Context) error {
			_, err := e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{})
			return err
		}, codes.InvalidArgument, "username is required"},
	})
}

func graphTestDeleteUser(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	u := e.user(t)
	e.q.take()
	graphDiff(t, &graphv1.DeleteUserResponse{}, graphOK(e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserIdStr: u.IdStr}))(t))
	graphDiff(t, graphTasks(t, pinlater.UserDeletePayload{User: u.Id}), e.q.take())
	if _, err := e.c.GetUser(ctx, &graphv1.GetUserRequest{UserId: u.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("GetUser of a deleted user: %v, want NotFound", err)
	}
	if _, err := e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: u.Username}); status.Code(err) != codes.NotFound {
		t.Errorf("GetUserByName of a deleted user: %v, want NotFound", err)
	}
	// Deleting again succeeds and enqueues again (a retry after a failed enqueue).
	graphDiff(t, &graphv1.DeleteUserResponse{AlreadyDeleted: true}, graphOK(e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: u.Id}))(t))
	graphDiff(t, graphTasks(t, pinlater.UserDeletePayload{User: u.Id}), e.q.take())
	// The names are free again.
	u2 := graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: u.Username, Email: u.Email}))(t)
	if u2.Id == u.Id {
		t.Errorf("re-created user has the deleted user's ID %d", u.Id)
	}
	// A crash between the delete and the freeing of the names: the next CreateUser takes them over.
	u3 := e.user(t)
	if err := e.g.Delete(ctx, zen.ID(u3.Id)); err != nil {
		t.Fatal(err)
	}
	graphOK(e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: u3.Username, Email: u3.Email}))(t)

	graphRunErrCases(t, []graphErrCase{
		{"unknown", func(ctx context.Context) error {
			_, err := e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: ghost(zen.TypeUser)})
			return err
		}, codes.NotFound, "not found"},
		{"pin id", func(ctx context.Context) error {
			_, err := e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: ghost(zen.TypePin)})
			return err
		}, codes.InvalidArgument, "expected a user ID"},
		{"no id", func(ctx context.Context) error {
			_, err := e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{})
			return err
		}, codes.InvalidArgument, "required"},
	})
	if got := e.q.take(); len(got) != 0 {
		t.Errorf("failed deletes enqueued %v", got)
	}
}

func graphTestBoards(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	u := e.user(t)
	b := graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerIdStr: u.IdStr, Name: "Recipes", Description: "soups"}))(t)
	graphDiff(t, &graphv1.Board{Id: b.Id, IdStr: zen.ID(b.Id).String(), OwnerId: u.Id, OwnerIdStr: u.IdStr, Name: "Recipes", Description: "soups"}, b, graphIgnoreCreated)
	if got, want := zen.ID(b.Id).Shard(), zen.ID(u.Id).Shard(); got != want {
		t.Errorf("board on shard %d, owner on shard %d: want the owner's shard", got, want)
	}
	// request_id: no second board.
	r1 := graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "Travel", RequestId: "b-" + u.IdStr}))(t)
	r2 := graphOK(e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "Travel", RequestId: "b-" + u.IdStr}))(t)
	graphDiff(t, r1, r2)
	lb := graphOK(e.c.ListBoards(ctx, &graphv1.ListBoardsRequest{UserId: u.Id}))(t)
	graphDiff(t, &graphv1.ListBoardsResponse{Boards: []*graphv1.Board{b, r1}, TotalCount: 2}, lb)

	in := graphOK(e.c.CreateInterest(ctx, &graphv1.CreateInterestRequest{Name: e.name("Soup ")}))(t)
	if zen.ID(in.Id).Type() != zen.TypeInterest || in.IdStr != zen.ID(in.Id).String() {
		t.Errorf("interest %+v", in)
	}
	graphRunErrCases(t, []graphErrCase{
		{"board: unknown owner", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: ghost(zen.TypeUser), Name: "x"})
			return err
		}, codes.NotFound, "not found"},
		{"board: owner is a board", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: b.Id, Name: "x"})
			return err
		}, codes.InvalidArgument, "expected a user ID"},
		{"board: empty name", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "  "})
			return err
		}, codes.InvalidArgument, "name is required"},
		{"board: long name", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: strings.Repeat("n", 101)})
			return err
		}, codes.InvalidArgument, "at most 100"},
		{"board: long description", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "n", Description: strings.Repeat("d", 501)})
			return err
		}, codes.InvalidArgument, "at most 500"},
		{"board: control characters", func(ctx context.Context) error {
			_, err := e.c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "a\x00b"})
			return err
		}, codes.InvalidArgument, "control"},
		{"interest: duplicate ignoring case", func(ctx context.Context) error {
			_, err := e.c.CreateInterest(ctx, &graphv1.CreateInterestRequest{Name: strings.ToUpper(in.Name)})
			return err
		}, codes.AlreadyExists, "exists"},
		{"interest: empty", func(ctx context.Context) error {
			_, err := e.c.CreateInterest(ctx, &graphv1.CreateInterestRequest{})
			return err
		}, codes.InvalidArgument, "name is required"},
		{"list boards: unknown user", func(ctx context.Context) error {
			_, err := e.c.ListBoards(ctx, &graphv1.ListBoardsRequest{UserId: ghost(zen.TypeUser)})
			return err
		}, codes.NotFound, "not found"},
	})
}

func graphTestPins(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	b := e.board(t, e.user(t))
	in1, in2 := e.interest(t), e.interest(t)
	e.q.take()
	p := graphOK(e.c.CreatePin(ctx, &graphv1.CreatePinRequest{
		AuthorIdStr: b.OwnerIdStr, BoardIdStr: b.IdStr, Details: "soup", Link: "https://example.com/soup",
		ImageUrl: "https://i.example.com/soup.jpg", InterestIds: []uint64{in1.Id}, InterestIdsStr: []string{in2.IdStr, in1.IdStr},
	}))(t)
	graphDiff(t, &graphv1.Pin{
		Id: p.Id, IdStr: zen.ID(p.Id).String(), AuthorId: b.OwnerId, AuthorIdStr: b.OwnerIdStr, BoardId: b.Id, BoardIdStr: b.IdStr,
		Details: "soup", Link: "https://example.com/soup", ImageUrl: "https://i.example.com/soup.jpg",
		InterestIds: []uint64{in1.Id, in2.Id}, InterestIdsStr: []string{in1.IdStr, in2.IdStr},
	}, p, graphIgnoreCreated)
	if got, want := zen.ID(p.Id).Shard(), zen.ID(b.Id).Shard(); got != want {
		t.Errorf("pin on shard %d, board on %d: want the board's shard", got, want)
	}
	edges := func() map[string][]uint64 {
		return map[string][]uint64{
			"user→pins": graphEdgeSet(t, e.g, b.OwnerId, zen.EdgeUserPins), "board→pins": graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins),
			"pin→boards": graphEdgeSet(t, e.g, p.Id, zen.EdgePinBoards), "pin→interests": graphEdgeSet(t, e.g, p.Id, zen.EdgePinInterests),
			"interest1→pins": graphEdgeSet(t, e.g, in1.Id, zen.EdgeInterestPins), "interest2→pins": graphEdgeSet(t, e.g, in2.Id, zen.EdgeInterestPins),
		}
	}
	wantEdges := map[string][]uint64{
		"user→pins": {p.Id}, "board→pins": {p.Id}, "pin→boards": {b.Id}, "pin→interests": sortedIDs(in1.Id, in2.Id),
		"interest1→pins": {p.Id}, "interest2→pins": {p.Id},
	}
	if diff := cmp.Diff(wantEdges, edges()); diff != "" {
		t.Errorf("edges (-want +got)\n%s", diff)
	}
	fan := pinlater.FanoutPayload{Pin: p.Id, Author: b.OwnerId, Board: b.Id, Interests: []uint64{in1.Id, in2.Id}, CreatedMs: p.CreatedMs}
	graphDiff(t, graphTasks(t, fan), e.q.take())

	// request_id: the retry returns the same pin, writes no second edge, and enqueues again
	// (pinlater deduplicates fanout by pin).
	req := &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/2.jpg", RequestId: "pin-" + b.IdStr}
	p2 := graphOK(e.c.CreatePin(ctx, req))(t)
	p3 := graphOK(e.c.CreatePin(ctx, req))(t)
	graphDiff(t, p2, p3)
	if got := graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins); !cmp.Equal(got, []uint64{p.Id, p2.Id}) {
		t.Errorf("board→pins after a replay = %v, want [%d %d]", got, p.Id, p2.Id)
	}
	if n, _ := e.g.CountEdges(ctx, zen.ID(b.OwnerId), zen.EdgeUserPins); n != 2 {
		t.Errorf("user→pins count %d, want 2", n)
	}
	e.q.take()

	other := e.board(t, e.user(t))
	tooMany := make([]uint64, pinlater.MaxInterests+1)
	for i := range tooMany {
		id, _ := zen.NewID(1, zen.TypeInterest, uint64(i+1))
		tooMany[i] = uint64(id)
	}
	mk := func(mod func(r *graphv1.CreatePinRequest)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			r := &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/x.jpg"}
			mod(r)
			_, err := e.c.CreatePin(ctx, r)
			return err
		}
	}
	graphRunErrCases(t, []graphErrCase{
		{"board of another user", mk(func(r *graphv1.CreatePinRequest) { r.BoardId = other.Id }), codes.PermissionDenied, "belongs to user"},
		{"unknown board", mk(func(r *graphv1.CreatePinRequest) { r.BoardId = ghost(zen.TypeBoard) }), codes.NotFound, "board"},
		{"unknown author", mk(func(r *graphv1.CreatePinRequest) { r.AuthorId = ghost(zen.TypeUser) }), codes.NotFound, "user"},
		{"author is a pin", mk(func(r *graphv1.CreatePinRequest) { r.AuthorId = p.Id }), codes.InvalidArgument, "author_id: expected a user ID"},
		{"board is a user", mk(func(r *graphv1.CreatePinRequest) { r.BoardId = b.OwnerId }), codes.InvalidArgument, "board_id: expected a board ID"},
		{"no board", mk(func(r *graphv1.CreatePinRequest) { r.BoardId = 0 }), codes.InvalidArgument, "board_id is required"},
		{"unknown interest", mk(func(r *graphv1.CreatePinRequest) { r.InterestIds = []uint64{ghost(zen.TypeInterest)} }), codes.NotFound, "interest"},
		{"interest is a board", mk(func(r *graphv1.CreatePinRequest) { r.InterestIdsStr = []string{b.IdStr} }), codes.InvalidArgument, "expected a interest ID"},
		{"too many interests", mk(func(r *graphv1.CreatePinRequest) { r.InterestIds = tooMany }), codes.InvalidArgument, "at most 64"},
		{"no image", mk(func(r *graphv1.CreatePinRequest) { r.ImageUrl = "" }), codes.InvalidArgument, "image_url is required"},
		{"relative image", mk(func(r *graphv1.CreatePinRequest) { r.ImageUrl = "/a.jpg" }), codes.InvalidArgument, "absolute http(s)"},
		{"javascript link", mk(func(r *graphv1.CreatePinRequest) { r.Link = "javascript:alert(1)" }), codes.InvalidArgument, "link"},
		{"long link", mk(func(r *graphv1.CreatePinRequest) { r.Link = "https://e.com/" + strings.Repeat("a", 2048) }), codes.InvalidArgument, "at most 2048"},
		{"long details", mk(func(r *graphv1.CreatePinRequest) { r.Details = strings.Repeat("d", 501) }), codes.InvalidArgument, "details"},
	})
	if got := e.q.take(); len(got) != 0 {
		t.Errorf("refused pins enqueued %v", got)
	}
	if got := graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins); len(got) != 2 {
		t.Errorf("refused pins changed board→pins: %v", got)
	}
}

func sortedIDs(ids ...uint64) []uint64 {
	out := append([]uint64(nil), ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func graphTestSaveLikeDelete(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	in := e.interest(t)
	b := e.board(t, e.user(t))
	p := e.pin(t, b, in)
	saver := e.user(t)
	sb := e.board(t, saver)
	e.q.take()
	graphDiff(t, &graphv1.SavePinResponse{SaveCount: 2}, graphOK(e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinIdStr: p.IdStr, BoardId: sb.Id}))(t))
	graphDiff(t, sortedIDs(b.Id, sb.Id), graphEdgeSet(t, e.g, p.Id, zen.EdgePinBoards))
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, sb.Id, zen.EdgeBoardPins))
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, saver.Id, zen.EdgeUserPins))
	got := e.q.take()
	if len(got) == 1 {
		delete(got[0].Payload, "created_ms")
	}
	want := graphTasks(t, pinlater.FanoutPayload{Pin: p.Id, Author: saver.Id, Board: sb.Id, Interests: []uint64{in.Id}, Repin: true})
	delete(want[0].Payload, "created_ms")
	graphDiff(t, want, got)
	graphDiff(t, &graphv1.SavePinResponse{AlreadySaved: true, SaveCount: 2}, graphOK(e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: p.Id, BoardId: sb.Id}))(t))

	graphDiff(t, &graphv1.LikePinResponse{LikeCount: 1}, graphOK(e.c.LikePin(ctx, &graphv1.LikePinRequest{UserId: saver.Id, PinId: p.Id}))(t))
	graphDiff(t, &graphv1.LikePinResponse{AlreadyLiked: true, LikeCount: 1}, graphOK(e.c.LikePin(ctx, &graphv1.LikePinRequest{UserIdStr: saver.IdStr, PinIdStr: p.IdStr}))(t))
	graphDiff(t, []uint64{saver.Id}, graphEdgeSet(t, e.g, p.Id, zen.EdgePinLikers))

	e.q.take()
	graphRunErrCases(t, []graphErrCase{
		{"save: board of another user", func(ctx context.Context) error {
			_, err := e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: p.Id, BoardId: b.Id})
			return err
		}, codes.PermissionDenied, "belongs to user"},
		{"save: unknown pin", func(ctx context.Context) error {
			_, err := e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: ghost(zen.TypePin), BoardId: sb.Id})
			return err
		}, codes.NotFound, "pin"},
		{"save: pin id is a board", func(ctx context.Context) error {
			_, err := e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: sb.Id, BoardId: sb.Id})
			return err
		}, codes.InvalidArgument, "pin_id: expected a pin ID"},
		{"save: unknown board", func(ctx context.Context) error {
			_, err := e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: p.Id, BoardId: ghost(zen.TypeBoard)})
			return err
		}, codes.NotFound, "board"},
		{"like: unknown pin", func(ctx context.Context) error {
			_, err := e.c.LikePin(ctx, &graphv1.LikePinRequest{UserId: saver.Id, PinId: ghost(zen.TypePin)})
			return err
		}, codes.NotFound, "pin"},
		{"like: unknown user", func(ctx context.Context) error {
			_, err := e.c.LikePin(ctx, &graphv1.LikePinRequest{UserId: ghost(zen.TypeUser), PinId: p.Id})
			return err
		}, codes.NotFound, "user"},
		{"like: user id is an interest", func(ctx context.Context) error {
			_, err := e.c.LikePin(ctx, &graphv1.LikePinRequest{UserId: in.Id, PinId: p.Id})
			return err
		}, codes.InvalidArgument, "expected a user ID"},
		{"delete: not the author", func(ctx context.Context) error {
			_, err := e.c.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: saver.Id, PinId: p.Id})
			return err
		}, codes.PermissionDenied, "created by user"},
		{"delete: unknown", func(ctx context.Context) error {
			_, err := e.c.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: saver.Id, PinId: ghost(zen.TypePin)})
			return err
		}, codes.NotFound, "not found"},
	})
	if got := e.q.take(); len(got) != 0 {
		t.Errorf("refused calls enqueued %v", got)
	}

	graphDiff(t, &graphv1.DeletePinResponse{}, graphOK(e.c.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: b.OwnerId, PinId: p.Id}))(t))
	graphDiff(t, graphTasks(t, pinlater.PinDeletePayload{Pin: p.Id, Author: b.OwnerId}), e.q.take())
	graphDiff(t, &graphv1.DeletePinResponse{AlreadyDeleted: true}, graphOK(e.c.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: b.OwnerId, PinId: p.Id}))(t))
	graphDiff(t, graphTasks(t, pinlater.PinDeletePayload{Pin: p.Id, Author: b.OwnerId}), e.q.take())
	got2 := graphOK(e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{Ids: []uint64{p.Id}}))(t)
	graphDiff(t, &graphv1.GetObjectsResponse{Missing: []uint64{p.Id}, MissingStr: []string{p.IdStr}}, got2)
	if _, err := e.c.SavePin(ctx, &graphv1.SavePinRequest{UserId: saver.Id, PinId: p.Id, BoardId: sb.Id}); status.Code(err) != codes.NotFound {
		t.Errorf("saving a deleted pin: %v, want NotFound", err)
	}
}

func graphTestFollow(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	a, bu := e.user(t), e.user(t)
	board := e.board(t, bu)
	in := e.interest(t)
	pin := e.pin(t, board)
	e.q.take()
	for _, tc := range []struct {
		target    uint64
		kind      string
		typ       graphv1.ObjectType
		follows   zen.EdgeType
		followers zen.EdgeType
	}{
		{bu.Id, pinlater.KindUser, graphv1.ObjectType_OBJECT_TYPE_USER, zen.EdgeFollowsUser, zen.EdgeFollowedByUser},
		{board.Id, pinlater.KindBoard, graphv1.ObjectType_OBJECT_TYPE_BOARD, zen.EdgeFollowsBoard, zen.EdgeBoardFollowers},
		{in.Id, pinlater.KindInterest, graphv1.ObjectType_OBJECT_TYPE_INTEREST, zen.EdgeFollowsInterest, zen.EdgeInterestFollowers},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			graphDiff(t, &graphv1.FollowResponse{TargetType: tc.typ}, graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: tc.target}))(t))
			backfill := graphTasks(t, pinlater.FollowBackfillPayload{User: a.Id, Target: tc.target, TargetKind: tc.kind})
			graphDiff(t, backfill, e.q.take())
			graphDiff(t, []uint64{tc.target}, graphEdgeSet(t, e.g, a.Id, tc.follows))
			graphDiff(t, []uint64{a.Id}, graphEdgeSet(t, e.g, tc.target, tc.followers))
			graphDiff(t, &graphv1.FollowResponse{AlreadyFollowing: true, TargetType: tc.typ},
				graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserIdStr: a.IdStr, TargetIdStr: zen.ID(tc.target).String()}))(t))
			graphDiff(t, backfill, e.q.take())

			lf := graphOK(e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: tc.target}))(t)
			graphDiff(t, &graphv1.ListFollowersResponse{Users: []*graphv1.User{a}, TotalCount: 1}, lf)
			lg := graphOK(e.c.ListFollowing(ctx, &graphv1.ListFollowingRequest{UserId: a.Id, Kind: tc.typ}))(t)
			if diff := cmp.Diff([]uint64{tc.target}, graphObjIDs(lg.Objects)); diff != "" || lg.TotalCount != 1 {
				t.Errorf("ListFollowing %v count %d (-want +got)\n%s", tc.typ, lg.TotalCount, diff)
			}

			graphDiff(t, &graphv1.UnfollowResponse{WasFollowing: true, TargetType: tc.typ}, graphOK(e.c.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: a.Id, TargetId: tc.target}))(t))
			cleanup := graphTasks(t, pinlater.UnfollowCleanupPayload{User: a.Id, Target: tc.target, TargetKind: tc.kind})
			graphDiff(t, cleanup, e.q.take())
			graphDiff(t, []uint64{}, graphEdgeSet(t, e.g, a.Id, tc.follows))
			graphDiff(t, []uint64{}, graphEdgeSet(t, e.g, tc.target, tc.followers))
			graphDiff(t, &graphv1.UnfollowResponse{TargetType: tc.typ}, graphOK(e.c.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: a.Id, TargetId: tc.target}))(t))
			graphDiff(t, cleanup, e.q.take())
		})
	}
	// The default kind of ListFollowing is users.
	graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: bu.Id}))(t)
	lg := graphOK(e.c.ListFollowing(ctx, &graphv1.ListFollowingRequest{UserId: a.Id}))(t)
	graphDiff(t, &graphv1.ListFollowingResponse{Objects: []*graphv1.Object{{Kind: &graphv1.Object_User{User: bu}}}, TotalCount: 1}, lg)
	e.q.take()

	graphRunErrCases(t, []graphErrCase{
		{"follow self", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: a.Id})
			return err
		}, codes.InvalidArgument, "themselves"},
		{"follow a pin", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: pin.Id})
			return err
		}, codes.InvalidArgument, "expected a user, board or interest ID, got a pin ID"},
		{"follow unknown board", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: ghost(zen.TypeBoard)})
			return err
		}, codes.NotFound, "board"},
		{"unknown follower", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: ghost(zen.TypeUser), TargetId: bu.Id})
			return err
		}, codes.NotFound, "user"},
		{"follower is a board", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: board.Id, TargetId: bu.Id})
			return err
		}, codes.InvalidArgument, "user_id: expected a user ID"},
		{"follow: no target", func(ctx context.Context) error {
			_, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id})
			return err
		}, codes.InvalidArgument, "target_id is required"},
		{"unfollow a pin", func(ctx context.Context) error {
			_, err := e.c.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: a.Id, TargetId: pin.Id})
			return err
		}, codes.InvalidArgument, "got a pin ID"},
		{"unfollow: unknown user", func(ctx context.Context) error {
			_, err := e.c.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: ghost(zen.TypeUser), TargetId: bu.Id})
			return err
		}, codes.NotFound, "user"},
		{"followers of a pin", func(ctx context.Context) error {
			_, err := e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: pin.Id})
			return err
		}, codes.InvalidArgument, "got a pin ID"},
		{"followers of unknown interest", func(ctx context.Context) error {
			_, err := e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: ghost(zen.TypeInterest)})
			return err
		}, codes.NotFound, "interest"},
		{"following: kind pin", func(ctx context.Context) error {
			_, err := e.c.ListFollowing(ctx, &graphv1.ListFollowingRequest{UserId: a.Id, Kind: graphv1.ObjectType_OBJECT_TYPE_PIN})
			return err
		}, codes.InvalidArgument, "cannot be followed"},
	})
	if got := e.q.take(); len(got) != 0 {
		t.Errorf("refused follows enqueued %v", got)
	}
	// Unfollowing a deleted target works.
	graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: a.Id, TargetId: board.Id}))(t)
	if err := e.g.Delete(ctx, zen.ID(board.Id)); err != nil {
		t.Fatal(err)
	}
	graphDiff(t, &graphv1.UnfollowResponse{WasFollowing: true, TargetType: graphv1.ObjectType_OBJECT_TYPE_BOARD},
		graphOK(e.c.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: a.Id, TargetId: board.Id}))(t))
}

func graphObjIDs(os []*graphv1.Object) []uint64 {
	out := []uint64{}
	for _, o := range os {
		switch k := o.Kind.(type) {
		case *graphv1.Object_User:
			out = append(out, k.User.Id)
		case *graphv1.Object_Board:
			out = append(out, k.Board.Id)
		case *graphv1.Object_Pin:
			out = append(out, k.Pin.Id)
		case *graphv1.Object_Interest:
			out = append(out, k.Interest.Id)
		}
	}
	return out
}

func graphTestGetObjects(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	u := e.user(t)
	b := e.board(t, u)
	in := e.interest(t)
	p := e.pin(t, b, in)
	gone := e.user(t)
	graphOK(e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: gone.Id}))(t)
	unknownType, _ := zen.NewID(1, 9, 1)
	got := graphOK(e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{
		Ids:    []uint64{p.Id, ghost(zen.TypeBoard), u.Id, gone.Id},
		IdsStr: []string{b.IdStr, in.IdStr, p.IdStr, unknownType.String()},
	}))(t)
	want := &graphv1.GetObjectsResponse{
		Objects: []*graphv1.Object{
			{Kind: &graphv1.Object_Pin{Pin: p}}, {Kind: &graphv1.Object_User{User: u}},
			{Kind: &graphv1.Object_Board{Board: b}}, {Kind: &graphv1.Object_Interest{Interest: in}},
		},
		Missing:    []uint64{ghost(zen.TypeBoard), gone.Id, uint64(unknownType)},
		MissingStr: []string{zen.ID(ghost(zen.TypeBoard)).String(), gone.IdStr, unknownType.String()},
	}
	graphDiff(t, want, got)
	graphRunErrCases(t, []graphErrCase{
		{"none", func(ctx context.Context) error {
			_, err := e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{})
			return err
		}, codes.InvalidArgument, "at least one"},
		{"too many", func(ctx context.Context) error {
			_, err := e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{Ids: make([]uint64, 1001)})
			return err
		}, codes.InvalidArgument, "at most 1000"},
		{"zero id", func(ctx context.Context) error {
			_, err := e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{Ids: []uint64{u.Id, 0}})
			return err
		}, codes.InvalidArgument, "ids[1]"},
		{"malformed string", func(ctx context.Context) error {
			_, err := e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{IdsStr: []string{"-5"}})
			return err
		}, codes.InvalidArgument, "ids_str[0]"},
		{"type 0", func(ctx context.Context) error {
			_, err := e.c.GetObjects(ctx, &graphv1.GetObjectsRequest{Ids: []uint64{5}})
			return err
		}, codes.InvalidArgument, "ID 5 has type 0 (none)"},
	})
}

func graphTestPaging(t *testing.T, e *graphEnv, ghost func(zen.Type) uint64) {
	ctx := context.Background()
	star := e.user(t)
	var fans []*graphv1.User
	for range 5 {
		f := e.user(t)
		graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: f.Id, TargetId: star.Id}))(t)
		fans = append(fans, f)
	}
	e.q.take()
	var got []uint64
	cursor, pages := "", 0
	for {
		r := graphOK(e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetIdStr: star.IdStr, Cursor: cursor, PageSize: 2}))(t)
		pages++
		if r.TotalCount != 5 {
			t.Errorf("page %d: total_count %d, want 5", pages, r.TotalCount)
		}
		if len(r.Users) > 2 {
			t.Errorf("page %d: %d users, page_size 2", pages, len(r.Users))
		}
		for _, u := range r.Users {
			got = append(got, u.Id)
		}
		if r.NextCursor == "" || pages > 10 {
			break
		}
		cursor = r.NextCursor
	}
	var want []uint64
	for i := len(fans) - 1; i >= 0; i-- {
		want = append(want, fans[i].Id) // newest first
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("followers over %d pages (-want +got)\n%s", pages, diff)
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	// A cursor of another list is refused.
	r := graphOK(e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: star.Id, PageSize: 2}))(t)
	graphRunErrCases(t, []graphErrCase{
		{"cursor of another list", func(ctx context.Context) error {
			_, err := e.c.ListFollowing(ctx, &graphv1.ListFollowingRequest{UserId: fans[0].Id, Cursor: r.NextCursor})
			return err
		}, codes.InvalidArgument, "cursor"},
		{"garbage cursor", func(ctx context.Context) error {
			_, err := e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: star.Id, Cursor: "not-a-cursor"})
			return err
		}, codes.InvalidArgument, "cursor"},
		{"negative page size", func(ctx context.Context) error {
			_, err := e.c.ListBoards(ctx, &graphv1.ListBoardsRequest{UserId: star.Id, PageSize: -1})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"page size too big", func(ctx context.Context) error {
			_, err := e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: star.Id, PageSize: 501})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"followers of unknown user", func(ctx context.Context) error {
			_, err := e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: ghost(zen.TypeUser)})
			return err
		}, codes.NotFound, "user"},
	})
	// A deleted follower leaves the list (the count is the stored edge count).
	graphOK(e.c.DeleteUser(ctx, &graphv1.DeleteUserRequest{UserId: fans[4].Id}))(t)
	r = graphOK(e.c.ListFollowers(ctx, &graphv1.ListFollowersRequest{TargetId: star.Id}))(t)
	got = nil
	for _, u := range r.Users {
		got = append(got, u.Id)
	}
	graphDiff(t, want[1:], got)
	e.q.take()
}

func graphTestEnqueueRetry(t *testing.T, e *graphEnv) {
	ctx := context.Background()
	b := e.board(t, e.user(t))
	e.q.take()
	req := &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/r.jpg", RequestId: "retry-" + b.IdStr}
	e.q.fail(1)
	_, err := e.c.CreatePin(ctx, req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "could not be enqueued") {
		t.Fatalf("CreatePin with the queue down: %v, want Unavailable", err)
	}
	p := graphOK(e.c.CreatePin(ctx, req))(t)
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins))
	graphDiff(t, graphTasks(t, pinlater.FanoutPayload{Pin: p.Id, Author: b.OwnerId, Board: b.Id, CreatedMs: p.CreatedMs}), e.q.take())

	f := e.user(t)
	e.q.fail(1)
	if _, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: f.Id, TargetId: b.Id}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Follow with the queue down: %v, want Unavailable", err)
	}
	graphDiff(t, &graphv1.FollowResponse{AlreadyFollowing: true, TargetType: graphv1.ObjectType_OBJECT_TYPE_BOARD},
		graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: f.Id, TargetId: b.Id}))(t))
	graphDiff(t, graphTasks(t, pinlater.FollowBackfillPayload{User: f.Id, Target: b.Id, TargetKind: pinlater.KindBoard}), e.q.take())
	if n, _ := e.g.CountEdges(ctx, zen.ID(b.Id), zen.EdgeBoardFollowers); n != 1 {
		t.Errorf("board followers count %d after a retried follow, want 1", n)
	}
}

func graphTestConcurrent(t *testing.T, e *graphEnv) {
	ctx := context.Background()
	name := e.name("race")
	const n = 8
	var wg sync.WaitGroup
	codesGot := make([]codes.Code, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: name, Email: fmt.Sprintf("%s.%d@example.com", name, i)})
			codesGot[i] = status.Code(err)
		})
	}
	wg.Wait()
	count := map[codes.Code]int{}
	for _, c := range codesGot {
		count[c]++
	}
	graphDiff(t, map[codes.Code]int{codes.OK: 1, codes.AlreadyExists: n - 1}, count)

	b := e.board(t, e.user(t))
	ids := make([]uint64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			p, err := e.c.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/c.jpg", RequestId: "same"})
			errs[i] = err
			if err == nil {
				ids[i] = p.Id
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent CreatePin %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("concurrent CreatePin with one request_id: ids %v differ", ids)
			break
		}
	}
	graphDiff(t, []uint64{ids[0]}, graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins))
	e.q.take()
}
