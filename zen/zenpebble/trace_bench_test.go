package zenpebble

import (
	"context"
	"encoding/binary"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/smartfeed/smartfeed/zen"
)

// BenchmarkTableTracing measures a Get, a 50-row Scan, a 10-row Apply and a CheckAndSet on a
// Pebble table under three contexts: a plain one (tracing off: the process has no tracer
// provider), one carrying a span of the no-op tracer provider, and one carrying a recording
// span of the SDK's (tracing on, spans kept in memory). The first two must cost what an
// untraced call costs: the same allocations per call.
func BenchmarkTableTracing(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	ctxs := []struct {
		name string
		ctx  func(context.Context) (context.Context, func())
	}{
		{"off", func(ctx context.Context) (context.Context, func()) { return ctx, func() {} }},
		{"noop", func(ctx context.Context) (context.Context, func()) {
			ctx, sp := noop.NewTracerProvider().Tracer("bench").Start(ctx, "request")
			return ctx, func() { sp.End() }
		}},
		{"sdk", func(ctx context.Context) (context.Context, func()) {
			ctx, sp := sdk.Tracer("bench").Start(ctx, "request")
			return ctx, func() { sp.End(); exp.Reset() }
		}},
	}
	for _, c := range ctxs {
		b.Run(c.name, func(b *testing.B) {
			tb := benchTable(b, b.TempDir(), WithNoSync())
			fillPrefix(b, tb)
			ctx, end := c.ctx(b.Context())
			defer end()
			b.Run("Get", func(b *testing.B) {
				b.ReportAllocs()
				k := binary.BigEndian.AppendUint64(nil, 7<<46)
				k = binary.BigEndian.AppendUint64(k, 3)
				k = binary.BigEndian.AppendUint64(k, 21)
				for b.Loop() {
					if _, err := tb.Get(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("Scan50", func(b *testing.B) {
				b.ReportAllocs()
				o := zen.ScanOptions{Start: binary.BigEndian.AppendUint64(nil, 7<<46), Stop: binary.BigEndian.AppendUint64(nil, 7<<46+1)}
				for b.Loop() {
					if rows, err := tb.Scan(ctx, o); err != nil || len(rows) != 50 {
						b.Fatalf("Scan = %d rows, %v", len(rows), err)
					}
				}
			})
			b.Run("Apply10", func(b *testing.B) {
				b.ReportAllocs()
				muts := make([]zen.Mutation, 10)
				for j := range muts {
					muts[j] = zen.Mutation{Key: benchKey(j), Value: make([]byte, 64)}
				}
				for b.Loop() {
					if err := tb.Apply(ctx, muts); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("CheckAndSet", func(b *testing.B) {
				b.ReportAllocs()
				k, v := benchKey(1<<20), []byte("v")
				for b.Loop() {
					if ok, err := tb.CheckAndSet(ctx, k, nil, v); err != nil || !ok {
						b.Fatalf("CheckAndSet = %v, %v", ok, err)
					}
					if ok, err := tb.CheckAndSet(ctx, k, v, nil); err != nil || !ok {
						b.Fatalf("CheckAndSet = %v, %v", ok, err)
					}
				}
			})
		})
	}
}
