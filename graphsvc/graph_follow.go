package graphsvc

import (
	"context"
	"errors"

	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// graphFollowKind is what following a target of one type means.
type graphFollowKind struct {
	follows   zen.EdgeType // user → target
	followers zen.EdgeType // target → user
	kind      string       // pinlater.Kind*
	msg       graphv1.ObjectType
}

var graphFollowKinds = map[zen.Type]graphFollowKind{
	zen.TypeUser:     {zen.EdgeFollowsUser, zen.EdgeFollowedByUser, pinlater.KindUser, graphv1.ObjectType_OBJECT_TYPE_USER},
	zen.TypeBoard:    {zen.EdgeFollowsBoard, zen.EdgeBoardFollowers, pinlater.KindBoard, graphv1.ObjectType_OBJECT_TYPE_BOARD},
	zen.TypeInterest: {zen.EdgeFollowsInterest, zen.EdgeInterestFollowers, pinlater.KindInterest, graphv1.ObjectType_OBJECT_TYPE_INTEREST},
}

// followArgs reads and checks the user and target of a follow or unfollow.
func (s *GraphService) followArgs(ctx context.Context, un uint64, us string, tn uint64, ts string) (user, target zen.ID, k graphFollowKind, err error) {
	user, err = graphTypedID("user_id", un, us, zen.TypeUser)
	if err != nil {
		return 0, 0, k, err
	}
	target, err = graphAnyID("target_id", tn, ts)
	if err != nil {
		return 0, 0, k, err
	}
	k, ok := graphFollowKinds[target.Type()]
	if !ok {
		return 0, 0, k, graphInvalid("target_id: expected a user, board or interest ID, got a %s ID", target.Type())
	}
	if target == user {
		return 0, 0, k, graphInvalid("a user cannot follow themselves")
	}
	if _, err := s.get(ctx, user); err != nil {
		return 0, 0, k, err
	}
	return user, target, k, nil
}

// Follow makes a user follow a live user, board or interest: the follows edge, then its inverse
// (the followers list fanout streams) written synchronously, then follow-backfill.
func (s *GraphService) Follow(ctx context.Context, req *graphv1.FollowRequest) (*graphv1.FollowResponse, error) {
	user, target, k, err := s.followArgs(ctx, req.GetUserId(), req.GetUserIdStr(), req.GetTargetId(), req.GetTargetIdStr())
	if err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, target); err != nil {
		return nil, err
	}
	resp := &graphv1.FollowResponse{TargetType: k.msg}
	if _, err := s.g.HasEdge(ctx, user, k.follows, target); err == nil {
		resp.AlreadyFollowing = true
	} else if !errors.Is(err, zen.ErrNotFound) {
		return nil, s.fail("follow", err)
	}
	// Durable with the event's row (WithEventTable; see CreatePin).
	if err := s.addBoth(s.stepCtx(ctx), zen.Edge{From: user, Type: k.follows, To: target}); err != nil {
		return nil, err
	}
	if err := s.enqueue(ctx, "follow", pinlater.FollowBackfillPayload{
		V: pinlater.PayloadVersion, User: uint64(user), Target: uint64(target), TargetKind: k.kind,
	}); err != nil {
		return nil, err
	}
	return resp, nil
}

// Unfollow removes the follows edge, then its inverse, then enqueues unfollow-cleanup. The target
// may have been deleted meanwhile. Unfollowing what is not followed succeeds and still enqueues
// the cleanup, so a retry after a failed enqueue completes.
func (s *GraphService) Unfollow(ctx context.Context, req *graphv1.UnfollowRequest) (*graphv1.UnfollowResponse, error) {
	user, target, k, err := s.followArgs(ctx, req.GetUserId(), req.GetUserIdStr(), req.GetTargetId(), req.GetTargetIdStr())
	if err != nil {
		return nil, err
	}
	resp := &graphv1.UnfollowResponse{TargetType: k.msg}
	if _, err := s.g.HasEdge(ctx, user, k.follows, target); err == nil {
		resp.WasFollowing = true
	} else if !errors.Is(err, zen.ErrNotFound) {
		return nil, s.fail("unfollow", err)
	}
	// Durable with the event's row, which is always written (WithEventTable; see CreatePin).
	wctx := s.stepCtx(ctx)
	if err := s.g.RemoveEdge(wctx, user, k.follows, target); err != nil {
		return nil, s.fail("remove follows edge", err)
	}
	if err := s.g.RemoveInverse(wctx, user, k.follows, target); err != nil {
		return nil, s.fail("remove followers edge", err)
	}
	if err := s.enqueue(ctx, "unfollow", pinlater.UnfollowCleanupPayload{
		V: pinlater.PayloadVersion, User: uint64(user), Target: uint64(target), TargetKind: k.kind,
	}); err != nil {
		return nil, err
	}
	return resp, nil
}

