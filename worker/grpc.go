package worker

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/pinlater"
	ingestv1 "github.com/smartfeed/smartfeed/proto/ingest/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// MaxPublishEvents bounds one Publish request.
const MaxPublishEvents = 100

// Engager records engagements (*Worker satisfies it).
type Engager interface {
	RecordEngagement(ctx context.Context, user, pin, author zen.ID) error
}

// Objects reads the graph's objects (*zen.Graph satisfies it): GetMany returns the live ones,
// Get tells a soft-deleted object (zen.ErrDeleted) from an absent one (zen.ErrNotFound).
type Objects interface {
	GetMany(ctx context.Context, ids []zen.ID) (map[zen.ID]zen.Object, error)
	Get(ctx context.Context, id zen.ID) (zen.Object, error)
}

// IngestServer is the gRPC face of the Publisher: IngestService.Publish.
type IngestServer struct {
	ingestv1.UnimplementedIngestServiceServer
	pub  *Publisher
	eng  Engager
	objs Objects
}

// NewIngestServer returns the server. eng may be nil: engagement events are then refused. objs
// is the store the worker reads the events' objects from: Publish refuses, with NOT_FOUND, an
// event naming an object it does not hold (the task would fail at every retry and die).
func NewIngestServer(pub *Publisher, eng Engager, objs Objects) *IngestServer {
	return &IngestServer{pub: pub, eng: eng, objs: objs}
}

// ref is an object an event names, as the field that names it.
type ref struct {
	event int
	what  string
	id    zen.ID
}

// refs collects the objects the events of one request name.
type refs struct {
	event int
	list  []ref
}

func (r *refs) add(what string, id zen.ID) {
	if id != 0 {
		r.list = append(r.list, ref{event: r.event, what: what, id: id})
	}
}

// ErrObjectNotFound is wrapped by the error of checkObjects for an object the store does not
// hold.
var ErrObjectNotFound = errors.New("not in the store")

