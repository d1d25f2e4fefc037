package graphsvc

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// ReadOnly is GraphService's reads (GetUser, GetUserByName, GetObjects, ListBoards,
// ListFollowers, ListFollowing) over a graph, for a process that has the graph but runs none
// of the jobs its writes enqueue: the generator role serves it so that the feed processes
// calling it read a page's objects (GetFeed's include_objects) over the connection they already
// have. Its writes answer Unimplemented; they are the graph role's.
type ReadOnly struct {
	graphv1.UnimplementedGraphServiceServer
	s *GraphService
}

// NewReadOnly returns the reads of g. log nil means no logging.
func NewReadOnly(g *zen.Graph, log *zap.Logger) *ReadOnly {
	return &ReadOnly{s: NewGraphService(g, nil, log, nil)}
}

// Register registers GraphService's reads on srv.
func (r *ReadOnly) Register(srv grpc.ServiceRegistrar) { graphv1.RegisterGraphServiceServer(srv, r) }

// GetUser implements GraphService.
func (r *ReadOnly) GetUser(ctx context.Context, req *graphv1.GetUserRequest) (*graphv1.User, error) {
	return r.s.GetUser(ctx, req)
}

// GetUserByName implements GraphService.
func (r *ReadOnly) GetUserByName(ctx context.Context, req *graphv1.GetUserByNameRequest) (*graphv1.User, error) {
	return r.s.GetUserByName(ctx, req)
}

// GetObjects implements GraphService.
func (r *ReadOnly) GetObjects(ctx context.Context, req *graphv1.GetObjectsRequest) (*graphv1.GetObjectsResponse, error) {
	return r.s.GetObjects(ctx, req)
}

// ListBoards implements GraphService.
func (r *ReadOnly) ListBoards(ctx context.Context, req *graphv1.ListBoardsRequest) (*graphv1.ListBoardsResponse, error) {
	return r.s.ListBoards(ctx, req)
}

// ListFollowers implements GraphService.
func (r *ReadOnly) ListFollowers(ctx context.Context, req *graphv1.ListFollowersRequest) (*graphv1.ListFollowersResponse, error) {
	return r.s.ListFollowers(ctx, req)
}

// ListFollowing implements GraphService.
func (r *ReadOnly) ListFollowing(ctx context.Context, req *graphv1.ListFollowingRequest) (*graphv1.ListFollowingResponse, error) {
	return r.s.ListFollowing(ctx, req)
}
