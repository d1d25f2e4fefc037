package graphsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// graphFakeEnqueuer records enqueued tasks; failNext makes the next n enqueues fail.
type graphFakeEnqueuer struct {
	mu       sync.Mutex
	tasks    []graphTask
	failNext int
}

// graphTask is one recorded task: its type and its decoded JSON payload.
type graphTask struct {
	Type    string
	Payload map[string]any
}

var _ graphsvc.Enqueuer = (*pinlater.Client)(nil)

func (f *graphFakeEnqueuer) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return nil, errors.New("redis: connection refused")
	}
	var p map[string]any
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return nil, err
	}
	f.tasks = append(f.tasks, graphTask{Type: t.Type(), Payload: p})
	return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
}

// take returns and forgets the recorded tasks.
func (f *graphFakeEnqueuer) take() []graphTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.tasks
	f.tasks = nil
	return out
}

func (f *graphFakeEnqueuer) fail(n int) {
	f.mu.Lock()
	f.failNext = n
	f.mu.Unlock()
}

// graphEnv is one service behind a bufconn gRPC server.
type graphEnv struct {
	c     graphv1.GraphServiceClient
	g     *zen.Graph
	q     *graphFakeEnqueuer
	store zen.Store
	seq   atomic.Int64 // unique-name counter
}

// graphClock is a clock that advances one millisecond per reading.
func graphClock() func() time.Time {
	var ms atomic.Int64
	ms.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	return func() time.Time { return time.UnixMilli(ms.Add(1)) }
}

// graphServe starts a GraphService over s and returns a client.
func graphServe(t *testing.T, s zen.Store, q graphsvc.Enqueuer) (graphv1.GraphServiceClient, *zen.Graph) {
	t.Helper()
	ctx := context.Background()
	now := graphClock()
	g, err := zen.NewGraph(ctx, s, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(7)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	graphsvc.NewGraphService(g, q, nil, now).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///graph",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return graphv1.NewGraphServiceClient(conn), g
}

func graphNewEnv(t *testing.T, s zen.Store) *graphEnv {
	q := &graphFakeEnqueuer{}
	c, g := graphServe(t, s, q)
	return &graphEnv{c: c, g: g, q: q, store: s}
}

// name returns a unique name with a prefix.
func (e *graphEnv) name(p string) string { return fmt.Sprintf("%s%d", p, e.seq.Add(1)) }

func (e *graphEnv) user(t *testing.T) *graphv1.User {
	t.Helper()
	n := e.name("user")
	u, err := e.c.CreateUser(context.Background(), &graphv1.CreateUserRequest{Username: n, Email: n + "@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (e *graphEnv) board(t *testing.T, owner *graphv1.User) *graphv1.Board {
	t.Helper()
	b, err := e.c.CreateBoard(context.Background(), &graphv1.CreateBoardRequest{OwnerId: owner.Id, Name: e.name("board")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *graphEnv) interest(t *testing.T) *graphv1.Interest {
	t.Helper()
	in, err := e.c.CreateInterest(context.Background(), &graphv1.CreateInterestRequest{Name: e.name("Interest ")})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (e *graphEnv) pin(t *testing.T, b *graphv1.Board, interests ...*graphv1.Interest) *graphv1.Pin {
	t.Helper()
	req := &graphv1.CreatePinRequest{AuthorId: b.OwnerId, BoardId: b.Id, ImageUrl: "https://i.example.com/p.jpg"}
	for _, in := range interests {
		req.InterestIds = append(req.InterestIds, in.Id)
	}
	p, err := e.c.CreatePin(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// graphCode is the outcome of a call for comparison: its code and whether the message holds a
// wanted fragment.
type graphCode struct {
	Code codes.Code
	Msg  string
}

// graphErrCase is one error case: the call, its code, and a fragment its message must contain.
type graphErrCase struct {
	name string
	call func(ctx context.Context) error
	code codes.Code
	msg  string
}

func graphRunErrCases(t *testing.T, cases []graphErrCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(context.Background())
			st := status.Convert(err)
			got := graphCode{Code: st.Code(), Msg: tc.msg}
			if !strings.Contains(st.Message(), tc.msg) {
				got.Msg = st.Message()
			}
			if diff := cmp.Diff(graphCode{Code: tc.code, Msg: tc.msg}, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// graphDiff compares protobuf messages.
func graphDiff(t *testing.T, want, got any, opts ...cmp.Option) {
	t.Helper()
	opts = append(opts, protocmp.Transform())
	if diff := cmp.Diff(want, got, opts...); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// graphIgnoreCreated ignores created_ms (clock-dependent) in messages.
var graphIgnoreCreated = cmp.Options{
	protocmp.IgnoreFields(&graphv1.User{}, "created_ms"),
	protocmp.IgnoreFields(&graphv1.Board{}, "created_ms"),
	protocmp.IgnoreFields(&graphv1.Pin{}, "created_ms"),
	protocmp.IgnoreFields(&graphv1.Interest{}, "created_ms"),
}

// graphOK returns a call's result, failing the test on its error: graphOK(c.Get(ctx, req))(t).
func graphOK[T proto.Message](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// graphTasks turns typed payloads into the recorded form.
func graphTasks(t *testing.T, ps ...pinlater.Payload) []graphTask {
	t.Helper()
	var out []graphTask
	for _, p := range ps {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m["v"] = float64(pinlater.PayloadVersion)
		out = append(out, graphTask{Type: p.TaskType(), Payload: m})
	}
	return out
}

// graphEdgeSet lists the targets of an edge list, oldest first.
func graphEdgeSet(t *testing.T, g *zen.Graph, from uint64, et zen.EdgeType) []uint64 {
	t.Helper()
	es, _, err := g.ListEdges(context.Background(), zen.ID(from), et, "", 1000, false)
	if err != nil {
		t.Fatal(err)
	}
	out := []uint64{}
	for _, e := range es {
		out = append(out, uint64(e.To))
	}
	return out
}

func TestGraphServiceMem(t *testing.T) {
	graphRunSuite(t, func(t *testing.T) zen.Store { return zenmem.New() })
}
