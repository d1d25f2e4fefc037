package zenroute_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// TestBackendSpans: the routed table makes no span of its own, so a call through it is one zen
// span per call it makes to a store, each under the caller's span: a Get is one, a write or a
// scan across both stores one per store.
func TestBackendSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	backs := map[string]zen.Store{}
	for _, name := range []string{"default", "other"} {
		st, err := zenpebble.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		backs[name] = st
	}
	s, err := zenroute.New(backs, splitMap(t), zenroute.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := s.Table(t.Context(), zen.TableObjects)
	if err != nil {
		t.Fatal(err)
	}
	// Shard 1 is on "default", shard 2 on "other".
	a, b := idKey(1, 1), idKey(2, 1)
	shard3, _ := zen.ShardKeyRange(3, 3)
	calls := []struct {
		name string
		do   func(context.Context) error
		want []string // the zen spans under the call's span, in the order they end
	}{
		{"Apply", func(ctx context.Context) error {
			return tb.Apply(ctx, []zen.Mutation{{Key: a, Value: []byte("a")}, {Key: b, Value: []byte("b")}})
		}, []string{"zen Apply", "zen Apply"}},
		{"Get", func(ctx context.Context) error { _, err := tb.Get(ctx, b); return err }, []string{"zen Get"}},
		{"Scan", func(ctx context.Context) error {
			_, err := tb.Scan(ctx, zen.ScanOptions{Start: idKey(1, 0), Stop: shard3}) // shards 1 and 2
			return err
		}, []string{"zen Scan", "zen Scan"}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			exp.Reset()
			ctx, req := tp.Tracer("test").Start(t.Context(), "request")
			if err := c.do(ctx); err != nil {
				t.Fatal(err)
			}
			req.End()
			var got []string
			for _, sp := range exp.GetSpans().Snapshots() {
				if sp.Name() == "request" {
					continue
				}
				if sp.Parent().SpanID() != req.SpanContext().SpanID() {
					t.Errorf("span %q is not a child of the call's span", sp.Name())
				}
				got = append(got, sp.Name())
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("spans (-want +got):\n%s", d)
			}
		})
	}
}
