package hedge

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the hedge's spans.
const tracerName = "github.com/smartfeed/smartfeed/feedsvc/hedge"

// Traced is Do, recorded as spans when ctx carries a recording span: a "hedge read" span with
// the outcome (hedge.from: the store whose answer won; hedge.hedged, hedge.reason,
// hedge.failover, hedge.budget_exhausted), and under it a span per store read, "hedge read
// primary" and "hedge read standby" (a warm-up read is a standby read too), the loser's marked
// hedge.cancelled. Without a recording span it is Do, at the cost of one context lookup.
func Traced[T any](ctx context.Context, h *Hedger, primary, standby ReadFunc[T]) (T, Outcome, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return Do(ctx, h, primary, standby)
	}
	tr := parent.TracerProvider().Tracer(tracerName)
	ctx, span := tr.Start(ctx, "hedge read")
	defer span.End()
	v, out, err := Do(ctx, h, tracedRead(tr, Primary, primary), tracedRead(tr, Standby, standby))
	span.SetAttributes(attribute.String("hedge.from", out.From.String()), attribute.Bool("hedge.hedged", out.Hedged),
		attribute.Bool("hedge.failover", out.Failover), attribute.Bool("hedge.budget_exhausted", out.BudgetExhausted))
	if out.Reason != "" {
		span.SetAttributes(attribute.String("hedge.reason", out.Reason))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return v, out, err
}

// tracedRead is read of store s inside a span of its own.
func tracedRead[T any](tr trace.Tracer, s Store, read ReadFunc[T]) ReadFunc[T] {
	return func(ctx context.Context) (T, error) {
		ctx, span := tr.Start(ctx, "hedge read "+s.String())
		defer span.End()
		v, err := read(ctx)
		switch {
		case err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil:
			// The other store answered first (or the caller left): not a failure of s.
			span.SetAttributes(attribute.Bool("hedge.cancelled", true))
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return v, err
	}
}
