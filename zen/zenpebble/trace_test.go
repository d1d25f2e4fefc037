package zenpebble

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/smartfeed/smartfeed/zen"
)

// TestTableSpans: every table call made under a recording span is one span under it, named
// after the call, with the backend and the table (and the rows of a call of many); a call
// failing is an error span, a row not found is not; without a recording span no span is made.
func TestTableSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := openStore(t, "")
	tb := openTable(t, s, "feed")
	k := func(s string) []byte { return []byte(s) }

	type call struct {
		name string
		do   func(context.Context) error
		rows int64 // the zen.rows attribute; -1: none
	}
	calls := []call{
		{"Apply", func(ctx context.Context) error {
			return tb.Apply(ctx, []zen.Mutation{{Key: k("a"), Value: k("1")}, {Key: k("b"), Value: k("2")}})
		}, 2},
		{"Get", func(ctx context.Context) error { _, err := tb.Get(ctx, k("a")); return err }, -1},
		{"Scan", func(ctx context.Context) error { _, err := tb.Scan(ctx, zen.ScanOptions{}); return err }, 2},
		{"CheckAndSet", func(ctx context.Context) error { _, err := tb.CheckAndSet(ctx, k("c"), nil, k("3")); return err }, -1},
		{"Increment", func(ctx context.Context) error { _, err := tb.Increment(ctx, k("n"), 1); return err }, -1},
		{"GetMany", func(ctx context.Context) error {
			_, err := tb.(zen.MultiGetter).GetMany(ctx, [][]byte{k("a"), k("b"), k("z")})
			return err
		}, 3},
		{"CheckAndSetMany", func(ctx context.Context) error {
			_, err := tb.(zen.CondBatcher).CheckAndSetMany(ctx, []zen.Cond{{Key: k("d"), Value: k("4")}})
			return err
		}, 1},
		{"CheckAndSetWith", func(ctx context.Context) error {
			_, err := tb.(zen.Carrier).CheckAndSetWith(ctx, k("e"), nil, k("5"), []zen.Mutation{{Key: k("f"), Value: k("6")}})
			return err
		}, 2},
		{"IncrementWith", func(ctx context.Context) error {
			_, err := tb.(zen.Carrier).IncrementWith(ctx, k("n"), 1, []zen.Mutation{{Key: k("g"), Value: k("7")}})
			return err
		}, 2},
	}
	type got struct {
		Name   string
		Attrs  map[attribute.Key]string
		Status codes.Code
		Child  bool // a child of the request's span, in its trace
	}
	span := func(s sdktrace.ReadOnlySpan, parent trace.SpanContext) got {
		g := got{Name: s.Name(), Attrs: map[attribute.Key]string{}, Status: s.Status().Code,
			Child: s.Parent().SpanID() == parent.SpanID() && s.SpanContext().TraceID() == parent.TraceID()}
		for _, a := range s.Attributes() {
			g.Attrs[a.Key] = a.Value.String()
		}
		return g
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			exp.Reset()
			ctx, req := tp.Tracer("test").Start(context.Background(), "request")
			if err := c.do(ctx); err != nil {
				t.Fatal(err)
			}
			req.End()
			want := []got{{Name: "zen " + c.name, Attrs: map[attribute.Key]string{"zen.backend": "pebble", "zen.table": "feed"}, Child: true}}
			if c.rows >= 0 {
				want[0].Attrs["zen.rows"] = attribute.Int64Value(c.rows).String()
			}
			var spans []got
			for _, s := range exp.GetSpans().Snapshots() {
				if s.Name() != "request" {
					spans = append(spans, span(s, req.SpanContext()))
				}
			}
			if d := cmp.Diff(want, spans); d != "" {
				t.Errorf("spans (-want +got):\n%s", d)
			}

			exp.Reset()
			if err := c.do(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(exp.GetSpans()); n != 0 {
				t.Errorf("%d spans without a span in the context, want none", n)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		exp.Reset()
		ctx, req := tp.Tracer("test").Start(context.Background(), "request")
		if _, err := tb.Get(ctx, k("absent")); err != zen.ErrNotFound {
			t.Fatalf("Get(absent) = %v, want ErrNotFound", err)
		}
		if _, err := tb.Get(ctx, nil); err == nil {
			t.Fatal("Get(empty key) = nil error")
		}
		req.End()
		var status []codes.Code
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "zen Get" {
				status = append(status, s.Status().Code)
			}
		}
		if d := cmp.Diff([]codes.Code{codes.Unset, codes.Error}, status); d != "" {
			t.Errorf("Get spans' status, not found then a bad key (-want +got):\n%s", d)
		}
	})
}

// TestTableUntracedAllocs: with tracing off (no span in the context) or a no-op tracer
// provider's span in it, a traced method allocates exactly what its untraced work does.
func TestTableUntracedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under -race")
	}
	s := openStore(t, "")
	tb := openTable(t, s, "feed").(*Table)
	key, muts := []byte("k"), []zen.Mutation{{Key: []byte("m"), Value: []byte("v")}}
	if err := tb.Apply(context.Background(), []zen.Mutation{{Key: key, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	noopCtx, sp := noop.NewTracerProvider().Tracer("test").Start(context.Background(), "request")
	defer sp.End()
	for _, ctx := range []context.Context{context.Background(), noopCtx} {
		pairs := []struct {
			name             string
			traced, untraced func()
		}{
			{"Get", func() { _, _ = tb.Get(ctx, key) }, func() { _, _ = tb.getRow(ctx, key) }},
			{"Scan", func() { _, _ = tb.Scan(ctx, zen.ScanOptions{}) }, func() { _, _ = tb.scan(ctx, zen.ScanOptions{}) }},
			{"Apply", func() { _ = tb.Apply(ctx, muts) }, func() { _ = tb.apply(ctx, muts) }},
		}
		for _, p := range pairs {
			traced, untraced := testing.AllocsPerRun(200, p.traced), testing.AllocsPerRun(200, p.untraced)
			if traced != untraced {
				t.Errorf("%s under %T's span: %.1f allocations, untraced %.1f", p.name, trace.SpanFromContext(ctx), traced, untraced)
			}
		}
	}
}
