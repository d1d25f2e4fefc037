// Package engagementsvc is EngagementService, the way in of what users do with their feed:
// impressions, close-ups, clicks, saves, likes and hides, reported in batches by the user's own
// client (or a frontend service acting for users). A batch is validated whole, its hides are
// written to the hide set at once (so the next page leaves the pins out), and it is enqueued as
// one pinlater engagement task through the durable client (the store's outbox: acknowledged
// means recorded), which the worker applies once per request ID (docs/engagement.md).
package engagementsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/pinlater"
	engagementv1 "github.com/smartfeed/smartfeed/proto/engagement/v1"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// Enqueuer puts a pinlater task in its queue (*pinlater.DurableClient satisfies it).
type Enqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// Hides is where a hide is written before Report answers (*engagement.Store satisfies it).
type Hides interface {
	Hide(ctx context.Context, user, pin, author zen.ID) error
}

// Authors tells a pin's author (0 when unknown); cmd wires it to the graph.
type Authors interface {
	Author(ctx context.Context, pin zen.ID) (zen.ID, error)
}

// Service implements engagementv1.EngagementService. It is safe for concurrent use.
type Service struct {
	engagementv1.UnimplementedEngagementServiceServer
	q       Enqueuer
	hides   Hides
	authors Authors
	exp     engagement.Experiment
	now     func() time.Time
	log     *zap.Logger
	events  *prometheus.CounterVec
}