// checkObjects reports the first object of rs the store does not hold, live or soft-deleted:
// one batched read, then one read per object that is not live (to tell deleted from absent).
func (s *IngestServer) checkObjects(ctx context.Context, rs []ref) error {
	if s.objs == nil || len(rs) == 0 {
		return nil
	}
	ids := make([]zen.ID, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	live, err := s.objs.GetMany(ctx, ids)
	if err != nil {
		return fmt.Errorf("read the events' objects: %w", err)
	}
	known := map[zen.ID]bool{}
	for _, r := range rs {
		if _, ok := live[r.id]; ok || known[r.id] {
			continue
		}
		_, err := s.objs.Get(ctx, r.id)
		switch {
		case err == nil, errors.Is(err, zen.ErrDeleted):
			known[r.id] = true // a deletion since the batch read, or soft-deleted: the task copes
		case errors.Is(err, zen.ErrNotFound):
			return fmt.Errorf("events[%d]: %s %d: %w (create it through GraphService or BoardService first)", r.event, r.what, r.id, ErrObjectNotFound)
		default:
			return fmt.Errorf("read %s %d: %w", r.what, r.id, err)
		}
	}
	return nil
}

// idOf reads an ID given as a number, a decimal string, or both (zen.WireID), of type t
// unless t is 0.
func idOf(what string, n uint64, s string, t zen.Type, required bool) (zen.ID, error) {
	id, err := zen.WireID(n, s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if id == 0 {
		if required {
			return 0, fmt.Errorf("%s is required", what)
		}
		return 0, nil
	}
	if t == 0 {
		return id, nil
	}
	if err := id.Check(t); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return id, nil
}

// action is one validated event, ready to enqueue.
type action func(ctx context.Context) (*ingestv1.EventResult, error)

func result(infos ...*pinlater.Info) *ingestv1.EventResult {
	r := &ingestv1.EventResult{Duplicate: len(infos) > 0}
	for _, in := range infos {
		r.TaskIds = append(r.TaskIds, in.ID)
		r.Duplicate = r.Duplicate && in.Duplicate
	}
	return r
}

// parse validates one event and returns the action that enqueues it: one parse function per
// event type.
func (s *IngestServer) parse(ev *ingestv1.Event, rs *refs) (action, error) {
	switch e := ev.GetEvent().(type) {
	case *ingestv1.Event_PinSaved:
		return s.parsePinSaved(e.PinSaved, rs)
	case *ingestv1.Event_Follow, *ingestv1.Event_Unfollow:
		f, unfollow := ev.GetFollow(), false
		if f == nil {
			f, unfollow = ev.GetUnfollow(), true
		}
		return s.parseFollow(f, unfollow, rs)
	case *ingestv1.Event_PinDeleted:
		return s.parsePinDeleted(e.PinDeleted)
	case *ingestv1.Event_UserDeleted:
		return s.parseUserDeleted(e.UserDeleted)
	case *ingestv1.Event_RelatedPins:
		return s.parseRelatedPins(e.RelatedPins, rs)
	case *ingestv1.Event_Engagement:
		return s.parseEngagement(e.Engagement, rs)
	}
	return nil, errors.New("empty event")
}

// parsePinSaved validates a pin save (or repin), with its engagement when origin_author is set.
func (s *IngestServer) parsePinSaved(p *ingestv1.PinSaved, rs *refs) (action, error) {
	pin, err1 := idOf("pin", p.GetPin(), p.GetPinStr(), zen.TypePin, true)
	user, err2 := idOf("user", p.GetUser(), p.GetUserStr(), zen.TypeUser, true)
	board, err3 := idOf("board", p.GetBoard(), p.GetBoardStr(), zen.TypeBoard, true)
	origin, err4 := idOf("origin_author", p.GetOriginAuthor(), p.GetOriginAuthorStr(), zen.TypeUser, false)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	if len(p.GetInterestsStr()) > 0 && len(p.GetInterests()) > 0 {
		return nil, errors.New("interests: set interests or interests_str, not both")
	}
	ev := PinSaved{Pin: pin, User: user, Board: board, CreatedMs: p.GetCreatedMs(), Repin: p.GetRepin()}
	for i, n := range p.GetInterests() {
		id, err := idOf(fmt.Sprintf("interests[%d]", i), n, "", zen.TypeInterest, true)
		if err != nil {
			return nil, err
		}
		ev.Interests = append(ev.Interests, id)
	}
	for i, str := range p.GetInterestsStr() {
		id, err := idOf(fmt.Sprintf("interests_str[%d]", i), 0, str, zen.TypeInterest, true)
		if err != nil {
			return nil, err
		}
		ev.Interests = append(ev.Interests, id)
	}
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	if origin != 0 && s.eng == nil {
		return nil, errors.New("origin_author: engagements are not accepted by this server")
	}
	rs.add("pin", pin)
	rs.add("user", user)
	rs.add("board", board)
	rs.add("origin_author", origin)
	for i, in := range ev.Interests {
		rs.add(fmt.Sprintf("interests[%d]", i), in)
	}
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		if origin != 0 {
			if err := s.eng.RecordEngagement(ctx, user, pin, origin); err != nil {
				return nil, err
			}
		}
		info, err := s.pub.PinSaved(ctx, ev)
		if err != nil {
			return nil, err
		}
		return result(info), nil
	}, nil
}

// parseFollow validates a follow, or an unfollow when unfollow is set.
func (s *IngestServer) parseFollow(f *ingestv1.Follow, unfollow bool, rs *refs) (action, error) {
	user, err1 := idOf("user", f.GetUser(), f.GetUserStr(), zen.TypeUser, true)
	target, err2 := idOf("target", f.GetTarget(), f.GetTargetStr(), 0, true)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if _, err := followPayload(user, target); err != nil {
		return nil, err
	}
	if !unfollow {
		// An unfollow's cleanup is idempotent and may follow the deletion of either side.
		rs.add("user", user)
		rs.add("target", target)
	}
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		var info *pinlater.Info
		var err error
		if unfollow {
			info, err = s.pub.Unfollowed(ctx, user, target)
		} else {
			info, err = s.pub.Followed(ctx, user, target)
		}
		if err != nil {
			return nil, err
		}
		return result(info), nil
	}, nil
}

// parsePinDeleted validates a pin deletion.
func (s *IngestServer) parsePinDeleted(p *ingestv1.PinDeleted) (action, error) {
	pin, err1 := idOf("pin", p.GetPin(), p.GetPinStr(), zen.TypePin, true)
	author, err2 := idOf("author", p.GetAuthor(), p.GetAuthorStr(), zen.TypeUser, true)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		info, err := s.pub.PinDeleted(ctx, pin, author)
		if err != nil {
			return nil, err
		}
		return result(info), nil
	}, nil
}

