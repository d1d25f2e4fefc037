package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/smartfeed/smartfeed/internal/ratelimit"
)

// Limit is a rate: PerSecond calls on average, Burst at once. A zero PerSecond is no limit.
type Limit struct {
	PerSecond float64
	Burst     int
}

// Limits are the rate limits of the public methods, per caller: a user (a user's token) and a
// producer (a token with ScopeIngest). Other services (the roles, frontends' backends) and
// calls on a port without authentication are not limited here.
type Limits struct {
	User     Limit
	Producer Limit
}

// RateLimiter limits calls per caller with internal/ratelimit's limits in Redis, so every
// replica of a role shares them. When Redis does not answer, calls go through (availability first) and the
// failure is counted.
type RateLimiter struct {
	rdb    redis.UniversalClient
	prefix string
	l      Limits
	log    *zap.Logger

	limited *prometheus.CounterVec
	errors  prometheus.Counter
}

// NewRateLimiter returns a limiter keeping its counters under prefix in rdb.
func NewRateLimiter(rdb redis.UniversalClient, prefix string, l Limits, log *zap.Logger, reg prometheus.Registerer) (*RateLimiter, error) {
	if log == nil {
		log = zap.NewNop()
	}
	for _, x := range []Limit{l.User, l.Producer} {
		if x.PerSecond < 0 || x.Burst < 0 || (x.PerSecond > 0 && x.Burst < 1) {
			return nil, fmt.Errorf("rate limit %+v: want a rate >= 0 and, with a rate, a burst >= 1", x)
		}
	}
	f := promauto.With(reg)
	r := &RateLimiter{rdb: rdb, prefix: prefix, l: l, log: log,
		limited: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_rate_limited_total",
			Help: "Calls refused by the per-caller rate limit, by caller class."}, []string{"class"}),
		errors: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_rate_limit_errors_total",
			Help: "Rate limit checks that failed (Redis); those calls went through."})}
	return r, nil
}

// Allow takes one call of key under limit, returning how long to wait when it is refused.
func (r *RateLimiter) Allow(ctx context.Context, key string, l Limit) (bool, time.Duration, error) {
	if l.PerSecond <= 0 {
		return true, 0, nil
	}
	res, err := ratelimit.Take(ctx, r.rdb, ratelimit.Request{Key: r.prefix + key,
		Rate: ratelimit.Rate{PerSecond: l.PerSecond, Burst: float64(l.Burst)}})
	if err != nil {
		return true, 0, err
	}
	if res.Outcome != ratelimit.Allowed {
		return false, res.Wait, nil
	}
	return true, 0, nil
}

// Unary is the interceptor; it goes after the Authorizer (it reads the principal) and leaves
// health and reflection alone.
func (r *RateLimiter) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if rule, ok := Policy[info.FullMethod]; ok && rule.Public {
			return h(ctx, req)
		}
		class, key, l := r.classify(ctx)
		if l.PerSecond <= 0 {
			return h(ctx, req)
		}
		ok, wait, err := r.Allow(ctx, key, l)
		if err != nil {
			r.errors.Inc()
			r.log.Debug("rate limit check failed; letting the call through", zap.Error(err))
			return h(ctx, req)
		}
		if !ok {
			r.limited.WithLabelValues(class).Inc()
			st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit of %s callers (%.0f/s, burst %d): retry in %v", class, l.PerSecond, l.Burst, wait))
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); derr == nil {
				st = d
			}
			return nil, st.Err()
		}
		return h(ctx, req)
	}
}

// classify names the caller's class, its counter key and its limit.
func (r *RateLimiter) classify(ctx context.Context) (string, string, Limit) {
	if p, ok := FromContext(ctx); ok {
		switch {
		case p.User != 0:
			return "user", "u:" + p.User.String(), r.l.User
		case p.Has(ScopeIngest):
			return "producer", "p:" + p.Subject, r.l.Producer
		}
		return "service", "", Limit{}
	}
	// No authentication on this port (loopback or --insecure): no caller to count.
	return "anonymous", "", Limit{}
}
