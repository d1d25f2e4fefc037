package zencache

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// TestBackendSpans: the cache makes no zen span of its own, so a call through it is the spans of
// the store calls it makes, each under the caller's span: a write is one, a read that misses is
// one, a read the cache answers is none.
func TestBackendSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	st, err := zenpebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	_, prefix := testenv.RedisKeyPrefix(t, "zctrace")
	c, err := Wrap(st, newRedis(t), Options{Prefix: prefix + ":"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := c.Table(t.Context(), zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.(*Table); !ok {
		t.Fatalf("table %s is not cached", zen.TableObjects)
	}
	k := key(1, 0, 1)
	get := func(ctx context.Context) error { _, err := tb.Get(ctx, k); return err }
	calls := []struct {
		name string
		do   func(context.Context) error
		want []string // the zen spans under the call's span
	}{
		{"Apply", func(ctx context.Context) error { return tb.Apply(ctx, []zen.Mutation{{Key: k, Value: []byte("v")}}) }, []string{"zen Apply"}},
		{"Get/miss", get, []string{"zen GetMany"}}, // the cache reads its misses with GetMany
		{"Get/hit", get, nil},
	}
	for _, c := range calls {
		exp.Reset()
		ctx, req := tp.Tracer("test").Start(t.Context(), "request")
		if err := c.do(ctx); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		req.End()
		var got []string
		for _, sp := range exp.GetSpans().Snapshots() {
			if sp.Name() == "request" {
				continue
			}
			if sp.Parent().SpanID() != req.SpanContext().SpanID() {
				t.Errorf("%s: span %q is not a child of the call's span", c.name, sp.Name())
			}
			got = append(got, sp.Name())
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%s: spans (-want +got):\n%s", c.name, d)
		}
	}
}
