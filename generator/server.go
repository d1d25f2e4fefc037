package generator

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// Server is the gRPC face of a Generator (GeneratorService). Errors are mapped to gRPC codes
// here and only here: InvalidArgument for refused input, Canceled/DeadlineExceeded for the
// context, Unavailable for storage trouble.
type Server struct {
	generatorv1.UnimplementedGeneratorServiceServer
	g *Generator
}

// NewServer returns the gRPC adapter of g.
func NewServer(g *Generator) *Server { return &Server{g: g} }

// GenerateChunk implements GeneratorService.GenerateChunk.
func (s *Server) GenerateChunk(ctx context.Context, req *generatorv1.GenerateChunkRequest) (*generatorv1.GenerateChunkResponse, error) {
	user, err := requestUser(req.GetUser(), req.GetUserStr())
	if err != nil {
		return nil, err
	}
	c, err := s.g.GenerateChunk(ctx, user, Options{Max: int(req.GetMax()), Debug: req.GetDebug(), CallerRecords: req.GetCallerRecords()})
	if err != nil {
		return nil, grpcError(err)
	}
	return &generatorv1.GenerateChunkResponse{Chunk: chunkProto(c)}, nil
}

// SettleChunk implements GeneratorService.SettleChunk.
func (s *Server) SettleChunk(ctx context.Context, req *generatorv1.SettleChunkRequest) (*generatorv1.SettleChunkResponse, error) {
	user, err := requestUser(req.GetUser(), req.GetUserStr())
	if err != nil {
		return nil, err
	}
	if err := s.g.Settle(ctx, user, req.GetChunkId(), req.GetDelivered()); err != nil {
		return nil, grpcError(err)
	}
	return &generatorv1.SettleChunkResponse{}, nil
}

// PendingChunks implements GeneratorService.PendingChunks.
func (s *Server) PendingChunks(ctx context.Context, req *generatorv1.PendingChunksRequest) (*generatorv1.PendingChunksResponse, error) {
	user, err := requestUser(req.GetUser(), req.GetUserStr())
	if err != nil {
		return nil, err
	}
	cs, err := s.g.Pending(ctx, user)
	if err != nil {
		return nil, grpcError(err)
	}
	out := &generatorv1.PendingChunksResponse{}
	for _, c := range cs {
		out.Chunks = append(out.Chunks, chunkProto(c))
	}
	return out, nil
}

// InFlightUsers implements GeneratorService.InFlightUsers.
func (s *Server) InFlightUsers(ctx context.Context, req *generatorv1.InFlightUsersRequest) (*generatorv1.InFlightUsersResponse, error) {
	users, err := s.g.InFlightUsers(ctx, zen.ID(req.GetAfter()), int(req.GetLimit()))
	if err != nil {
		return nil, grpcError(err)
	}
	out := &generatorv1.InFlightUsersResponse{Users: make([]uint64, len(users))}
	for i, u := range users {
		out.Users[i] = uint64(u)
	}
	return out, nil
}

// PreviewChunk implements GeneratorService.PreviewChunk.
func (s *Server) PreviewChunk(ctx context.Context, req *generatorv1.PreviewChunkRequest) (*generatorv1.PreviewChunkResponse, error) {
	user, err := requestUser(req.GetUser(), req.GetUserStr())
	if err != nil {
		return nil, err
	}
	p, err := s.g.Preview(ctx, user, int(req.GetMax()))
	if err != nil {
		return nil, grpcError(err)
	}
	out := &generatorv1.PreviewChunkResponse{Chunk: chunkProto(p.Chunk), Wanted: int32(p.Wanted)}
	for _, se := range p.Sources {
		out.Sources = append(out.Sources, &generatorv1.SourceExplain{Source: generatorv1.Source(se.Source), Name: se.Name,
			Rate: se.Rate, Threshold: se.Threshold, Quota: int32(se.Quota), Chosen: int32(se.Chosen),
			Candidates: int32(se.Candidates), Deferred: int32(se.Deferred)})
	}
	out.Deferred = itemsProto(p.Deferred)
	return out, nil
}

// CheckPins implements GeneratorService.CheckPins.
func (s *Server) CheckPins(ctx context.Context, req *generatorv1.CheckPinsRequest) (*generatorv1.CheckPinsResponse, error) {
	var user zen.ID
	if req.GetUser() != 0 || req.GetUserStr() != "" {
		u, err := requestUser(req.GetUser(), req.GetUserStr())
		if err != nil {
			return nil, err
		}
		user = u
	}
	if n := len(req.GetItems()); n > MaxCheckPins {
		return nil, status.Errorf(codes.InvalidArgument, "%d items, at most %d", n, MaxCheckPins)
	}
	items := make([]Item, len(req.GetItems()))
	for i, it := range req.GetItems() {
		// Any other source value (unknown ones included) is checked for deletion only.
		var src zen.Source
		switch it.GetSource() {
		case generatorv1.Source_SOURCE_FOLLOWING:
			src = zen.SourceFollowing
		case generatorv1.Source_SOURCE_INTEREST:
			src = zen.SourceInterest
		}
		items[i] = Item{Pin: zen.ID(it.GetPin()), Source: src, Author: zen.ID(it.GetAuthor()), Board: zen.ID(it.GetBoard())}
	}
	r, err := s.g.Check(ctx, user, items)
	if err != nil {
		return nil, grpcError(err)
	}
	out := &generatorv1.CheckPinsResponse{}
	// In the request's order, each pin once.
	seen := map[zen.ID]bool{}
	for _, it := range items {
		if seen[it.Pin] {
			continue
		}
		seen[it.Pin] = true
		if r.Deleted[it.Pin] {
			out.Deleted = append(out.Deleted, uint64(it.Pin))
		}
		if r.Unfollowed[it.Pin] {
			out.Unfollowed = append(out.Unfollowed, uint64(it.Pin))
		}
	}
	return out, nil
}

// requestUser reads the user from the fixed64 field, its decimal twin, or both (zen.WireID).
func requestUser(n uint64, str string) (zen.ID, error) {
	id, err := zen.WireID(n, str)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "user: %v", err)
	}
	if id == 0 {
		return 0, status.Error(codes.InvalidArgument, "user is required")
	}
	// A board's ID, type 1023: refused input, not a store failure.
	if err := id.Check(zen.TypeUser); err != nil {
		return 0, status.Error(codes.InvalidArgument, err.Error())
	}
	return id, nil
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidArgument):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNoChecks):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

func chunkProto(c Chunk) *generatorv1.Chunk {
	out := &generatorv1.Chunk{Id: c.ID, User: uint64(c.User), UserStr: strconv.FormatUint(uint64(c.User), 10), Debug: c.Debug,
		CreatedMs: c.CreatedMs}
	out.Items = itemsProto(c.Items)
	return out
}

func itemsProto(items []Item) []*generatorv1.Item {
	var out []*generatorv1.Item
	for _, it := range items {
		out = append(out, &generatorv1.Item{
			Pin:    uint64(it.Pin),
			PinStr: strconv.FormatUint(uint64(it.Pin), 10),
			Source: generatorv1.Source(it.Source),
			Score:  it.Score,
			Author: uint64(it.Author),
			Board:  uint64(it.Board),
			Reason: it.Reason,
		})
	}
	return out
}
