package feedsvc

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestLatencyExemplar: a GetFeed of a sampled trace leaves its trace ID as the exemplar of its
// latency bucket; one without a trace leaves none.
func TestLatencyExemplar(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	for _, tc := range []struct {
		name   string
		traced bool
	}{{"untraced", false}, {"traced", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{0.01, 0.1, 1}})
			reg := prometheus.NewRegistry()
			reg.MustRegister(h)
			ctx, want := context.Background(), ""
			if tc.traced {
				c, s := tp.Tracer("test").Start(ctx, "GetFeed")
				defer s.End()
				ctx, want = c, s.SpanContext().TraceID().String()
			}
			observeWithTrace(ctx, h, 0.05)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, b := range mfs[0].GetMetric()[0].GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" {
						got = l.GetValue()
					}
				}
			}
			if got != want {
				t.Errorf("exemplar trace_id %q, want %q", got, want)
			}
		})
	}
}
