package auth

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
)

// TestRateLimit against a real Redis: a user gets its burst, then RESOURCE_EXHAUSTED with a
// retry delay; another user is not affected; a second replica (another limiter on the same
// Redis) sees the same count; producers have their own limit; services and health are not
// limited; a Redis that does not answer lets calls through.
func TestRateLimit(t *testing.T) {
	addr, prefix := testenv.RedisKeyPrefix(t, "rltest")
	prefix += ":"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	lim := Limits{User: Limit{PerSecond: 1, Burst: 5}, Producer: Limit{PerSecond: 1, Burst: 2}}
	r1, err := NewRateLimiter(rdb, prefix, lim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := NewRateLimiter(rdb, prefix, lim, nil, nil)
	alice, bob := userID(t, 1), userID(t, 2)
	call := func(r *RateLimiter, method string, p *Principal) error {
		ctx := context.Background()
		if p != nil {
			ctx = context.WithValue(ctx, ctxKey{}, *p)
		}
		_, err := r.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return "ok", nil })
		return err
	}
	user := func(id zen.ID) *Principal { return &Principal{Subject: UserSubject(id), User: id} }
	for i := range 5 {
		r := r1
		if i%2 == 1 {
			r = r2 // the replicas share the count
		}
		if err := call(r, feedSvc+"GetFeed", user(alice)); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	err = call(r1, feedSvc+"GetFeed", user(alice))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("call past the burst: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > time.Second {
		t.Errorf("retry info %v, want a delay in (0, 1s]", retry)
	}
	if err := call(r2, feedSvc+"GetFeed", user(bob)); err != nil {
		t.Errorf("another user: %v", err)
	}
	prod := &Principal{Subject: "producer-a", Scopes: map[string]bool{ScopeIngest: true}}
	for i := range 2 {
		if err := call(r1, ingestSvc+"Publish", prod); err != nil {
			t.Fatalf("producer call %d: %v", i, err)
		}
	}
	if err := call(r1, ingestSvc+"Publish", prod); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("producer past its burst: %v", err)
	}
	svc := &Principal{Subject: "feedsvc", Scopes: map[string]bool{ScopeGenerator: true}}
	for range 20 {
		if err := call(r1, genSvc+"GenerateChunk", svc); err != nil {
			t.Fatalf("a service was limited: %v", err)
		}
	}
	if err := call(r1, "/grpc.health.v1.Health/Check", nil); err != nil {
		t.Errorf("health limited: %v", err)
	}
	// Redis gone: fail open.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	r3, _ := NewRateLimiter(dead, prefix, lim, nil, nil)
	for range 10 {
		if err := call(r3, feedSvc+"GetFeed", user(alice)); err != nil {
			t.Fatalf("with Redis down: %v, want the call through", err)
		}
	}
}