// GetObjects returns the live objects among up to graphMaxBatch IDs; the rest are missing.
func (s *GraphService) GetObjects(ctx context.Context, req *graphv1.GetObjectsRequest) (*graphv1.GetObjectsResponse, error) {
	if n := len(req.GetIds()) + len(req.GetIdsStr()); n == 0 {
		return nil, graphInvalid("ids: at least one ID is required")
	} else if n > graphMaxBatch {
		return nil, graphInvalid("ids: %d IDs, at most %d", n, graphMaxBatch)
	}
	var ids []zen.ID
	seen := map[zen.ID]bool{}
	add := func(id zen.ID) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for i, n := range req.GetIds() {
		id, err := graphAnyID("ids", n, "")
		if err != nil {
			return nil, graphInvalid("ids[%d]: %v", i, status.Convert(err).Message())
		}
		add(id)
	}
	for i, str := range req.GetIdsStr() {
		if str == "" {
			return nil, graphInvalid("ids_str[%d] is empty", i)
		}
		id, err := graphAnyID("ids", 0, str)
		if err != nil {
			return nil, graphInvalid("ids_str[%d]: %v", i, status.Convert(err).Message())
		}
		add(id)
	}
	live, err := s.g.GetMany(ctx, ids)
	if err != nil {
		return nil, s.fail("get objects", err)
	}
	resp := &graphv1.GetObjectsResponse{}
	for _, id := range ids {
		o, ok := live[id]
		var m *graphv1.Object
		if ok {
			m = graphObjectMsg(o)
		}
		if m == nil {
			resp.Missing = append(resp.Missing, uint64(id))
			resp.MissingStr = append(resp.MissingStr, id.String())
			continue
		}
		resp.Objects = append(resp.Objects, m)
	}
	return resp, nil
}

// page reads one page of the edge list (from, t) and the live objects it points to, in list
// order, with the list's count.
func (s *GraphService) page(ctx context.Context, from zen.ID, t zen.EdgeType, cursor string, size int32, newestFirst bool) ([]zen.Object, string, int64, error) {
	if size < 0 || size > graphMaxPage {
		return nil, "", 0, graphInvalid("page_size %d out of range [0, %d]", size, graphMaxPage)
	}
	n := int(size)
	if n == 0 {
		n = graphDefaultPage
	}
	if _, err := s.get(ctx, from); err != nil {
		return nil, "", 0, err
	}
	es, next, err := s.g.ListEdges(ctx, from, t, cursor, n, newestFirst)
	if errors.Is(err, zen.ErrBadCursor) {
		return nil, "", 0, graphInvalid("cursor: not a cursor of this list (%v)", err)
	}
	if err != nil {
		return nil, "", 0, s.fail("list", err)
	}
	ids := make([]zen.ID, len(es))
	for i, e := range es {
		ids[i] = e.To
	}
	live, err := s.g.GetMany(ctx, ids)
	if err != nil {
		return nil, "", 0, s.fail("list", err)
	}
	out := make([]zen.Object, 0, len(ids))
	for _, id := range ids {
		if o, ok := live[id]; ok {
			out = append(out, o)
		}
	}
	count, err := s.g.CountEdges(ctx, from, t)
	if err != nil {
		return nil, "", 0, s.fail("count", err)
	}
	return out, next, count, nil
}

// ListBoards lists a live user's boards, oldest first.
func (s *GraphService) ListBoards(ctx context.Context, req *graphv1.ListBoardsRequest) (*graphv1.ListBoardsResponse, error) {
	user, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	objs, next, count, err := s.page(ctx, user, zen.EdgeUserBoards, req.GetCursor(), req.GetPageSize(), false)
	if err != nil {
		return nil, err
	}
	resp := &graphv1.ListBoardsResponse{NextCursor: next, TotalCount: count}
	for _, o := range objs {
		resp.Boards = append(resp.Boards, graphBoardMsg(o))
	}
	return resp, nil
}

// ListFollowers lists the users following a live user, board or interest, newest first.
func (s *GraphService) ListFollowers(ctx context.Context, req *graphv1.ListFollowersRequest) (*graphv1.ListFollowersResponse, error) {
	target, err := graphAnyID("target_id", req.GetTargetId(), req.GetTargetIdStr())
	if err != nil {
		return nil, err
	}
	k, ok := graphFollowKinds[target.Type()]
	if !ok {
		return nil, graphInvalid("target_id: expected a user, board or interest ID, got a %s ID", target.Type())
	}
	objs, next, count, err := s.page(ctx, target, k.followers, req.GetCursor(), req.GetPageSize(), true)
	if err != nil {
		return nil, err
	}
	resp := &graphv1.ListFollowersResponse{NextCursor: next, TotalCount: count}
	for _, o := range objs {
		resp.Users = append(resp.Users, graphUserMsg(o))
	}
	return resp, nil
}

// ListFollowing lists what a live user follows of one kind (users by default), newest first.
func (s *GraphService) ListFollowing(ctx context.Context, req *graphv1.ListFollowingRequest) (*graphv1.ListFollowingResponse, error) {
	user, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	t := zen.TypeUser
	switch req.GetKind() {
	case graphv1.ObjectType_OBJECT_TYPE_UNSPECIFIED, graphv1.ObjectType_OBJECT_TYPE_USER:
	case graphv1.ObjectType_OBJECT_TYPE_BOARD:
		t = zen.TypeBoard
	case graphv1.ObjectType_OBJECT_TYPE_INTEREST:
		t = zen.TypeInterest
	default:
		return nil, graphInvalid("kind: %v cannot be followed (want user, board or interest)", req.GetKind())
	}
	objs, next, count, err := s.page(ctx, user, graphFollowKinds[t].follows, req.GetCursor(), req.GetPageSize(), true)
	if err != nil {
		return nil, err
	}
	resp := &graphv1.ListFollowingResponse{NextCursor: next, TotalCount: count}
	for _, o := range objs {
		if m := graphObjectMsg(o); m != nil {
			resp.Objects = append(resp.Objects, m)
		}
	}
	return resp, nil
}
