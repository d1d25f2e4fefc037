package pinlater

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing. A task carries the W3C trace context (traceparent, tracestate) of the span that
// enqueued it in its task headers, and in its outbox row for a relayed enqueue. A client with a
// tracer provider records a producer span per enqueue; a server with one records a consumer span
// per run, a child of the enqueuing span, so that the runs of a task (retries, another process,
// a relay after a Redis outage) and the tasks it enqueues in turn sit in the trace of the call
// that caused them. Without a tracer provider nothing is recorded, and the headers are written
// only when the enqueuing context already carries a span.

// tracerName is the instrumentation scope of pinlater's spans.
const tracerName = "github.com/smartfeed/smartfeed/pinlater"

// WithTracerProvider makes the client record a producer span per enqueue, through tp (nil: none).
func WithTracerProvider(tp trace.TracerProvider) ClientOption {
	return func(o *clientOptions) { o.tp = tp }
}

// tracerOf is tp's tracer of pinlater's spans, nil for a nil tp.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// traceHeaders returns the trace context of ctx's span as headers, nil when ctx carries none.
func traceHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := make(map[string]string, 2)
	propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(h))
	return h
}

// injectTrace adds the trace context of ctx's span to a task's headers (nothing when ctx
// carries none).
func injectTrace(ctx context.Context, headers map[string]string) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.MapCarrier(headers))
	}
}

// withTraceOf returns ctx carrying the remote span context of headers (as written by
// traceHeaders or injectTrace), or ctx itself when they hold none.
func withTraceOf(ctx context.Context, headers map[string]string) context.Context {
	if headers[traceparentHeader] == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
}

// traceparentHeader is the W3C header that holds a span context.
const traceparentHeader = "traceparent"

// tracedEnqueue runs enqueue, the enqueue of t, inside a producer span; the task's headers then
// carry that span's context.
func (c *Client) tracedEnqueue(ctx context.Context, t *Task, enqueue func(context.Context) (*Info, error)) (*Info, error) {
	ctx, span := c.tracer.Start(ctx, "pinlater enqueue "+t.typ, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "pinlater"), attribute.String("pinlater.task.type", t.typ)))
	info, err := enqueue(ctx)
	if info != nil {
		span.SetAttributes(attribute.String("messaging.destination.name", info.Queue),
			attribute.String("messaging.message.id", info.ID), attribute.Bool("pinlater.duplicate", info.Duplicate))
	}
	endSpan(span, err)
	return info, err
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traced runs process for one task inside a consumer span, a child of the span that enqueued
// it (s.tracer must be set).
func (s *Server) traced(ctx context.Context, at *asynq.Task, process func(context.Context) error) error {
	phys, _ := asynq.GetQueueName(ctx)
	q, ok := s.keys.logical(phys)
	if !ok {
		q = phys
	}
	id, _ := asynq.GetTaskID(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	ctx, span := s.tracer.Start(withTraceOf(ctx, at.Headers()), "pinlater process "+at.Type(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "pinlater"), attribute.String("messaging.destination.name", q),
			attribute.String("pinlater.task.type", at.Type()), attribute.String("messaging.message.id", id),
			attribute.Int("pinlater.attempt", retried+1)))
	err := process(ctx)
	if d := (*deferError)(nil); errors.As(err, &d) {
		// Put off by the rate limit: not a failure, the task runs again later.
		span.AddEvent("deferred", trace.WithAttributes(attribute.String("reason", d.why)))
		span.End()
		return err
	}
	endSpan(span, err)
	return err
}
