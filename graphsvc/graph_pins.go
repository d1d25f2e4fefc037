package graphsvc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// graphSeq is the edge sequence of an object's creation edges: its creation time (zero, which
// lets the graph use now, when absent).
func graphSeq(o zen.Object) seq.Seq {
	if ms := graphInt(o.Data, "created_ms"); ms > 0 {
		return seq.FromMillis(ms)
	}
	return seq.Seq{}
}

// ownedBoard reads a live board and checks that user owns it.
func (s *GraphService) ownedBoard(ctx context.Context, board, user zen.ID) (zen.Object, error) {
	b, err := s.get(ctx, board)
	if err != nil {
		return zen.Object{}, err
	}
	if owner := graphRef(b.Data, "owner"); owner != user {
		return zen.Object{}, status.Errorf(codes.PermissionDenied, "board %d belongs to user %d, not to user %d", board, owner, user)
	}
	return b, nil
}

// addBoth writes an edge and then its inverse, synchronously; both writes are idempotent, so a
// retry after a failure between them finishes the pair.
func (s *GraphService) addBoth(ctx context.Context, e zen.Edge) error {
	if err := s.g.AddEdge(ctx, e); err != nil {
		return s.fail("add edge", err)
	}
	if err := s.g.AddInverse(ctx, e); err != nil {
		return s.fail("add inverse edge", err)
	}
	return nil
}

// interestsExist fails with NotFound naming the first of ids that is not a live interest.
func (s *GraphService) interestsExist(ctx context.Context, ids []zen.ID) error {
	if len(ids) == 0 {
		return nil
	}
	live, err := s.g.GetMany(ctx, ids)
	if err != nil {
		return s.fail("get interests", err)
	}
	for _, id := range ids {
		if _, ok := live[id]; !ok {
			return status.Errorf(codes.NotFound, "interest %d not found", id)
		}
	}
	return nil
}

