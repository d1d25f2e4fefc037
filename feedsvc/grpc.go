package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// GRPCServer is the gRPC face of a Service: FeedService.
type GRPCServer struct {
	feedv1.UnimplementedFeedServiceServer
	svc *Service
	// objects answers include_objects; nil refuses it.
	objects *pageObjects
	// impressions receives every page answered (WithImpressions); nil records none.
	impressions Impressions
}

// RegisterFeed registers FeedService alone on s, with objects answering include_objects (nil:
// such a request is refused with FailedPrecondition, naming GraphService.GetObjects instead).
// reg receives the metrics of include_objects (nil registers nothing).
func RegisterFeed(s grpc.ServiceRegistrar, svc *Service, objects ObjectLookup, reg prometheus.Registerer, opts ...FeedOption) error {
	g := &GRPCServer{svc: svc}
	for _, o := range opts {
		o(g)
	}
	if objects != nil {
		po, err := newPageObjects(objects, reg)
		if err != nil {
			return err
		}
		g.objects = po
	}
	feedv1.RegisterFeedServiceServer(s, g)
	return nil
}

// AdminServer is the gRPC FeedAdmin service: hedging policy, service knobs and fault
// injection, all live.
type AdminServer struct {
	feedv1.UnimplementedFeedAdminServer
	svc    *Service
	faults map[feedv1.Store]*faults.Table
}

// Register registers FeedService, and FeedAdmin when admin is set, on s. primary and standby
// are the fault wrappers of the two stores; nil disables fault injection (SetFaults then
// answers FailedPrecondition).
func Register(s grpc.ServiceRegistrar, svc *Service, admin bool, primary, standby *faults.Table) {
	feedv1.RegisterFeedServiceServer(s, &GRPCServer{svc: svc})
	if admin {
		RegisterAdmin(s, svc, primary, standby)
	}
}

// RegisterAdmin registers FeedAdmin alone, for the admin port: it never belongs on the port
// the frontends reach.
func RegisterAdmin(s grpc.ServiceRegistrar, svc *Service, primary, standby *faults.Table) {
	feedv1.RegisterFeedAdminServer(s, NewAdminServer(svc, primary, standby))
}

// NewAdminServer returns the admin service; nil fault tables disable fault injection.
func NewAdminServer(svc *Service, primary, standby *faults.Table) *AdminServer {
	a := &AdminServer{svc: svc, faults: map[feedv1.Store]*faults.Table{}}
	if primary != nil {
		a.faults[feedv1.Store_STORE_PRIMARY] = primary
	}
	if standby != nil {
		a.faults[feedv1.Store_STORE_STANDBY] = standby
	}
	return a
}

// grpcError maps the service's errors to gRPC codes.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNoUser):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrOverloaded):
		return overloadStatus(err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, ErrUnavailable), errors.Is(err, zen.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// overloadStatus is RESOURCE_EXHAUSTED with a google.rpc.RetryInfo saying when to try again.
func overloadStatus(err error) error {
	st := status.New(codes.ResourceExhausted, err.Error())
	var oe *OverloadError
	if errors.As(err, &oe) {
		if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(oe.RetryAfter)}); derr == nil {
			st = d
		}
	}
	return st.Err()
}

var freshStatuses = map[FreshStatus]feedv1.FreshStatus{
	FreshIncluded:       feedv1.FreshStatus_FRESH_STATUS_INCLUDED,
	FreshEmpty:          feedv1.FreshStatus_FRESH_STATUS_EMPTY,
	FreshGeneratorError: feedv1.FreshStatus_FRESH_STATUS_GENERATOR_ERROR,
	FreshTimeout:        feedv1.FreshStatus_FRESH_STATUS_GENERATOR_TIMEOUT,
	FreshPersistFailed:  feedv1.FreshStatus_FRESH_STATUS_PERSIST_FAILED,
	FreshPrimaryDown:    feedv1.FreshStatus_FRESH_STATUS_PERSIST_FAILED,
	FreshNotFirstPage:   feedv1.FreshStatus_FRESH_STATUS_NOT_FIRST_PAGE,
	FreshRecent:         feedv1.FreshStatus_FRESH_STATUS_RECENT,
	FreshDeferred:       feedv1.FreshStatus_FRESH_STATUS_DEFERRED,
}

func protoStore(s hedge.Store) feedv1.Store {
	if s == hedge.Standby {
		return feedv1.Store_STORE_STANDBY
	}
	return feedv1.Store_STORE_PRIMARY
}

