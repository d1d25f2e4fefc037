package graphsvc

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	boardv1 "github.com/smartfeed/smartfeed/proto/board/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// Page sizes of ListPins.
const (
	boardDefaultPage = 50
	boardMaxPage     = 500
)

// BoardService implements boardv1.BoardService: the pins of a board in the user's order, over
// zen.Order. A move writes one row (the board's order row); a move that leaves a tight gap, or
// leaves more than zen.OrderOptions.FoldAbove moved pins on that row, queues a respace task
// (deduplicated by board), which folds the moved pins into the edge list and re-spaces: the task
// runs HandleRespace. It is safe for concurrent use.
type BoardService struct {
	boardv1.UnimplementedBoardServiceServer
	g   *zen.Graph
	o   *zen.Order
	q   Enqueuer
	log *zap.Logger
}

// NewBoardService returns the service. log nil means no logging.
func NewBoardService(g *zen.Graph, o *zen.Order, q Enqueuer, log *zap.Logger) *BoardService {
	if log == nil {
		log = zap.NewNop()
	}
	return &BoardService{g: g, o: o, q: q, log: log}
}

// Register registers BoardService on srv (a *grpc.Server).
func (s *BoardService) Register(srv grpc.ServiceRegistrar) {
	boardv1.RegisterBoardServiceServer(srv, s)
}

// HandleRespace runs a respace task: pinlater.Typed(s.HandleRespace) is its handler. It folds
// the board's moved pins into its edge list, then re-spaces tight gaps. It is idempotent (a board
// with nothing to fold and no tight gap is left alone).
func (s *BoardService) HandleRespace(ctx context.Context, p pinlater.RespacePayload) error {
	board := zen.ID(p.Board)
	if err := board.Check(zen.TypeBoard); err != nil {
		return fmt.Errorf("respace %d: %w: %w", p.Board, pinlater.ErrInvalidPayload, err)
	}
	res, err := s.o.RespaceBoard(ctx, board)
	if err != nil {
		return err
	}
	s.log.Debug("board re-spaced", zap.Uint64("board", p.Board), zap.Int("folded", res.Folded), zap.Int("moved", res.Moved), zap.Int("windows", res.Windows))
	return nil
}

// boardID reads a required ID of type want from its number and decimal-string twin.
func boardID(field string, num uint64, str string, want zen.Type) (zen.ID, error) {
	id, err := boardOptionalID(field, num, str, want)
	if err != nil {
		return 0, err
	}
	if id == 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%s is required (set %s or %s_str)", field, field, field)
	}
	return id, nil
}

// boardOptionalID is boardID where unset (0 and "") means none.
func boardOptionalID(field string, num uint64, str string, want zen.Type) (zen.ID, error) {
	id, err := zen.WireID(num, str)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	if id == 0 {
		return 0, nil
	}
	if err := id.Check(want); err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	return id, nil
}

// fail maps an error to a gRPC status (a status passes through).
func (s *BoardService) fail(op string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, zen.ErrBadMove), errors.Is(err, zen.ErrBadCursor):
		return status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	case errors.Is(err, zen.ErrNotOnBoard), errors.Is(err, zen.ErrNotAdjacent):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", op, err)
	case errors.Is(err, zen.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	case errors.Is(err, zen.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "%s: %v", op, err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", op, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", op, err)
	}
	s.log.Error("board call failed", zap.String("op", op), zap.Error(err))
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

// exists returns NotFound naming the object when id is absent or deleted.
func (s *BoardService) exists(ctx context.Context, what string, id zen.ID) error {
	if _, err := s.g.Get(ctx, id); errors.Is(err, zen.ErrNotFound) {
		return status.Errorf(codes.NotFound, "%s %d does not exist", what, id)
	} else if err != nil {
		return err
	}
	return nil
}

// AddPin puts an existing pin on a board, with its inverse pin→board edge.
func (s *BoardService) AddPin(ctx context.Context, req *boardv1.AddPinRequest) (*boardv1.AddPinResponse, error) {
	board, err := boardID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	pin, err := boardID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	for _, x := range []struct {
		what string
		id   zen.ID
	}{{"board", board}, {"pin", pin}} {
		if err := s.exists(ctx, x.what, x.id); err != nil {
			return nil, s.fail("add pin", err)
		}
	}
	e := zen.Edge{From: board, Type: zen.EdgeBoardPins, To: pin}
	if err := s.g.AddEdge(ctx, e); err != nil {
		return nil, s.fail("add pin", err)
	}
	got, err := s.g.HasEdge(ctx, board, zen.EdgeBoardPins, pin)
	if err != nil {
		return nil, s.fail("add pin", err)
	}
	if err := s.g.AddInverse(ctx, got); err != nil {
		return nil, s.fail("add pin", err)
	}
	n, err := s.g.CountEdges(ctx, board, zen.EdgeBoardPins)
	if err != nil {
		return nil, s.fail("add pin", err)
	}
	return &boardv1.AddPinResponse{Seq: got.Seq.String(), Count: n}, nil
}

