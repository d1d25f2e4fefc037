package graphsvc

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/zen"
)

// TestFailUnavailable: a store error a retry may not meet (a write to shards fenced for a move)
// is Unavailable at the edge, on both services, so clients retry it.
func TestFailUnavailable(t *testing.T) {
	err := fmt.Errorf("write to shard 5: %w", zen.ErrUnavailable)
	if got := status.Code((&GraphService{log: zap.NewNop()}).fail("create", err)); got != codes.Unavailable {
		t.Errorf("GraphService: %v, want Unavailable", got)
	}
	if got := status.Code((&BoardService{log: zap.NewNop()}).fail("move", err)); got != codes.Unavailable {
		t.Errorf("BoardService: %v, want Unavailable", got)
	}
}