// parseUserDeleted validates a user deletion.
func (s *IngestServer) parseUserDeleted(u *ingestv1.UserDeleted) (action, error) {
	user, err := idOf("user", u.GetUser(), u.GetUserStr(), zen.TypeUser, true)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		info, err := s.pub.UserDeleted(ctx, user)
		if err != nil {
			return nil, err
		}
		return result(info), nil
	}, nil
}

// parseRelatedPins validates a recommender's related pins for a user.
func (s *IngestServer) parseRelatedPins(r *ingestv1.RelatedPins, rs *refs) (action, error) {
	user, err := idOf("user", r.GetUser(), r.GetUserStr(), zen.TypeUser, true)
	if err != nil {
		return nil, err
	}
	if len(r.GetPins()) == 0 || len(r.GetPins()) > MaxRelatedPins {
		return nil, fmt.Errorf("related_pins: %d pins (want 1..%d)", len(r.GetPins()), MaxRelatedPins)
	}
	pins := make([]RelatedPin, len(r.GetPins()))
	for i, rp := range r.GetPins() {
		pin, err1 := idOf(fmt.Sprintf("pins[%d].pin", i), rp.GetPin(), rp.GetPinStr(), zen.TypePin, true)
		author, err2 := idOf(fmt.Sprintf("pins[%d].author", i), rp.GetAuthor(), rp.GetAuthorStr(), zen.TypeUser, true)
		board, err3 := idOf(fmt.Sprintf("pins[%d].board", i), rp.GetBoard(), rp.GetBoardStr(), zen.TypeBoard, true)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		if rp.GetCreatedMs() <= 0 {
			return nil, fmt.Errorf("pins[%d].created_ms %d", i, rp.GetCreatedMs())
		}
		pins[i] = RelatedPin{Pin: pin, Author: author, Board: board, CreatedMs: rp.GetCreatedMs()}
		rs.add(fmt.Sprintf("pins[%d].pin", i), pin)
		rs.add(fmt.Sprintf("pins[%d].author", i), author)
		rs.add(fmt.Sprintf("pins[%d].board", i), board)
	}
	rs.add("user", user)
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		infos, err := s.pub.RelatedPins(ctx, user, pins)
		if err != nil {
			return nil, err
		}
		return result(infos...), nil
	}, nil
}

// parseEngagement validates an engagement; refused when the server has no Engager.
func (s *IngestServer) parseEngagement(g *ingestv1.Engagement, rs *refs) (action, error) {
	user, err1 := idOf("user", g.GetUser(), g.GetUserStr(), zen.TypeUser, true)
	pin, err2 := idOf("pin", g.GetPin(), g.GetPinStr(), zen.TypePin, true)
	author, err3 := idOf("author", g.GetAuthor(), g.GetAuthorStr(), zen.TypeUser, true)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	if s.eng == nil {
		return nil, errors.New("engagement: not accepted by this server")
	}
	rs.add("user", user)
	rs.add("pin", pin)
	rs.add("author", author)
	return func(ctx context.Context) (*ingestv1.EventResult, error) {
		if err := s.eng.RecordEngagement(ctx, user, pin, author); err != nil {
			return nil, err
		}
		return &ingestv1.EventResult{}, nil
	}, nil
}

// Publish implements IngestServiceServer.
func (s *IngestServer) Publish(ctx context.Context, req *ingestv1.PublishRequest) (*ingestv1.PublishResponse, error) {
	evs := req.GetEvents()
	if len(evs) == 0 || len(evs) > MaxPublishEvents {
		return nil, status.Errorf(codes.InvalidArgument, "publish: %d events (want 1..%d)", len(evs), MaxPublishEvents)
	}
	acts := make([]action, len(evs))
	var rs refs
	for i, ev := range evs {
		rs.event = i
		a, err := s.parse(ev, &rs)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "events[%d]: %v", i, err)
		}
		acts[i] = a
	}
	if err := s.checkObjects(ctx, rs.list); err != nil {
		if errors.Is(err, ErrObjectNotFound) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	resp := &ingestv1.PublishResponse{Results: make([]*ingestv1.EventResult, 0, len(acts))}
	for i, a := range acts {
		r, err := a(ctx)
		if err != nil {
			if errors.Is(err, pinlater.ErrInvalidPayload) {
				return nil, status.Errorf(codes.InvalidArgument, "events[%d]: %v", i, err)
			}
			if errors.Is(err, pinlater.ErrQueueDraining) {
				return nil, status.Errorf(codes.Unavailable, "events[%d]: %v", i, err)
			}
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return nil, status.Errorf(codes.Unavailable, "events[%d]: %v", i, err)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}
