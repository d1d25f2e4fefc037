package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/smartfeed/smartfeed/zen"
)

// Rule says who may call a method. A call passes when any of the rule's clauses holds.
type Rule struct {
	// Public: anyone, without a token (health checks, reflection).
	Public bool
	// AnyCaller: any verified token (reads of public objects).
	AnyCaller bool
	// Scopes: a service token carrying any of them. A user token's scopes never count: a
	// subject is a user or a service, never both.
	Scopes []string
	// Self names the request field of the acting user (a fixed64, with a "_str" twin): a user's
	// token may call for that user only.
	Self string
	// Owner names the request field of an object (a board) whose owner must be the token's
	// user.
	Owner string
}

// Method names.
const (
	feedSvc   = "/smartfeed.feed.v1.FeedService/"
	graphSvc  = "/smartfeed.graph.v1.GraphService/"
	boardSvc  = "/smartfeed.board.v1.BoardService/"
	ingestSvc = "/smartfeed.ingest.v1.IngestService/"
	genSvc    = "/smartfeed.generator.v1.GeneratorService/"
	engSvc    = "/smartfeed.engagement.v1.EngagementService/"
)

// Policy is who may call each method of the public gRPC port (docs/security.md shows it as a
// table). A method missing from it is refused (PermissionDenied) whoever calls, so a new
// method cannot go out unprotected; TestAuthMatrix (cmd/smartfeed), which calls every method
// the servers register, fails on one.
var Policy = map[string]Rule{
	"/grpc.health.v1.Health/Check":                                   {Public: true},
	"/grpc.health.v1.Health/Watch":                                   {Public: true},
	"/grpc.health.v1.Health/List":                                    {Public: true},
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      {Public: true},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {Public: true},

	feedSvc + "GetFeed": {Self: "user_id", Scopes: []string{ScopeFeedRead}},

	graphSvc + "CreateUser":     {Scopes: []string{ScopeGraphWrite}},
	graphSvc + "GetUser":        {AnyCaller: true},
	graphSvc + "GetUserByName":  {AnyCaller: true},
	graphSvc + "GetObjects":     {AnyCaller: true},
	graphSvc + "ListBoards":     {AnyCaller: true},
	graphSvc + "ListFollowers":  {AnyCaller: true},
	graphSvc + "ListFollowing":  {AnyCaller: true},
	graphSvc + "DeleteUser":     {Self: "user_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "CreateBoard":    {Self: "owner_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "CreateInterest": {Scopes: []string{ScopeGraphWrite}},
	graphSvc + "CreatePin":      {Self: "author_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "SavePin":        {Self: "user_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "LikePin":        {Self: "user_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "DeletePin":      {Self: "user_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "Follow":         {Self: "user_id", Scopes: []string{ScopeGraphWrite}},
	graphSvc + "Unfollow":       {Self: "user_id", Scopes: []string{ScopeGraphWrite}},

	boardSvc + "ListPins":   {AnyCaller: true},
	boardSvc + "AddPin":     {Owner: "board_id", Scopes: []string{ScopeGraphWrite}},
	boardSvc + "RemovePin":  {Owner: "board_id", Scopes: []string{ScopeGraphWrite}},
	boardSvc + "ReorderPin": {Owner: "board_id", Scopes: []string{ScopeGraphWrite}},

	ingestSvc + "Publish": {Scopes: []string{ScopeIngest}},
	// A user reports their own engagement; a frontend service reports for its users.
	engSvc + "Report": {Self: "user_id", Scopes: []string{ScopeIngest}},

	genSvc + "GenerateChunk": {Scopes: []string{ScopeGenerator}},
	genSvc + "SettleChunk":   {Scopes: []string{ScopeGenerator}},
	genSvc + "PendingChunks": {Scopes: []string{ScopeGenerator}},
	genSvc + "InFlightUsers": {Scopes: []string{ScopeGenerator}},
	// CheckPins answers for any user whether a removal took their pins: the feed role's call.
	genSvc + "CheckPins": {Scopes: []string{ScopeGenerator}},
	// PreviewChunk takes nothing and tells a user what their next chunk would be and why.
	genSvc + "PreviewChunk": {Self: "user", Scopes: []string{ScopeFeedRead, ScopeGenerator}},
}

// Owners tells who owns an object (a board's owner). ErrNotFound lets the call through: the
// service answers NotFound itself.
type Owners interface {
	Owner(ctx context.Context, id zen.ID) (zen.ID, error)
}

type ctxKey struct{}

// FromContext returns the principal of an authorized call.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// Authorizer is the interceptor of the public gRPC port: it verifies the bearer token and checks
// the method's Rule.
type Authorizer struct {
	v      *Verifier
	owners Owners
	policy map[string]Rule
	log    *zap.Logger
	denied *prometheus.CounterVec
}

// NewAuthorizer returns the interceptor over v and Policy. owners may be nil when no method
// with an Owner rule is served. log and reg may be nil.
func NewAuthorizer(v *Verifier, owners Owners, log *zap.Logger, reg prometheus.Registerer) (*Authorizer, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f := promauto.With(reg)
	a := &Authorizer{v: v, owners: owners, policy: Policy, log: log,
		denied: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_auth_denied_total",
			Help: "Calls refused by authentication or authorization, by method and code."}, []string{"method", "code"})}
	return a, nil
}

// Unary is the unary server interceptor.
func (a *Authorizer) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		m, _ := req.(proto.Message)
		ctx, err := a.authorize(ctx, info.FullMethod, m)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// Stream is the stream server interceptor: only Public streams (health, reflection) exist.
func (a *Authorizer) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if r, ok := a.policy[info.FullMethod]; ok && r.Public {
			return h(srv, ss)
		}
		return a.deny(info.FullMethod, "", codes.PermissionDenied, "stream %s is not open to callers", info.FullMethod)
	}
}