// GetFeed implements FeedService.
func (g *GRPCServer) GetFeed(ctx context.Context, req *feedv1.GetFeedRequest) (*feedv1.GetFeedResponse, error) {
	user, err := zen.WireID(req.GetUserId(), req.GetUserIdStr())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "user_id: %v", err)
	}
	if req.GetIncludeObjects() && g.objects == nil {
		// Refused before the page is read: a page read and then refused would still have
		// taken a chunk from the pools.
		return nil, status.Error(codes.FailedPrecondition, "include_objects: this feed process has no graph store to read objects from; "+
			"ask without it and read the pins with GraphService.GetObjects (pin_id_str of each item)")
	}
	p, err := g.svc.GetFeed(ctx, Request{User: user, Cursor: req.GetCursor(), PageSize: int(req.GetPageSize())})
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &feedv1.GetFeedResponse{
		NextCursor:    p.NextCursor,
		FreshIncluded: p.FreshStatus == FreshIncluded,
		FreshStatus:   freshStatuses[p.FreshStatus],
		FreshDetail:   p.FreshDetail,
		ServedFrom:    protoStore(p.From),
		Hedged:        p.Hedged,
		Rebuilding:    p.Rebuilding,
		Items:         make([]*feedv1.FeedItem, 0, len(p.Items)),
	}
	// The items in one allocation, not one each: a page's allocations are what the collector
	// pays for on every call.
	items := make([]feedv1.FeedItem, len(p.Items))
	for i, it := range p.Items {
		fi := &items[i]
		fi.PinId, fi.PinIdStr, fi.Source = uint64(it.Pin), it.Pin.String(), feedv1.Source(it.Source)
		fi.Score, fi.AuthorId, fi.BoardId = it.Score, uint64(it.Author), uint64(it.Board)
		fi.Reason, fi.Fresh = it.Reason, it.Fresh
		resp.Items = append(resp.Items, fi)
	}
	if req.GetIncludeObjects() {
		g.objects.attach(ctx, resp)
	}
	g.served(ctx, user, req.GetCursor(), p)
	return resp, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fromMS converts a millisecond field, refusing NaN, negative and absurd values.
func fromMS(field string, v float64) (time.Duration, error) {
	const maxMS = float64(24 * time.Hour / time.Millisecond)
	if math.IsNaN(v) || v < 0 || v > maxMS {
		return 0, status.Errorf(codes.InvalidArgument, "%s %v is not in [0, %v] ms", field, v, maxMS)
	}
	return time.Duration(v * float64(time.Millisecond)), nil
}

func (a *AdminServer) policy() *feedv1.HedgePolicy {
	cut, _ := a.svc.Hedger().Cutoff()
	return HedgePolicyProto(a.svc.Hedger().Policy(), cut)
}

// GetHedgePolicy implements FeedAdmin.
func (a *AdminServer) GetHedgePolicy(context.Context, *feedv1.GetHedgePolicyRequest) (*feedv1.HedgePolicy, error) {
	return a.policy(), nil
}

// SetHedgePolicy implements FeedAdmin.
func (a *AdminServer) SetHedgePolicy(_ context.Context, in *feedv1.HedgePolicy) (*feedv1.HedgePolicy, error) {
	p, err := HedgePolicyFromProto(in, a.svc.Hedger().Policy())
	if err != nil {
		return nil, err
	}
	if err := a.svc.Hedger().SetPolicy(p); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return a.policy(), nil
}

func (a *AdminServer) table(s feedv1.Store) (*faults.Table, error) {
	t, ok := a.faults[s]
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "fault injection is not enabled for store %v", s)
	}
	return t, nil
}

func protoFaults(s feedv1.Store, c faults.Config) *feedv1.Faults {
	return &feedv1.Faults{Store: s, BaseMs: ms(c.Base), JitterMs: ms(c.Jitter), SlowFraction: c.SlowFraction,
		SlowMs: ms(c.Slow), ErrorRate: c.ErrorRate, Outage: c.Outage}
}

// GetFaults implements FeedAdmin.
func (a *AdminServer) GetFaults(_ context.Context, in *feedv1.GetFaultsRequest) (*feedv1.Faults, error) {
	t, err := a.table(in.GetStore())
	if err != nil {
		return nil, err
	}
	return protoFaults(in.GetStore(), t.Config()), nil
}

// SetFaults implements FeedAdmin.
func (a *AdminServer) SetFaults(_ context.Context, in *feedv1.Faults) (*feedv1.Faults, error) {
	t, err := a.table(in.GetStore())
	if err != nil {
		return nil, err
	}
	c := faults.Config{SlowFraction: in.GetSlowFraction(), ErrorRate: in.GetErrorRate(), Outage: in.GetOutage()}
	for _, f := range []struct {
		name string
		v    float64
		dst  *time.Duration
	}{{"base_ms", in.GetBaseMs(), &c.Base}, {"jitter_ms", in.GetJitterMs(), &c.Jitter}, {"slow_ms", in.GetSlowMs(), &c.Slow}} {
		if *f.dst, err = fromMS(f.name, f.v); err != nil {
			return nil, err
		}
	}
	if err := t.Set(c); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return protoFaults(in.GetStore(), t.Config()), nil
}