// CreatePin creates a pin on a board its author owns, placed on the board's shard, with the
// edges pin→boards and pin→interests, then user→pins, board→pins and interest→pins
// (addPinEdges), then enqueues its fanout. With a request_id, a retry returns the same pin and
// finishes any step left undone.
func (s *GraphService) CreatePin(ctx context.Context, req *graphv1.CreatePinRequest) (*graphv1.Pin, error) {
	author, err := graphTypedID("author_id", req.GetAuthorId(), req.GetAuthorIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	board, err := graphTypedID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	if err := graphCheckText("details", req.GetDetails(), graphMaxDescription, false); err != nil {
		return nil, err
	}
	if err := graphCheckURL("link", req.GetLink(), false); err != nil {
		return nil, err
	}
	if err := graphCheckURL("image_url", req.GetImageUrl(), true); err != nil {
		return nil, err
	}
	if err := graphCheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	interests, err := graphIDList("interest_ids", req.GetInterestIds(), req.GetInterestIdsStr(), zen.TypeInterest)
	if err != nil {
		return nil, err
	}
	if len(interests) > pinlater.MaxInterests {
		return nil, graphInvalid("interest_ids: %d interests, at most %d", len(interests), pinlater.MaxInterests)
	}
	if _, err := s.get(ctx, author); err != nil {
		return nil, err
	}
	if _, err := s.ownedBoard(ctx, board, author); err != nil {
		return nil, err
	}
	if err := s.interestsExist(ctx, interests); err != nil {
		return nil, err
	}
	istr := make([]string, len(interests))
	for i, id := range interests {
		istr[i] = id.String()
	}
	r := newIdem("pin", author.String(), req.GetRequestId(), board.String(), req.GetDetails(), req.GetLink(),
		req.GetImageUrl(), strings.Join(istr, ","))
	// The pin's writes, then its event: with WithEventTable on one log, only the event's row
	// waits for an fsync, and it makes the writes before it durable.
	wctx := s.stepCtx(ctx)
	o, _, err := s.create(wctx, r, zen.TypePin, board, map[string]any{
		"author": author.String(), "board": board.String(), "details": req.GetDetails(),
		"link": req.GetLink(), "image_url": req.GetImageUrl(), "interests": istr,
		"created_ms": s.now().UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	// A replay uses what the first call stored.
	author, board, interests = graphRef(o.Data, "author"), graphRef(o.Data, "board"), graphIDs(o.Data, "interests")
	if err := s.addPinEdges(wctx, o, author, board, interests); err != nil {
		return nil, err
	}
	if err := s.enqueue(ctx, "create pin "+o.ID.String(), graphFanout(o, author, board, interests, graphInt(o.Data, "created_ms"), false)); err != nil {
		return nil, err
	}
	return graphPinMsg(o), nil
}

// addPinEdges writes a new pin's edges: first the pin's own facts (pin→boards, pin→interests),
// then the lists through which readers find it (user→pins, board→pins, interest→pins). A follow
// backfill that runs beside the creation finds the pin through those lists and scores it from
// its facts (its saves, its interests); written in this order, it never finds the pin before
// them, so it scores the pin as its fanout will and writes the same pool row. Every write is
// idempotent: a retry of the call finishes what a failure left undone.
func (s *GraphService) addPinEdges(ctx context.Context, o zen.Object, author, board zen.ID, interests []zen.ID) error {
	sq := graphSeq(o)
	facts := []zen.Edge{{From: o.ID, Type: zen.EdgePinBoards, To: board, Seq: sq}}
	for _, in := range interests {
		facts = append(facts, zen.Edge{From: o.ID, Type: zen.EdgePinInterests, To: in, Seq: sq})
	}
	for _, e := range facts {
		if err := s.g.AddEdge(ctx, e); err != nil {
			return s.fail("add pin edge", err)
		}
	}
	if err := s.g.AddEdge(ctx, zen.Edge{From: author, Type: zen.EdgeUserPins, To: o.ID, Seq: sq}); err != nil {
		return s.fail("add user→pins", err)
	}
	for _, e := range facts {
		if err := s.g.AddInverse(ctx, e); err != nil {
			return s.fail("add inverse edge", err)
		}
	}
	return nil
}

// graphFanout is the fanout payload of a pin (or a repin by author onto board).
func graphFanout(pin zen.Object, author, board zen.ID, interests []zen.ID, createdMs int64, repin bool) pinlater.FanoutPayload {
	p := pinlater.FanoutPayload{
		V: pinlater.PayloadVersion, Pin: uint64(pin.ID), Author: uint64(author), Board: uint64(board),
		CreatedMs: createdMs, Repin: repin,
	}
	for _, in := range interests {
		p.Interests = append(p.Interests, uint64(in))
	}
	return p
}

// graphIDList reads a list of IDs of type want given as numbers and strings, without duplicates.
func graphIDList(field string, nums []uint64, strs []string, want zen.Type) ([]zen.ID, error) {
	var out []zen.ID
	seen := map[zen.ID]bool{}
	add := func(id zen.ID) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for i, n := range nums {
		id, err := graphTypedID(field, n, "", want)
		if err != nil {
			return nil, graphInvalid("%s[%d]: %v", field, i, status.Convert(err).Message())
		}
		add(id)
	}
	for i, str := range strs {
		if str == "" {
			return nil, graphInvalid("%s_str[%d] is empty", field, i)
		}
		id, err := graphTypedID(field, 0, str, want)
		if err != nil {
			return nil, graphInvalid("%s_str[%d]: %v", field, i, status.Convert(err).Message())
		}
		add(id)
	}
	return out, nil
}

// SavePin repins a live pin onto a board the user owns: user→pins, board→pins and pin→boards,
// then the repin's fanout to the saver's followers (its own task ID, so it is not taken for a
// duplicate of the pin's first fanout).
func (s *GraphService) SavePin(ctx context.Context, req *graphv1.SavePinRequest) (*graphv1.SavePinResponse, error) {
	user, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	pinID, err := graphTypedID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	board, err := graphTypedID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, user); err != nil {
		return nil, err
	}
	pin, err := s.get(ctx, pinID)
	if err != nil {
		return nil, err
	}
	if _, err := s.ownedBoard(ctx, board, user); err != nil {
		return nil, err
	}
	resp := &graphv1.SavePinResponse{}
	e, err := s.g.HasEdge(ctx, board, zen.EdgeBoardPins, pinID)
	switch {
	case err == nil:
		resp.AlreadySaved = true
	case !errors.Is(err, zen.ErrNotFound):
		return nil, s.fail("save pin", err)
	default:
		e = zen.Edge{From: board, Type: zen.EdgeBoardPins, To: pinID, Seq: seq.FromMillis(s.now().UnixMilli())}
	}
	wctx := s.stepCtx(ctx) // durable with the event's row (see CreatePin)
	if err := s.g.AddEdge(wctx, zen.Edge{From: user, Type: zen.EdgeUserPins, To: pinID, Seq: e.Seq}); err != nil {
		return nil, s.fail("add user→pins", err)
	}
	if err := s.addBoth(wctx, zen.Edge{From: board, Type: zen.EdgeBoardPins, To: pinID, Seq: e.Seq}); err != nil {
		return nil, err
	}
	p := graphFanout(pin, user, board, graphIDs(pin.Data, "interests"), s.now().UnixMilli(), true)
	if err := s.enqueue(ctx, "save pin "+pinID.String(), p); err != nil {
		return nil, err
	}
	n, err := s.g.CountEdges(ctx, pinID, zen.EdgePinBoards)
	if err != nil {
		return nil, s.fail("count saves", err)
	}
	resp.SaveCount = n
	return resp, nil
}

// LikePin records that a user likes a pin (user→likes and pin→likers).
func (s *GraphService) LikePin(ctx context.Context, req *graphv1.LikePinRequest) (*graphv1.LikePinResponse, error) {
	user, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	pin, err := graphTypedID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, user); err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, pin); err != nil {
		return nil, err
	}
	resp := &graphv1.LikePinResponse{}
	if _, err := s.g.HasEdge(ctx, user, zen.EdgeUserLikes, pin); err == nil {
		resp.AlreadyLiked = true
	} else if !errors.Is(err, zen.ErrNotFound) {
		return nil, s.fail("like pin", err)
	}
	if err := s.addBoth(ctx, zen.Edge{From: user, Type: zen.EdgeUserLikes, To: pin}); err != nil {
		return nil, err
	}
	n, err := s.g.CountEdges(ctx, pin, zen.EdgePinLikers)
	if err != nil {
		return nil, s.fail("count likes", err)
	}
	resp.LikeCount = n
	return resp, nil
}

