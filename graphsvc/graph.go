package graphsvc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// Enqueuer puts a pinlater task in its queue. *pinlater.Client satisfies it.
type Enqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// Limits on request fields.
const (
	graphMaxUsername    = 30
	graphMaxEmail       = 254
	graphMaxDisplayName = 100
	graphMaxName        = 100 // board and interest names
	graphMaxDescription = 500 // board description, pin details
	graphMaxURL         = 2048
	graphMaxRequestID   = 128
	graphMaxBatch       = 1000 // GetObjects
	graphDefaultPage    = 50
	graphMaxPage        = 500
)

// Mod-shard key kinds (zen.Graph.MapKey).
const (
	graphKindUsername = "username"
	graphKindEmail    = "email"
	graphKindInterest = "interest"
	graphKindRequest  = "request"
)

// GraphService implements graphv1.GraphService over a zen.Graph, enqueuing the feed event of
// each write through an Enqueuer. It is safe for concurrent use.
//
// Write order, for crash safety: the object first, then its forward edges, then the inverse
// edges (written synchronously here, not by a background job, so a follower is streamable
// by fanout as soon as Follow returns), then the enqueue. Every step is idempotent, so retrying
// a call that failed part-way finishes it; a create carrying a request_id is not duplicated by
// the retry.
type GraphService struct {
	graphv1.UnimplementedGraphServiceServer
	g   *zen.Graph
	q   Enqueuer
	log *zap.Logger
	now func() time.Time
	// lazy: the enqueuer records each event durably in a table that shares the graph's log
	// (WithEventTable), so a pin's graph writes wait for no fsync of their own.
	lazy bool
}

// GraphOption configures a GraphService.
type GraphOption func(*GraphService)

// WithEventTable says that the Enqueuer records each task durably in t before Enqueue returns
// (pinlater.DurableClient's outbox). When t shares the graph's log (zen.Graph.SharesLog: one
// embedded store), CreatePin, SavePin, Follow and Unfollow write the object and edges lazily
// (zen.Lazily) and wait for durability once, at the event's row: a crash before it leaves a
// prefix of the call's writes, as a crash between durable writes did, and the call had not
// answered. On other stores every write stays durable on its own.
func WithEventTable(t zen.Table) GraphOption {
	return func(s *GraphService) { s.lazy = t != nil && s.g.SharesLog(t) }
}

