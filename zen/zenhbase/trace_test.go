package zenhbase

import (
	"context"
	"fmt"
	"strings"
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
// after the call, with the backend "hbase", the zen table (and the rows of a call of many), and
// gohbase's spans of the call's RPCs under it, none beside it; a call failing is an error span,
// a row not found is not; without a recording span no span at all is made.
func TestTableSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := openStore(t, Options{})
	tb := freshTable(t, s)
	name := strings.TrimPrefix(string(tb.(*Table).name), s.opts.TablePrefix)
	k := func(s string) []byte { return []byte(s) }
	many := make([][]byte, batchFrom) // enough keys for one SendBatch
	for i := range many {
		many[i] = k(fmt.Sprintf("m%d", i))
	}

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
		{"GetMany/batch", func(ctx context.Context) error {
			_, err := tb.(zen.MultiGetter).GetMany(ctx, many)
			return err
		}, int64(len(many))},
		{"ScanMany", func(ctx context.Context) error {
			_, err := tb.(zen.MultiScanner).ScanMany(ctx, []zen.ScanOptions{{Stop: k("b")}, {Start: k("b"), Stop: k("c")}, {Start: k("x")}})
			return err
		}, 2},
		{"CheckAndSetMany", func(ctx context.Context) error {
			_, err := tb.(zen.CondBatcher).CheckAndSetMany(ctx, []zen.Cond{{Key: k("d"), Value: k("4")}})
			return err
		}, 1},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			method, _, _ := strings.Cut(c.name, "/")
			exp.Reset()
			ctx, req := tp.Tracer("test").Start(t.Context(), "request")
			if err := c.do(ctx); err != nil {
				t.Fatal(err)
			}
			req.End()
			want := []span{{Name: "zen " + method, Attrs: map[attribute.Key]string{"zen.backend": "hbase", "zen.table": name}, Parent: "request"}}
			if c.rows >= 0 {
				want[0].Attrs["zen.rows"] = attribute.Int64Value(c.rows).String()
			}
			zenSpans, rpcs := splitSpans(exp.GetSpans().Snapshots())
			if d := cmp.Diff(want, zenSpans); d != "" {
				t.Errorf("zen spans (-want +got):\n%s", d)
			}
			t.Logf("under zen %s: %v", method, rpcs)
			if len(rpcs) == 0 {
				t.Error("no gohbase span under the zen span")
			}
			for _, r := range rpcs {
				if r.Parent != "zen "+method {
					t.Errorf("gohbase span %q under %q, want under %q", r.Name, r.Parent, "zen "+method)
				}
			}

			exp.Reset()
			if err := c.do(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := len(exp.GetSpans()); n != 0 {
				t.Errorf("%d spans without a span in the context, want none", n)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		exp.Reset()
		ctx, req := tp.Tracer("test").Start(t.Context(), "request")
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

// span is what TestTableSpans checks of an exported span.
type span struct {
	Name   string
	Attrs  map[attribute.Key]string
	Parent string // the name of the span's parent, the first zen or request span above it
}

// splitSpans returns the zen spans (with their attributes) and the other spans under the test's
// "request" (gohbase's, with the name of the zen or request span they sit under).
func splitSpans(spans []sdktrace.ReadOnlySpan) (zenSpans, others []span) {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	// above returns the name of the first zen or request span above s ("" when none is).
	above := func(s sdktrace.ReadOnlySpan) string {
		for p, ok := byID[s.Parent().SpanID()]; ok; p, ok = byID[p.Parent().SpanID()] {
			if p.Name() == "request" || strings.HasPrefix(p.Name(), "zen ") {
				return p.Name()
			}
		}
		return ""
	}
	for _, s := range spans {
		switch {
		case s.Name() == "request":
		case strings.HasPrefix(s.Name(), "zen "):
			g := span{Name: s.Name(), Attrs: map[attribute.Key]string{}, Parent: above(s)}
			for _, a := range s.Attributes() {
				g.Attrs[a.Key] = a.Value.String()
			}
			zenSpans = append(zenSpans, g)
		default:
			others = append(others, span{Name: s.Name(), Parent: above(s)})
		}
	}
	return zenSpans, others
}

// TestTableUntracedAllocs: with tracing off (no span in the context) or a no-op tracer
// provider's span in it, a traced method allocates exactly what its untraced work does. Get and
// Apply are measured on real calls; every method is measured on a call its work answers
// without the network (a bad key, an empty range), whose allocations do not vary: a scan's
// network allocations vary by one with the timing of gohbase's receive loop, which would hide
// the one allocation of a wrapper that, say, put a value in the context.
func TestTableUntracedAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts vary under -race")
	}
	s := openStore(t, Options{})
	tb := freshTable(t, s).(*Table)
	key, muts := []byte("k"), []zen.Mutation{{Key: []byte("m"), Value: []byte("v")}}
	if err := tb.Apply(t.Context(), []zen.Mutation{{Key: key, Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	bad := []byte(nil)
	empty := zen.ScanOptions{Start: []byte("l"), Stop: []byte("k")}
	noopCtx, sp := noop.NewTracerProvider().Tracer("test").Start(t.Context(), "request")
	defer sp.End()
	for _, ctx := range []context.Context{t.Context(), noopCtx} {
		pairs := []struct {
			name             string
			traced, untraced func()
		}{
			{"Get", func() { _, _ = tb.Get(ctx, key) }, func() { _, _ = tb.getKey(ctx, key) }},
			{"Apply", func() { _ = tb.Apply(ctx, muts) }, func() { _ = tb.apply(ctx, muts) }},
			{"Get/bad", func() { _, _ = tb.Get(ctx, bad) }, func() { _, _ = tb.getKey(ctx, bad) }},
			{"Apply/bad", func() { _ = tb.Apply(ctx, []zen.Mutation{{}}) }, func() { _ = tb.apply(ctx, []zen.Mutation{{}}) }},
			{"Scan/empty", func() { _, _ = tb.Scan(ctx, empty) }, func() { _, _ = tb.scan(ctx, empty) }},
			{"CheckAndSet/bad", func() { _, _ = tb.CheckAndSet(ctx, bad, nil, key) }, func() { _, _ = tb.checkAndSetKey(ctx, bad, nil, key) }},
			{"Increment/bad", func() { _, _ = tb.Increment(ctx, bad, 1) }, func() { _, _ = tb.incrementKey(ctx, bad, 1) }},
			{"GetMany/bad", func() { _, _ = tb.GetMany(ctx, [][]byte{bad}) }, func() { _, _ = tb.getMany(ctx, [][]byte{bad}) }},
			{"ScanMany/empty", func() { _, _ = tb.ScanMany(ctx, []zen.ScanOptions{empty}) }, func() { _, _ = tb.scanMany(ctx, []zen.ScanOptions{empty}) }},
			{"CheckAndSetMany/bad", func() { _, _ = tb.CheckAndSetMany(ctx, []zen.Cond{{}}) }, func() { _, _ = tb.checkAndSetMany(ctx, []zen.Cond{{}}) }},
		}
		for _, p := range pairs {
			if traced, untraced := testing.AllocsPerRun(50, p.traced), testing.AllocsPerRun(50, p.untraced); traced != untraced {
				t.Errorf("%s under %T's span: %.0f allocations, untraced %.0f", p.name, trace.SpanFromContext(ctx), traced, untraced)
			}
		}
	}
}
