package graphsvc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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

	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	boardv1 "github.com/smartfeed/smartfeed/proto/board/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

var _ graphsvc.Enqueuer = (*pinlater.Client)(nil)

// boardFakeEnqueuer records respace tasks; failing makes Enqueue fail.
type boardFakeEnqueuer struct {
	mu      sync.Mutex
	boards  []uint64
	failing bool
}

func (f *boardFakeEnqueuer) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return nil, errors.New("redis down")
	}
	if t.Type() != pinlater.TypeRespace {
		return nil, fmt.Errorf("unexpected task type %s", t.Type())
	}
	p, err := pinlater.Decode[pinlater.RespacePayload](t)
	if err != nil {
		return nil, err
	}
	f.boards = append(f.boards, p.Board)
	return &pinlater.Info{}, nil
}

func (f *boardFakeEnqueuer) take() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boards
	f.boards = nil
	return b
}

type boardEnv struct {
	c     boardv1.BoardServiceClient
	svc   *graphsvc.BoardService
	g     *zen.Graph
	o     *zen.Order
	q     *boardFakeEnqueuer
	board zen.ID
	pins  []zen.ID
}

// boardServe starts a BoardService over s with one board of n pins added through AddPin.
func boardServe(t *testing.T, s zen.Store, n int) *boardEnv {
	t.Helper()
	ctx := context.Background()
	var ms atomic.Int64
	ms.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(ms.Add(1)) }
	g, err := zen.NewGraph(ctx, s, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	o := zen.NewOrder(g, zen.OrderOptions{})
	q := &boardFakeEnqueuer{}
	svc := graphsvc.NewBoardService(g, o, q, nil)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	svc.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///board",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := &boardEnv{c: boardv1.NewBoardServiceClient(conn), svc: svc, g: g, o: o, q: q}
	b, err := g.Create(ctx, zen.TypeBoard, 0, map[string]any{"name": "b"})
	if err != nil {
		t.Fatal(err)
	}
	e.board = b.ID
	for i := range n {
		p, err := g.Create(ctx, zen.TypePin, b.ID, map[string]any{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.AddPin(ctx, &boardv1.AddPinRequest{BoardId: uint64(b.ID), PinIdStr: p.ID.String()}); err != nil {
			t.Fatal(err)
		}
		e.pins = append(e.pins, p.ID)
	}
	return e
}

// list pages through ListPins with a small page.
func (e *boardEnv) list(t *testing.T) []zen.ID {
	t.Helper()
	var out []zen.ID
	cur := ""
	for {
		r, err := e.c.ListPins(t.Context(), &boardv1.ListPinsRequest{BoardId: uint64(e.board), Cursor: cur, PageSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.GetPins() {
			if p.GetPinIdStr() != zen.ID(p.GetPinId()).String() {
				t.Fatalf("pin_id %d and pin_id_str %s disagree", p.GetPinId(), p.GetPinIdStr())
			}
			out = append(out, zen.ID(p.GetPinId()))
		}
		if r.GetNextCursor() == "" {
			return out
		}
		cur = r.GetNextCursor()
	}
}

func (e *boardEnv) move(pin, before, after zen.ID) *boardv1.ReorderPinRequest {
	return &boardv1.ReorderPinRequest{BoardId: uint64(e.board), PinId: uint64(pin), BeforePinId: uint64(before), AfterPinId: uint64(after)}
}

func boardRunSuite(t *testing.T, open func(t *testing.T) zen.Store) {
	t.Run("ReorderAndList", func(t *testing.T) { boardTestReorder(t, boardServe(t, open(t), 5)) })
	t.Run("Errors", func(t *testing.T) { boardTestErrors(t, boardServe(t, open(t), 4)) })
	t.Run("Respace", func(t *testing.T) { boardTestRespace(t, boardServe(t, open(t), 3)) })
	t.Run("AddRemove", func(t *testing.T) { boardTestAddRemove(t, boardServe(t, open(t), 3)) })
	t.Run("Fold", func(t *testing.T) { boardTestFold(t, boardServe(t, open(t), zen.DefaultFoldAbove+2)) })
}

func TestBoardServiceMem(t *testing.T) {
	boardRunSuite(t, func(*testing.T) zen.Store { return zenmem.New() })
}

func TestBoardServicePebble(t *testing.T) {
	boardRunSuite(t, func(t *testing.T) zen.Store {
		s, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestBoardServiceHBase(t *testing.T) {
	zk := testenv.HBase(t)
	boardRunSuite(t, func(t *testing.T) zen.Store {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: fmt.Sprintf("bs%d_", time.Now().UnixNano())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func boardTestReorder(t *testing.T, e *boardEnv) {
	ctx := t.Context()
	p := e.pins
	if diff := cmp.Diff(p, e.list(t)); diff != "" {
		t.Fatalf("creation order (-want +got):\n%s", diff)
	}
	for i, tc := range []struct {
		req   *boardv1.ReorderPinRequest
		moved bool
		want  []zen.ID
	}{
		{e.move(p[4], p[0], p[1]), true, []zen.ID{p[0], p[4], p[1], p[2], p[3]}},
		{e.move(p[4], p[0], p[1]), false, []zen.ID{p[0], p[4], p[1], p[2], p[3]}},
		{e.move(p[0], p[3], 0), true, []zen.ID{p[4], p[1], p[2], p[3], p[0]}},
		{e.move(p[2], 0, p[4]), true, []zen.ID{p[2], p[4], p[1], p[3], p[0]}},
		{&boardv1.ReorderPinRequest{BoardIdStr: e.board.String(), PinIdStr: p[3].String(), BeforePinIdStr: p[2].String(), AfterPinIdStr: p[4].String()},
			true, []zen.ID{p[2], p[3], p[4], p[1], p[0]}},
	} {
		r, err := e.c.ReorderPin(ctx, tc.req)
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		if r.GetMoved() != tc.moved {
			t.Errorf("move %d: moved = %v, want %v", i, r.GetMoved(), tc.moved)
		}
		if diff := cmp.Diff(tc.want, e.list(t)); diff != "" {
			t.Fatalf("move %d: order (-want +got):\n%s", i, diff)
		}
	}
}

func boardTestErrors(t *testing.T, e *boardEnv) {
	ctx := t.Context()
	p := e.pins
	other, err := e.g.Create(ctx, zen.TypePin, 0, nil) // a pin on no board
	if err != nil {
		t.Fatal(err)
	}
	ghostPin, _ := zen.NewID(p[0].Shard(), zen.TypePin, 1<<30)
	ghostBoard, _ := zen.NewID(e.board.Shard(), zen.TypeBoard, 1<<30)
	for _, tc := range []struct {
		name string
		req  *boardv1.ReorderPinRequest
		code codes.Code
	}{
		{"no board", &boardv1.ReorderPinRequest{PinId: uint64(p[0])}, codes.InvalidArgument},
		{"no pin", &boardv1.ReorderPinRequest{BoardId: uint64(e.board)}, codes.InvalidArgument},
		{"board is a pin", &boardv1.ReorderPinRequest{BoardId: uint64(p[0]), PinId: uint64(p[1])}, codes.InvalidArgument},
		{"bad decimal", &boardv1.ReorderPinRequest{BoardIdStr: "12x", PinId: uint64(p[1])}, codes.InvalidArgument},
		{"id and str disagree", &boardv1.ReorderPinRequest{BoardId: uint64(e.board), BoardIdStr: p[0].String(), PinId: uint64(p[1])}, codes.InvalidArgument},
		{"before is a board", e.move(p[0], e.board, p[1]), codes.InvalidArgument},
		{"before is the pin", e.move(p[0], p[0], p[1]), codes.InvalidArgument},
		{"unknown board", &boardv1.ReorderPinRequest{BoardId: uint64(ghostBoard), PinId: uint64(p[0])}, codes.NotFound},
		{"unknown pin", e.move(ghostPin, p[0], p[1]), codes.NotFound},
		{"pin not on the board", e.move(other.ID, p[0], p[1]), codes.FailedPrecondition},
		{"before not on the board", e.move(p[0], other.ID, p[1]), codes.FailedPrecondition},
		{"not adjacent", e.move(p[0], p[1], p[3]), codes.FailedPrecondition},
		{"end but not last", e.move(p[0], p[2], 0), codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.ReorderPin(ctx, tc.req)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if status.Convert(err).Message() == "" {
				t.Error("empty error message")
			}
		})
	}
	if diff := cmp.Diff(p, e.list(t)); diff != "" {
		t.Errorf("refused moves changed the order (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name string
		req  *boardv1.ListPinsRequest
		code codes.Code
	}{
		{"page too big", &boardv1.ListPinsRequest{BoardId: uint64(e.board), PageSize: 501}, codes.InvalidArgument},
		{"bad cursor", &boardv1.ListPinsRequest{BoardId: uint64(e.board), Cursor: "nope"}, codes.InvalidArgument},
		{"unknown board", &boardv1.ListPinsRequest{BoardId: uint64(ghostBoard)}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.c.ListPins(ctx, tc.req); status.Code(err) != tc.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tc.code)
			}
		})
	}
}

// boardTestRespace moves pins to one spot until a respace task is queued, runs it through
// HandleRespace, and checks the order survived and the room came back; a move whose enqueue
// fails still lands.
func boardTestRespace(t *testing.T, e *boardEnv) {
	ctx := t.Context()
	p := e.pins
	want := []zen.ID{p[0], p[1], p[2]}
	queued := 0
	for i := 0; queued == 0; i++ {
		if i > 200 {
			t.Fatal("no respace queued after 200 moves to one spot")
		}
		mover, after := want[2], want[1]
		r, err := e.c.ReorderPin(ctx, e.move(mover, want[0], after))
		if err != nil {
			t.Fatal(err)
		}
		want = []zen.ID{want[0], mover, want[1]}
		if r.GetRespaceQueued() {
			queued = i + 1
		}
	}
	if got := e.q.take(); len(got) != 1 || got[0] != uint64(e.board) {
		t.Fatalf("queued respace tasks %v, want one for board %d", got, e.board)
	}
	if err := e.svc.HandleRespace(ctx, pinlater.RespacePayload{V: pinlater.PayloadVersion, Board: uint64(e.board)}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, e.list(t)); diff != "" {
		t.Fatalf("order after respace (-want +got):\n%s", diff)
	}
	gap, err := e.o.Gaps(ctx, e.board)
	if err != nil {
		t.Fatal(err)
	}
	if gap.Cmp(zen.DefaultRespaceBelow) < 0 {
		t.Fatalf("smallest gap %s after respace", gap)
	}
	if err := e.svc.HandleRespace(ctx, pinlater.RespacePayload{Board: uint64(p[0])}); !errors.Is(err, pinlater.ErrInvalidPayload) {
		t.Errorf("respace of a pin ID: %v, want ErrInvalidPayload", err)
	}
	// Enqueue failing: moves still land (without the task) and never fail for want of room.
	e.q.mu.Lock()
	e.q.failing = true
	e.q.mu.Unlock()
	for i := range 150 {
		mover, after := want[2], want[1]
		r, err := e.c.ReorderPin(ctx, e.move(mover, want[0], after))
		if err != nil {
			t.Fatalf("move %d with the queue down: %v", i, err)
		}
		if r.GetRespaceQueued() {
			t.Fatal("respace_queued with the queue down")
		}
		want = []zen.ID{want[0], mover, want[1]}
	}
	if diff := cmp.Diff(want, e.list(t)); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
	t.Logf("first respace queued after %d moves to one spot", queued)
}

func boardTestAddRemove(t *testing.T, e *boardEnv) {
	ctx := t.Context()
	p := e.pins
	// AddPin again is idempotent; the inverse edge exists.
	r, err := e.c.AddPin(ctx, &boardv1.AddPinRequest{BoardId: uint64(e.board), PinId: uint64(p[1])})
	if err != nil || r.GetCount() != 3 {
		t.Fatalf("re-add: %v, %v", r, err)
	}
	if _, err := e.g.HasEdge(ctx, p[1], zen.EdgePinBoards, e.board); err != nil {
		t.Fatalf("inverse edge: %v", err)
	}
	rr, err := e.c.RemovePin(ctx, &boardv1.RemovePinRequest{BoardId: uint64(e.board), PinId: uint64(p[1])})
	if err != nil || rr.GetCount() != 2 {
		t.Fatalf("remove: %v, %v", rr, err)
	}
	if _, err := e.c.RemovePin(ctx, &boardv1.RemovePinRequest{BoardId: uint64(e.board), PinId: uint64(p[1])}); err != nil {
		t.Fatalf("remove again: %v", err)
	}
	if _, err := e.g.HasEdge(ctx, p[1], zen.EdgePinBoards, e.board); !errors.Is(err, zen.ErrNotFound) {
		t.Fatalf("inverse edge after remove: %v", err)
	}
	if diff := cmp.Diff([]zen.ID{p[0], p[2]}, e.list(t)); diff != "" {
		t.Fatalf("after remove (-want +got):\n%s", diff)
	}
	if _, err := e.c.ReorderPin(ctx, e.move(p[1], p[0], p[2])); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("moving a removed pin: %v", err)
	}
	ghostPin, _ := zen.NewID(p[0].Shard(), zen.TypePin, 1<<30)
	if _, err := e.c.AddPin(ctx, &boardv1.AddPinRequest{BoardId: uint64(e.board), PinId: uint64(ghostPin)}); status.Code(err) != codes.NotFound {
		t.Fatalf("adding an unknown pin: %v", err)
	}
	if _, err := e.c.AddPin(ctx, &boardv1.AddPinRequest{BoardId: uint64(e.board), PinId: uint64(e.board)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("adding a board as a pin: %v", err)
	}
}

// boardTestFold moves more distinct pins than zen.DefaultFoldAbove (no tight gap: each to the
// end): the move that crosses it queues the respace task, which folds; the order is kept and the
// edge list itself then holds it.
func boardTestFold(t *testing.T, e *boardEnv) {
	ctx := t.Context()
	want := slices.Clone(e.pins)
	for i := range zen.DefaultFoldAbove + 1 {
		mover := want[0]
		r, err := e.c.ReorderPin(ctx, e.move(mover, want[len(want)-1], 0))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want[1:], mover)
		if got, wantQ := r.GetRespaceQueued(), i == zen.DefaultFoldAbove; got != wantQ {
			t.Fatalf("move %d: respace_queued = %v, want %v", i, got, wantQ)
		}
	}
	if got := e.q.take(); len(got) != 1 || got[0] != uint64(e.board) {
		t.Fatalf("queued tasks %v, want one for board %d", got, e.board)
	}
	if diff := cmp.Diff(want, e.list(t)); diff != "" {
		t.Fatalf("order before the fold (-want +got):\n%s", diff)
	}
	if err := e.svc.HandleRespace(ctx, pinlater.RespacePayload{V: pinlater.PayloadVersion, Board: uint64(e.board)}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, e.list(t)); diff != "" {
		t.Fatalf("order after the fold (-want +got):\n%s", diff)
	}
	es, _, err := e.g.ListEdges(ctx, e.board, zen.EdgeBoardPins, "", 500, false)
	if err != nil {
		t.Fatal(err)
	}
	var raw []zen.ID
	for _, x := range es {
		raw = append(raw, x.To)
	}
	if diff := cmp.Diff(want, raw); diff != "" {
		t.Fatalf("edge list after the fold (-want +got):\n%s", diff)
	}
	if n, err := e.o.Fold(ctx, e.board); err != nil || n != 0 {
		t.Fatalf("fold after the task: %d, %v; want nothing left", n, err)
	}
}
