package generator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestStageSpans: a chunk generated under a recording span has a span per stage under it, in
// order; without one, no span is made.
func TestStageSpans(t *testing.T) {
	e := newEnv(t, backends[0].make, nil)
	e.fill(t, 40)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	ctx, parent := tp.Tracer("test").Start(context.Background(), "GenerateChunk")
	c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
	parent.End()
	if err != nil || len(c.Items) == 0 {
		t.Fatalf("chunk %+v, %v; want pins", c, err)
	}
	spans := exp.GetSpans()
	var got []string
	for _, s := range spans {
		if s.Name == "GenerateChunk" {
			continue
		}
		if s.Parent.SpanID() != parent.SpanContext().SpanID() || s.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %s: parent %v, want the call's span %v", s.Name, s.Parent.SpanID(), parent.SpanContext().SpanID())
		}
		got = append(got, s.Name)
	}
	// One state read, rounds of read, claim and take (without Liveness no live stage), one
	// ready record.
	var round []string
	for i, s := range got {
		if i == 0 || i == len(got)-1 || s != got[i-1] && !slices.Contains(round, s) {
			round = append(round, s)
		}
	}
	want := []string{"generator state", "generator read", "generator claim", "generator take", "generator record"}
	if d := cmp.Diff(want, round); d != "" {
		t.Errorf("stage spans %v, distinct in order (-want +got):\n%s", got, d)
	}

	exp.Reset()
	e.clk.Advance(time.Hour)
	if _, err := e.gen.GenerateChunk(context.Background(), e.user, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans without a span in the context, want none", n)
	}
}