// DeletePin soft-deletes a pin of the acting user and enqueues pin-delete. Its edges stay (readers
// skip deleted objects). Deleting a deleted pin succeeds (already_deleted) and enqueues the event
// again, so a retry after a failed enqueue completes.
func (s *GraphService) DeletePin(ctx context.Context, req *graphv1.DeletePinRequest) (*graphv1.DeletePinResponse, error) {
	user, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	pin, err := graphTypedID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	resp := &graphv1.DeletePinResponse{}
	o, err := s.g.Get(ctx, pin)
	switch {
	case errors.Is(err, zen.ErrNotFound):
		if err := s.g.Delete(ctx, pin); errors.Is(err, zen.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "pin %d not found", pin)
		} else if err != nil {
			return nil, s.fail("delete pin", err)
		}
		resp.AlreadyDeleted = true
	case err != nil:
		return nil, s.fail("delete pin", err)
	default:
		if a := graphRef(o.Data, "author"); a != user {
			return nil, status.Errorf(codes.PermissionDenied, "pin %d was created by user %d, not by user %d", pin, a, user)
		}
		if err := s.g.Delete(ctx, pin); err != nil {
			return nil, s.fail("delete pin", err)
		}
	}
	// Off its boards and its author's pins before answering, so lists and counts agree with
	// GetObjects at once; the pin→boards inverse stays for the purge job, which walks it to
	// reach the boards' followers and then removes it (and repeats these, idempotently).
	if err := s.g.UnlistPin(ctx, pin, user); err != nil {
		return nil, s.fail("delete pin", err)
	}
	if err := s.enqueue(ctx, "delete pin "+pin.String(), pinlater.PinDeletePayload{
		V: pinlater.PayloadVersion, Pin: uint64(pin), Author: uint64(user),
	}); err != nil {
		return nil, err
	}
	return resp, nil
}
