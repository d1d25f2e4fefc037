package generator

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the generator's spans.
const tracerName = "github.com/smartfeed/smartfeed/generator"

// since ends the run's current stage, begun at r.t: it observes the stage's time in
// smartfeed_generator_stage_seconds and returns now, the next stage's start. When ctx carries a
// recording span (the GenerateChunk call's, or the feed request's in one process), the stage is
// also a span under it, "generator <stage>", with the pins won so far; with tracing off that is
// one context lookup and nothing else.
func (r *chunkRun) since(ctx context.Context, stage string) time.Time {
	start := r.t
	now := r.g.m.since(stage, start)
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		_, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, "generator "+stage, trace.WithTimestamp(start),
			trace.WithAttributes(attribute.Int64("smartfeed.user", int64(r.user)), attribute.Int("generator.wanted", r.n),
				attribute.Int("generator.won", len(r.won))))
		span.End(trace.WithTimestamp(now))
	}
	return now
}