// Options are a Service's optional collaborators.
type Options struct {
	// Hides, when set, receives each hide before Report answers; nil leaves hides to the
	// worker (the next page may still show the pin until it runs).
	Hides Hides
	// Authors, with Hides, names each hidden pin's author so it is marked hidden at once.
	Authors    Authors
	Experiment engagement.Experiment
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// New returns the service over q.
func New(q Enqueuer, o Options) (*Service, error) {
	if q == nil {
		return nil, errors.New("engagement service: an enqueuer is required")
	}
	if err := o.Experiment.Validate(); err != nil {
		return nil, fmt.Errorf("engagement service: %w", err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	s := &Service{q: q, hides: o.Hides, authors: o.Authors, exp: o.Experiment, now: o.Now, log: o.Logger}
	s.events = promauto.With(o.Registerer).NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_engagement_reported_total",
		Help: "Engagement events accepted by EngagementService.Report, by experiment arm and action."}, []string{"arm", "action"})
	return s, nil
}

// Register registers the service on srv.
func (s *Service) Register(srv grpc.ServiceRegistrar) {
	engagementv1.RegisterEngagementServiceServer(srv, s)
}

var actions = map[engagementv1.Action]string{
	engagementv1.Action_ACTION_IMPRESSION: pinlater.ActionImpression,
	engagementv1.Action_ACTION_CLOSEUP:    pinlater.ActionCloseup,
	engagementv1.Action_ACTION_CLICK:      pinlater.ActionClick,
	engagementv1.Action_ACTION_SAVE:       pinlater.ActionSave,
	engagementv1.Action_ACTION_LIKE:       pinlater.ActionLike,
	engagementv1.Action_ACTION_HIDE:       pinlater.ActionHide,
}

var sources = map[feedv1.Source]string{
	feedv1.Source_SOURCE_UNSPECIFIED: zen.SourceFollowing.String(),
	feedv1.Source_SOURCE_FOLLOWING:   zen.SourceFollowing.String(),
	feedv1.Source_SOURCE_INTEREST:    zen.SourceInterest.String(),
	feedv1.Source_SOURCE_RELATED:     zen.SourceRelated.String(),
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// typedID reads a required ID of type want given as a number and/or a decimal string.
func typedID(field string, n uint64, str string, want zen.Type) (zen.ID, error) {
	id, err := zen.WireID(n, str)
	if err != nil {
		return 0, invalid("%s: %v", field, err)
	}
	if err := id.Check(want); err != nil {
		return 0, invalid("%s: expected a %s ID: %v", field, want, err)
	}
	return id, nil
}

// payload validates the request whole and builds the task's payload.
func (s *Service) payload(ctx context.Context, req *engagementv1.ReportRequest) (pinlater.EngagementPayload, error) {
	user, err := typedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return pinlater.EngagementPayload{}, err
	}
	if p, ok := auth.FromContext(ctx); ok && p.User != 0 && p.User != user {
		return pinlater.EngagementPayload{}, status.Errorf(codes.PermissionDenied, "user_id must be the token's user %d", p.User)
	}
	rid := req.GetRequestId()
	if rid == "" || len(rid) > pinlater.MaxEngagementRequestID {
		return pinlater.EngagementPayload{}, invalid("request_id %s: want 1 to %d bytes", quote.Q(rid), pinlater.MaxEngagementRequestID)
	}
	n := len(req.GetEvents())
	if n == 0 || n > pinlater.MaxEngagementEvents {
		return pinlater.EngagementPayload{}, invalid("%d events: want 1 to %d", n, pinlater.MaxEngagementEvents)
	}
	nowMs := s.now().UnixMilli()
	p := pinlater.EngagementPayload{User: uint64(user), RequestID: rid, Arm: s.exp.ArmOf(user),
		Events: make([]pinlater.EngagementEvent, n)}
	for i, e := range req.GetEvents() {
		act, ok := actions[e.GetAction()]
		if !ok {
			return p, invalid("events[%d]: unknown action %d", i, int32(e.GetAction()))
		}
		pin, err := typedID(fmt.Sprintf("events[%d].pin_id", i), e.GetPinId(), e.GetPinIdStr(), zen.TypePin)
		if err != nil {
			return p, err
		}
		src, ok := sources[e.GetSource()]
		if !ok {
			return p, invalid("events[%d]: unknown source %d", i, int32(e.GetSource()))
		}
		at := e.GetAtMs()
		if at < 0 || at > nowMs+24*time.Hour.Milliseconds() {
			return p, invalid("events[%d]: at_ms %d is negative or more than a day ahead", i, at)
		}
		if at == 0 {
			at = nowMs
		}
		p.Events[i] = pinlater.EngagementEvent{Action: act, Pin: uint64(pin), Position: int(e.GetPosition()),
			Fresh: e.GetFresh(), Source: src, AtMs: at}
	}
	return p, nil
}

// Report implements engagementv1.EngagementServiceServer.
func (s *Service) Report(ctx context.Context, req *engagementv1.ReportRequest) (*engagementv1.ReportResponse, error) {
	p, err := s.payload(ctx, req)
	if err != nil {
		return nil, err
	}
	task, err := pinlater.NewEngagement(p)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := s.hide(ctx, p); err != nil {
		return nil, err
	}
	info, err := s.q.Enqueue(ctx, task)
	if err != nil {
		s.log.Warn("engagement enqueue failed", zap.Uint64("user", p.User), zap.Error(err))
		return nil, status.Errorf(codes.Unavailable, "engagement of %d not recorded (retry with the same request_id): %v", p.User, err)
	}
	if !info.Duplicate {
		for _, e := range p.Events {
			s.events.WithLabelValues(p.Arm, e.Action).Inc()
		}
	}
	return &engagementv1.ReportResponse{Accepted: uint32(len(p.Events)), Duplicate: info.Duplicate, Arm: p.Arm}, nil
}

// hide writes the batch's hides to the hide set (idempotent), so the next page honours them
// before the worker has run the task.
func (s *Service) hide(ctx context.Context, p pinlater.EngagementPayload) error {
	if s.hides == nil {
		return nil
	}
	for _, e := range p.Events {
		if e.Action != pinlater.ActionHide {
			continue
		}
		var author zen.ID
		if s.authors != nil {
			a, err := s.authors.Author(ctx, zen.ID(e.Pin))
			if err != nil && !errors.Is(err, zen.ErrNotFound) && !errors.Is(err, zen.ErrDeleted) {
				return status.Errorf(codes.Unavailable, "hide %d: %v", e.Pin, err)
			}
			author = a
		}
		if err := s.hides.Hide(ctx, zen.ID(p.User), zen.ID(e.Pin), author); err != nil {
			s.log.Warn("hide failed", zap.Uint64("user", p.User), zap.Error(err))
			return status.Errorf(codes.Unavailable, "hide %d: %v", e.Pin, err)
		}
	}
	return nil
}