func protoConfig(c Config) *feedv1.ServiceConfig {
	return &feedv1.ServiceConfig{GeneratorDeadlineMs: ms(c.GeneratorDeadline), PersistTimeoutMs: ms(c.PersistTimeout),
		MaxItems: int32(c.MaxItems), DefaultPageSize: int32(c.DefaultPageSize), MaxPageSize: int32(c.MaxPageSize),
		StalePendingMs: ms(c.StalePending), PrepareAfterMs: proto.Float64(ms(c.PrepareAfter)),
		PreparedMaxAgeMs: proto.Float64(ms(c.PreparedMaxAge)), MinChunkIntervalMs: proto.Float64(ms(c.MinChunkInterval))}
}

// GetServiceConfig implements FeedAdmin.
func (a *AdminServer) GetServiceConfig(context.Context, *feedv1.GetServiceConfigRequest) (*feedv1.ServiceConfig, error) {
	return protoConfig(a.svc.Config()), nil
}

// GetReplication implements FeedAdmin.
func (a *AdminServer) GetReplication(context.Context, *feedv1.GetReplicationRequest) (*feedv1.Replication, error) {
	g := a.svc.gate
	if g == nil {
		return nil, status.Error(codes.FailedPrecondition, "this feed service has no staleness gate on its standby")
	}
	return protoReplication(g.Status()), nil
}

func protoReplication(st ReplicationStatus) *feedv1.Replication {
	out := &feedv1.Replication{Mechanism: st.Mechanism, LagMs: ms(st.Lag), MaxStalenessMs: ms(st.MaxStaleness),
		StandbyRefused: st.Refused, StaleRefusals: st.Refusals, RecentCount: int32(len(st.Recent))}
	if len(st.Recent) > 0 {
		s := slices.Clone(st.Recent)
		slices.Sort(s)
		q := func(p float64) float64 { return ms(s[min(len(s)-1, max(0, int(p*float64(len(s))+0.999999)-1))]) }
		out.RecentP50Ms, out.RecentP99Ms, out.RecentMaxMs = q(0.5), q(0.99), ms(s[len(s)-1])
	}
	return out
}

// SetServiceConfig implements FeedAdmin.
// MinLiveMaxItems is the lowest max_items SetServiceConfig accepts (or the current value, when
// the config file set a lower one).
const MinLiveMaxItems = 100

func (a *AdminServer) SetServiceConfig(_ context.Context, in *feedv1.ServiceConfig) (*feedv1.ServiceConfig, error) {
	// The knobs ServiceConfig does not carry (inline_materialize) keep their values.
	c := a.svc.Config()
	c.MaxItems, c.DefaultPageSize, c.MaxPageSize = int(in.GetMaxItems()), int(in.GetDefaultPageSize()), int(in.GetMaxPageSize())
	var err error
	// Left unset, the optional knobs keep their values (a client older than them sends none).
	if in.MinChunkIntervalMs != nil {
		if c.MinChunkInterval, err = fromMS("min_chunk_interval_ms", in.GetMinChunkIntervalMs()); err != nil {
			return nil, err
		}
	}
	if in.PrepareAfterMs != nil {
		if c.PrepareAfter, err = fromMS("prepare_after_ms", in.GetPrepareAfterMs()); err != nil {
			return nil, err
		}
	}
	if in.PreparedMaxAgeMs != nil {
		if c.PreparedMaxAge, err = fromMS("prepared_max_age_ms", in.GetPreparedMaxAgeMs()); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		v    float64
		dst  *time.Duration
	}{{"generator_deadline_ms", in.GetGeneratorDeadlineMs(), &c.GeneratorDeadline},
		{"persist_timeout_ms", in.GetPersistTimeoutMs(), &c.PersistTimeout},
		{"stale_pending_ms", in.GetStalePendingMs(), &c.StalePending}} {
		if *f.dst, err = fromMS(f.name, f.v); err != nil {
			return nil, err
		}
	}
	// Lowering max_items trims every user's feed at their next update, for good: at run time
	// it may not go below a safe floor (a deploy-time config may, deliberately).
	if cur := a.svc.Config().MaxItems; c.MaxItems < min(MinLiveMaxItems, cur) {
		return nil, status.Errorf(codes.InvalidArgument,
			"max_items %d is below the floor %d for live changes (each feed would be trimmed to it, permanently); set it in the config file if you mean it",
			c.MaxItems, min(MinLiveMaxItems, cur))
	}
	if err := a.svc.SetConfig(c); err != nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprint(err))
	}
	return protoConfig(a.svc.Config()), nil
}