func (a *Authorizer) deny(method, who string, c codes.Code, format string, args ...any) error {
	a.denied.WithLabelValues(method, c.String()).Inc()
	msg := fmt.Sprintf(format, args...)
	a.log.Info("call refused", zap.String("method", method), zap.String("subject", who), zap.String("code", c.String()), zap.String("why", msg))
	return status.Error(c, msg)
}

// authorize checks one call.
func (a *Authorizer) authorize(ctx context.Context, method string, req proto.Message) (context.Context, error) {
	r, ok := a.policy[method]
	if !ok {
		return ctx, a.deny(method, "", codes.PermissionDenied, "method %s has no access rule: refused", method)
	}
	if r.Public {
		return ctx, nil
	}
	p, err := a.v.Verify(bearer(ctx))
	if err != nil {
		return ctx, a.deny(method, "", codes.Unauthenticated, "%v", err)
	}
	ctx = context.WithValue(ctx, ctxKey{}, p)
	// Scopes grant service powers to services only. A user's token may carry scopes (identity
	// providers put them in user tokens too); a user still acts only as themself, under the
	// Self and Owner clauses.
	if r.AnyCaller || (p.User == 0 && p.Has(r.Scopes...)) {
		return ctx, nil
	}
	if p.User != 0 && req != nil {
		if r.Self != "" {
			if id, ok := idField(req, r.Self); ok && id == p.User {
				return ctx, nil
			}
			return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "%s must be the token's user %d", r.Self, p.User)
		}
		if r.Owner != "" {
			id, ok := idField(req, r.Owner)
			if !ok {
				return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "%s missing: the token's user must own it", r.Owner)
			}
			if a.owners == nil {
				return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "ownership of %s cannot be checked here", r.Owner)
			}
			owner, err := a.owners.Owner(ctx, id)
			if errors.Is(err, zen.ErrNotFound) {
				return ctx, nil // the service answers NotFound
			}
			if err != nil {
				return ctx, status.Errorf(codes.Unavailable, "check the owner of %s: %v", r.Owner, err)
			}
			if owner == p.User {
				return ctx, nil
			}
			return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "%s %d is not owned by the token's user %d", r.Owner, id, p.User)
		}
	}
	if len(r.Scopes) > 0 {
		if p.User != 0 {
			return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "needs a service token with scope %s; a user token's scopes grant nothing beyond the user's own calls", strings.Join(r.Scopes, " or "))
		}
		return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "needs a token of the user it acts for, or scope %s", strings.Join(r.Scopes, " or "))
	}
	return ctx, a.deny(method, p.Subject, codes.PermissionDenied, "not allowed")
}

// bearer returns the bearer token of the call's "authorization" metadata ("" when none).
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		if tok, ok := strings.CutPrefix(v, "bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// idField reads the ID in field name of m, or in its "_str" twin.
func idField(m proto.Message, name string) (zen.ID, bool) {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	if f := fields.ByName(protoreflect.Name(name)); f != nil && (f.Kind() == protoreflect.Fixed64Kind || f.Kind() == protoreflect.Uint64Kind) && f.Cardinality() != protoreflect.Repeated {
		if v := r.Get(f).Uint(); v != 0 {
			return zen.ID(v), true
		}
	}
	if f := fields.ByName(protoreflect.Name(name + "_str")); f != nil && f.Kind() == protoreflect.StringKind && f.Cardinality() != protoreflect.Repeated {
		if s := r.Get(f).String(); s != "" {
			if id, err := zen.ParseID(s); err == nil {
				return id, true
			}
		}
	}
	return 0, false
}

// AdminToken is the interceptor of the admin gRPC port: every call must carry the admin
// credential (a static bearer token kept in a file). An empty token refuses every call.
func AdminToken(token string, log *zap.Logger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if log == nil {
		log = zap.NewNop()
	}
	check := func(ctx context.Context, method string) error {
		got := bearer(ctx)
		if token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			log.Warn("admin call refused", zap.String("method", method))
			return status.Error(codes.Unauthenticated, "admin: missing or wrong admin credential")
		}
		return nil
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}
}
