package hedge

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracedSpans: under a recording span, a hedged read is a "hedge read" span saying which
// store won and why the standby was asked, with a span per store read, the loser's marked
// cancelled; without one, no span is made.
func TestTracedSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := newHedger(t, func(p *Policy) { p.Mode = ModeFixed; p.Delay = 5 * time.Millisecond })
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()

		if _, _, err := Traced(t.Context(), h, answer("p", 0, nil), answer("s", 0, nil)); err != nil {
			t.Fatal(err)
		}
		if n := len(exp.GetSpans()); n != 0 {
			t.Fatalf("%d spans without a span in the context, want none", n)
		}

		ctx, parent := tp.Tracer("test").Start(t.Context(), "GetFeed")
		got, _, err := Traced(ctx, h, answer("p", 5*time.Second, nil), answer("s", 0, nil))
		parent.End()
		if err != nil || got != "s" {
			t.Fatalf("Traced = %q, %v; want s", got, err)
		}
		attrs := map[string]map[string]string{}
		for _, s := range exp.GetSpans() {
			m := map[string]string{}
			for _, a := range s.Attributes {
				m[string(a.Key)] = a.Value.String()
			}
			attrs[s.Name] = m
		}
		want := map[string]map[string]string{
			"GetFeed": {},
			"hedge read": {"hedge.from": "standby", "hedge.hedged": "true", "hedge.reason": "cutoff",
				"hedge.failover": "false", "hedge.budget_exhausted": "false"},
			"hedge read primary": {"hedge.cancelled": "true"},
			"hedge read standby": {},
		}
		if d := cmp.Diff(want, attrs); d != "" {
			t.Errorf("spans and their attributes (-want +got):\n%s", d)
		}
	})
}