// RemovePin takes a pin off a board (the inverse edge first, so a retry finishes the job).
func (s *BoardService) RemovePin(ctx context.Context, req *boardv1.RemovePinRequest) (*boardv1.RemovePinResponse, error) {
	board, err := boardID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	pin, err := boardID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	if err := s.exists(ctx, "board", board); err != nil {
		return nil, s.fail("remove pin", err)
	}
	if err := s.g.RemoveInverse(ctx, board, zen.EdgeBoardPins, pin); err != nil {
		return nil, s.fail("remove pin", err)
	}
	if err := s.g.RemoveEdge(ctx, board, zen.EdgeBoardPins, pin); err != nil {
		return nil, s.fail("remove pin", err)
	}
	n, err := s.g.CountEdges(ctx, board, zen.EdgeBoardPins)
	if err != nil {
		return nil, s.fail("remove pin", err)
	}
	return &boardv1.RemovePinResponse{Count: n}, nil
}

// ListPins pages through the board in the user's order.
func (s *BoardService) ListPins(ctx context.Context, req *boardv1.ListPinsRequest) (*boardv1.ListPinsResponse, error) {
	board, err := boardID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = boardDefaultPage
	case size < 0 || size > boardMaxPage:
		return nil, status.Errorf(codes.InvalidArgument, "page_size %d out of range [1, %d]", size, boardMaxPage)
	}
	if err := s.exists(ctx, "board", board); err != nil {
		return nil, s.fail("list pins", err)
	}
	es, next, err := s.o.List(ctx, board, req.GetCursor(), size)
	if err != nil {
		return nil, s.fail("list pins", err)
	}
	n, err := s.g.CountEdges(ctx, board, zen.EdgeBoardPins)
	if err != nil {
		return nil, s.fail("list pins", err)
	}
	// A pin deleted since its edge was listed (or whose removal did not finish) is not shown.
	ids := make([]zen.ID, len(es))
	for i, e := range es {
		ids[i] = e.To
	}
	live, err := s.g.GetMany(ctx, ids)
	if err != nil {
		return nil, s.fail("list pins", err)
	}
	out := &boardv1.ListPinsResponse{NextCursor: next, Count: n}
	for _, e := range es {
		if _, ok := live[e.To]; !ok {
			continue
		}
		out.Pins = append(out.Pins, &boardv1.BoardPin{PinId: uint64(e.To), PinIdStr: e.To.String(), Seq: e.Seq.String()})
	}
	return out, nil
}

// ReorderPin moves a pin between two neighbours and queues a respace when the move leaves a
// tight gap or asks for a fold. A failed enqueue does not fail the move (it landed; the next such
// move queues the task again, and a move that finds no room re-spaces, or no room on the order
// row folds, synchronously).
func (s *BoardService) ReorderPin(ctx context.Context, req *boardv1.ReorderPinRequest) (*boardv1.ReorderPinResponse, error) {
	board, err := boardID("board_id", req.GetBoardId(), req.GetBoardIdStr(), zen.TypeBoard)
	if err != nil {
		return nil, err
	}
	pin, err := boardID("pin_id", req.GetPinId(), req.GetPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	before, err := boardOptionalID("before_pin_id", req.GetBeforePinId(), req.GetBeforePinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	after, err := boardOptionalID("after_pin_id", req.GetAfterPinId(), req.GetAfterPinIdStr(), zen.TypePin)
	if err != nil {
		return nil, err
	}
	for _, x := range []struct {
		what string
		id   zen.ID
	}{{"board", board}, {"pin", pin}} {
		if err := s.exists(ctx, x.what, x.id); err != nil {
			return nil, s.fail("reorder pin", err)
		}
	}
	res, err := s.o.Reorder(ctx, board, pin, before, after)
	if err != nil {
		return nil, s.fail("reorder pin", err)
	}
	out := &boardv1.ReorderPinResponse{Seq: res.Seq.String(), Moved: res.Moved}
	if res.NeedsRespace || res.NeedsFold {
		out.RespaceQueued = s.queueRespace(ctx, board)
	}
	return out, nil
}

// queueRespace enqueues the board's respace task and reports whether it is queued.
func (s *BoardService) queueRespace(ctx context.Context, board zen.ID) bool {
	t, err := pinlater.NewRespace(pinlater.RespacePayload{Board: uint64(board)})
	if err == nil {
		_, err = s.q.Enqueue(ctx, t)
	}
	if err != nil {
		s.log.Warn("respace not queued", zap.Uint64("board", uint64(board)), zap.Error(err))
		return false
	}
	return true
}
