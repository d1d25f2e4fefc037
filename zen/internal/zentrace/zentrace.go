// Package zentrace makes the spans of the zen backends' table calls: "zen <method>", a child of
// the context's span when that span records, made through that span's tracer provider (the
// process sets no global one), with the backend (zen.backend), the zen table (zen.table) and, for
// the calls of many rows, their number (zen.rows). Without a recording span (tracing off, or a
// no-op provider's span) Start does one context lookup and allocates nothing, and End does
// nothing. A row that is not there (zen.ErrNotFound) is an answer, not an error status.
package zentrace

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/smartfeed/smartfeed/zen"
)

// Backend starts the spans of one backend's table calls.
type Backend struct {
	scope string             // the instrumentation scope: the backend's import path
	attr  attribute.KeyValue // zen.backend
}

// NewBackend returns the span maker of the backend name ("pebble", "hbase"), whose spans carry
// the instrumentation scope scope (the backend package's import path).
func NewBackend(scope, name string) Backend {
	return Backend{scope: scope, attr: attribute.String("zen.backend", name)}
}

// Start starts the span of one call of method on table, "zen " + method, under ctx's span when
// it records; otherwise it returns ctx and a nil span.
func (b Backend) Start(ctx context.Context, table, method string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	return parent.TracerProvider().Tracer(b.scope).Start(ctx, "zen "+method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(b.attr, attribute.String("zen.table", table)))
}

// End ends sp (nil: none) with the call's rows (negative: not reported) and error.
func End(sp trace.Span, rows int, err error) {
	if sp == nil {
		return
	}
	if rows >= 0 {
		sp.SetAttributes(attribute.Int("zen.rows", rows))
	}
	if err != nil && !errors.Is(err, zen.ErrNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}