// NewGraphService returns the service. log nil means no logging; now nil means time.Now.
func NewGraphService(g *zen.Graph, q Enqueuer, log *zap.Logger, now func() time.Time, opts ...GraphOption) *GraphService {
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	s := &GraphService{g: g, q: q, log: log, now: now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// stepCtx is the context of the graph writes of a call that ends by enqueuing its event:
// lazy when the event's durable row shares the graph's log (WithEventTable).
func (s *GraphService) stepCtx(ctx context.Context) context.Context {
	if s.lazy {
		return zen.Lazily(ctx)
	}
	return ctx
}

// Register registers GraphService on s (a *grpc.Server).
func (s *GraphService) Register(srv grpc.ServiceRegistrar) {
	graphv1.RegisterGraphServiceServer(srv, s)
}

// graphInvalid is an InvalidArgument status.
func graphInvalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// fail maps an error of zen or pinlater to a gRPC status (a status passes through unchanged) and
// logs the unexpected ones.
func (s *GraphService) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, zen.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	case errors.Is(err, zen.ErrBadCursor):
		return status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	case errors.Is(err, zen.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "%s: %v", op, err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", op, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", op, err)
	}
	s.log.Error("graph call failed", zap.String("op", op), zap.Error(err))
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

// enqueue builds and enqueues a task; a failure is Unavailable, saying the write itself landed.
func (s *GraphService) enqueue(ctx context.Context, what string, p pinlater.Payload, opts ...pinlater.Option) error {
	t, err := pinlater.NewTask(p)
	if err != nil {
		return s.fail(what, fmt.Errorf("build task: %w", err))
	}
	if _, err := s.q.Enqueue(ctx, t, opts...); err != nil {
		s.log.Warn("enqueue failed", zap.String("what", what), zap.String("type", t.Type()), zap.Error(err))
		return status.Errorf(codes.Unavailable, "%s: saved, but its %s event could not be enqueued (retry the call: it is idempotent): %v",
			what, t.Type(), err)
	}
	return nil
}

// graphAnyID reads a required ID given as a number, a decimal string, or both (zen.WireID).
func graphAnyID(field string, num uint64, str string) (zen.ID, error) {
	id, err := zen.WireID(num, str)
	if err != nil {
		return 0, graphInvalid("%s: %v", field, err)
	}
	if id == 0 {
		return 0, graphInvalid("%s is required (set %s or %s_str)", field, field, field)
	}
	return id, nil
}

// graphTypedID reads an ID that must be of type want.
func graphTypedID(field string, num uint64, str string, want zen.Type) (zen.ID, error) {
	id, err := graphAnyID(field, num, str)
	if err != nil {
		return 0, err
	}
	if err := id.Check(want); err != nil {
		return 0, graphInvalid("%s: expected a %s ID: %v", field, want, err)
	}
	return id, nil
}

// get reads a live object, NotFound naming it when it is absent or deleted.
func (s *GraphService) get(ctx context.Context, id zen.ID) (zen.Object, error) {
	o, err := s.g.Get(ctx, id)
	if errors.Is(err, zen.ErrNotFound) {
		return zen.Object{}, status.Errorf(codes.NotFound, "%s %d not found", id.Type(), id)
	}
	if err != nil {
		return zen.Object{}, s.fail("get "+id.String(), err)
	}
	return o, nil
}

// idem is a request's idempotency key: its request_id, scoped to the method (kind) and the
// caller (the acting user for boards and pins; the claimed name for users and interests, whose
// caller has no identity yet), with a fingerprint of the body. The same key with the same body
// replays the first answer; with another body it is refused.
type idem struct {
	kind, scope, rid, fp string
}

// newIdem builds the key of a request; body lists the fields that make it this request.
func newIdem(kind, scope, rid string, body ...string) idem {
	h := sha256.New()
	for _, b := range body {
		h.Write([]byte(b))
		h.Write([]byte{0})
	}
	return idem{kind: kind, scope: scope, rid: rid, fp: hex.EncodeToString(h.Sum(nil)[:16])}
}

func (r idem) key() string { return r.kind + ":" + r.scope + ":" + r.rid }

// replayed looks up the object a request ID created earlier (0 when none or no request ID). A
// record whose body differs is refused with FailedPrecondition.
func (s *GraphService) replayed(ctx context.Context, r idem) (zen.ID, error) {
	if r.rid == "" {
		return 0, nil
	}
	id, err := s.g.LookupKey(ctx, graphKindRequest, r.key())
	if errors.Is(err, zen.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, s.fail("look up request_id", err)
	}
	o, err := s.g.Get(ctx, id)
	if errors.Is(err, zen.ErrNotFound) {
		return 0, nil // its object is gone (deleted, or a create refused after all)
	}
	if err != nil {
		return 0, s.fail("look up request_id", err)
	}
	if graphStr(o.Data, "request_fp") != r.fp {
		return 0, status.Errorf(codes.FailedPrecondition,
			"request_id %s was already used for a different %s request by this caller; use a new request_id", quote.Q(r.rid), r.kind)
	}
	return id, nil
}

// create stores a new object, or with a request ID returns the one that ID created before.
// It reports whether the object is new. A concurrent twin with the same request ID loses the
// MapKey race, deletes its own object and returns the winner's.
func (s *GraphService) create(ctx context.Context, r idem, t zen.Type, near zen.ID, data map[string]any) (zen.Object, bool, error) {
	if id, err := s.replayed(ctx, r); err != nil {
		return zen.Object{}, false, err
	} else if id != 0 {
		o, err := s.get(ctx, id)
		return o, false, err
	}
	if r.rid != "" {
		data["request_fp"] = r.fp
	}
	o, err := s.g.Create(ctx, t, near, data)
	if err != nil {
		return zen.Object{}, false, s.fail("create "+r.kind, err)
	}
	if r.rid == "" {
		return o, true, nil
	}
	ok, err := s.g.MapKey(ctx, graphKindRequest, r.key(), o.ID)
	if err != nil {
		return zen.Object{}, false, s.fail("record request_id", err)
	}
	if ok {
		return o, true, nil
	}
	// The key is taken: a concurrent twin won, or a record outlived its object.
	id, rerr := s.replayed(ctx, r)
	if rerr == nil && id == 0 {
		if old, err := s.g.LookupKey(ctx, graphKindRequest, r.key()); err == nil {
			if _, err := s.g.UnmapKey(ctx, graphKindRequest, r.key(), old); err == nil {
				if ok, err := s.g.MapKey(ctx, graphKindRequest, r.key(), o.ID); err == nil && ok {
					return o, true, nil
				}
			}
		}
		id, rerr = s.replayed(ctx, r)
	}
	if err := s.g.Delete(ctx, o.ID); err != nil {
		s.log.Warn("delete orphan of a request_id race", zap.Stringer("id", o.ID), zap.Error(err))
	}
	if rerr != nil {
		return zen.Object{}, false, rerr
	}
	if id == 0 {
		return zen.Object{}, false, status.Errorf(codes.Aborted, "request_id %s: concurrent retries conflicted; retry", quote.Q(r.rid))
	}
	w, err := s.get(ctx, id)
	return w, false, err
}

// forget removes the request-ID record of an object whose create was refused after all, so a
// retry is refused the same way instead of finding a deleted object.
func (s *GraphService) forget(ctx context.Context, r idem, id zen.ID) {
	if r.rid == "" {
		return
	}
	if _, err := s.g.UnmapKey(ctx, graphKindRequest, r.key(), id); err != nil {
		s.log.Warn("unmap request_id", zap.String("request_id", r.rid), zap.Error(err))
	}
}

// graphStr reads a string field of object data.
func graphStr(d map[string]any, name string) string {
	v, _ := d[name].(string)
	return v
}

// graphInt reads an integer field of object data (json.Number once stored).
func graphInt(d map[string]any, name string) int64 {
	switch v := d[name].(type) {
	case json.Number:
		n, _ := v.Int64()
		return n
	case int64:
		return v
	case int:
		return int64(v)
	case float64:
		return int64(v)
	}
	return 0
}

// graphIDs reads a list of IDs from object data.
func graphIDs(d map[string]any, name string) []zen.ID {
	var out []zen.ID
	switch v := d[name].(type) {
	case []any:
		for _, x := range v {
			if id, ok := zen.DataID(map[string]any{"x": x}, "x"); ok {
				out = append(out, id)
			}
		}
	case []string:
		for _, x := range v {
			if id, err := zen.ParseID(x); err == nil {
				out = append(out, id)
			}
		}
	}
	return out
}

// graphRef reads an ID field of object data (0 when absent).
func graphRef(d map[string]any, name string) zen.ID {
	id, _ := zen.DataID(d, name)
	return id
}

func graphUserMsg(o zen.Object) *graphv1.User {
	return &graphv1.User{
		Id: uint64(o.ID), IdStr: o.ID.String(),
		Username:    graphStr(o.Data, "username"),
		Email:       graphStr(o.Data, "email"),
		DisplayName: graphStr(o.Data, "display_name"),
		CreatedMs:   graphInt(o.Data, "created_ms"),
	}
}

func graphBoardMsg(o zen.Object) *graphv1.Board {
	owner := graphRef(o.Data, "owner")
	return &graphv1.Board{
		Id: uint64(o.ID), IdStr: o.ID.String(),
		OwnerId: uint64(owner), OwnerIdStr: owner.String(),
		Name:        graphStr(o.Data, "name"),
		Description: graphStr(o.Data, "description"),
		CreatedMs:   graphInt(o.Data, "created_ms"),
	}
}

func graphInterestMsg(o zen.Object) *graphv1.Interest {
	return &graphv1.Interest{
		Id: uint64(o.ID), IdStr: o.ID.String(),
		Name:      graphStr(o.Data, "name"),
		CreatedMs: graphInt(o.Data, "created_ms"),
	}
}

func graphPinMsg(o zen.Object) *graphv1.Pin {
	author, board := graphRef(o.Data, "author"), graphRef(o.Data, "board")
	p := &graphv1.Pin{
		Id: uint64(o.ID), IdStr: o.ID.String(),
		AuthorId: uint64(author), AuthorIdStr: author.String(),
		BoardId: uint64(board), BoardIdStr: board.String(),
		Details:   graphStr(o.Data, "details"),
		Link:      graphStr(o.Data, "link"),
		ImageUrl:  graphStr(o.Data, "image_url"),
		CreatedMs: graphInt(o.Data, "created_ms"),
	}
	for _, id := range graphIDs(o.Data, "interests") {
		p.InterestIds = append(p.InterestIds, uint64(id))
		p.InterestIdsStr = append(p.InterestIdsStr, id.String())
	}
	return p
}

// ObjectMsg is the wire form of a zen object, as GetObjects answers it (nil for a type the API
// does not carry).
func ObjectMsg(o zen.Object) *graphv1.Object { return graphObjectMsg(o) }

// graphObjectMsg converts any object of a known type; nil for another type.
func graphObjectMsg(o zen.Object) *graphv1.Object {
	switch o.ID.Type() {
	case zen.TypeUser:
		return &graphv1.Object{Kind: &graphv1.Object_User{User: graphUserMsg(o)}}
	case zen.TypeBoard:
		return &graphv1.Object{Kind: &graphv1.Object_Board{Board: graphBoardMsg(o)}}
	case zen.TypePin:
		return &graphv1.Object{Kind: &graphv1.Object_Pin{Pin: graphPinMsg(o)}}
	case zen.TypeInterest:
		return &graphv1.Object{Kind: &graphv1.Object_Interest{Interest: graphInterestMsg(o)}}
	}
	return nil
}
