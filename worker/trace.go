package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/smartfeed/smartfeed/zen"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/smartfeed/smartfeed/worker"

// startPoolInsert starts the span of a pool write of es, "worker pool insert", when ctx carries
// a recording span (the task's run); otherwise it returns ctx and a nil span, having done one
// context lookup.
func startPoolInsert(ctx context.Context, es []zen.PoolEntry) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	users := map[zen.ID]bool{}
	for _, e := range es {
		users[e.User] = true
	}
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, "worker pool insert",
		trace.WithAttributes(attribute.Int("worker.entries", len(es)), attribute.Int("worker.receivers", len(users))))
}

// endPoolInsert ends the span of startPoolInsert (nil: none) with the rows written.
func endPoolInsert(span trace.Span, inserted int, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("worker.inserted", inserted))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
