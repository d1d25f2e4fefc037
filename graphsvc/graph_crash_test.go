package graphsvc_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// graphFaultStore fails every write to the tables named in down (a crash of the store between
// two writes of a call, as the caller sees it).
type graphFaultStore struct {
	zen.Store
	mu   sync.Mutex
	down map[string]bool
}

func (s *graphFaultStore) set(table string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[table] = down
}

func (s *graphFaultStore) failing(table string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down[table] {
		return errors.New("injected: region server down")
	}
	return nil
}

func (s *graphFaultStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &graphFaultTable{Table: t, s: s, name: name}, nil
}

type graphFaultTable struct {
	zen.Table
	s    *graphFaultStore
	name string
}

func (t *graphFaultTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.s.failing(t.name); err != nil {
		return err
	}
	return t.Table.Apply(ctx, muts)
}

func (t *graphFaultTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if err := t.s.failing(t.name); err != nil {
		return false, err
	}
	return t.Table.CheckAndSet(ctx, key, expected, value)
}

func (t *graphFaultTable) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	if err := t.s.failing(t.name); err != nil {
		return 0, err
	}
	return t.Table.Increment(ctx, key, delta)
}

// TestGraphServiceCrashRetry fails the store after the object is written and before its edges
// or claims: the call fails with nothing enqueued, and its retry with the same request_id
// finishes it without a second object.
func TestGraphServiceCrashRetry(t *testing.T) {
	ctx := context.Background()
	fs := &graphFaultStore{Store: zenmem.New(), down: map[string]bool{}}
	e := graphNewEnv(t, fs)
	b := e.board(t, e.user(t))
	in := e.interest(t)
	e.q.take()

	req := &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/c.jpg",
		InterestIds: []uint64{in.Id}, RequestId: "crash-pin"}
	fs.set(zen.TableEdges, true)
	if _, err := e.c.CreatePin(ctx, req); status.Code(err) != codes.Internal {
		t.Fatalf("CreatePin with the edges table down: %v, want Internal", err)
	}
	if got := e.q.take(); len(got) != 0 {
		t.Errorf("a failed CreatePin enqueued %v", got)
	}
	fs.set(zen.TableEdges, false)
	p := graphOK(e.c.CreatePin(ctx, req))(t)
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, b.Id, zen.EdgeBoardPins))
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, b.OwnerId, zen.EdgeUserPins))
	graphDiff(t, []uint64{b.Id}, graphEdgeSet(t, e.g, p.Id, zen.EdgePinBoards))
	graphDiff(t, []uint64{p.Id}, graphEdgeSet(t, e.g, in.Id, zen.EdgeInterestPins))
	graphDiff(t, graphTasks(t, pinlater.FanoutPayload{Pin: p.Id, Author: b.OwnerId, Board: b.Id, Interests: []uint64{in.Id}, CreatedMs: p.CreatedMs}), e.q.take())

	// CreateUser: the object lands, the username claim fails; the retry finishes with that user.
	ureq := &graphv1.CreateUserRequest{Username: "crashy", Email: "crashy@example.com", RequestId: "crash-user"}
	fs.set(zen.TableModShard, true)
	if _, err := e.c.CreateUser(ctx, ureq); status.Code(err) != codes.Internal {
		t.Fatalf("CreateUser with the modshard table down: %v, want Internal", err)
	}
	fs.set(zen.TableModShard, false)
	u := graphOK(e.c.CreateUser(ctx, ureq))(t)
	graphDiff(t, u, graphOK(e.c.GetUserByName(ctx, &graphv1.GetUserByNameRequest{Username: "crashy"}))(t))

	// Follow: the forward edge lands, the edges table fails before the inverse; the retry writes it.
	f := e.user(t)
	fs.set(zen.TableCounters, true) // AddEdge counts after writing the rows: fails mid-way
	if _, err := e.c.Follow(ctx, &graphv1.FollowRequest{UserId: f.Id, TargetId: b.OwnerId}); status.Code(err) != codes.Internal {
		t.Fatalf("Follow with the counters table down: %v, want Internal", err)
	}
	fs.set(zen.TableCounters, false)
	graphOK(e.c.Follow(ctx, &graphv1.FollowRequest{UserId: f.Id, TargetId: b.OwnerId}))(t)
	graphDiff(t, []uint64{f.Id}, graphEdgeSet(t, e.g, b.OwnerId, zen.EdgeFollowedByUser))
	graphDiff(t, graphTasks(t, pinlater.FollowBackfillPayload{User: f.Id, Target: b.OwnerId, TargetKind: pinlater.KindUser}), e.q.take())
}
