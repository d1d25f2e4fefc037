// Package tracing builds the process's OpenTelemetry tracer provider from the standard OTEL_*
// environment variables, and the gRPC stats handlers that trace every call of the process's
// servers and clients.
//
// Tracing is off unless OTEL_TRACES_EXPORTER is "otlp": the Provider is then disabled, its
// TracerProvider is nil, and the services skip every tracing call (no span, no context value, no
// allocation). Nothing here sets OpenTelemetry's global state: the binary's wiring passes the
// provider to each service, and the propagator is always W3C trace context.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// DefaultServiceName is the service.name of the spans when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "smartfeed"

// Config is the tracing configuration of the process, as the OTEL_* environment variables set it.
type Config struct {
	// Enabled is whether spans are recorded and exported (OTEL_TRACES_EXPORTER=otlp and
	// OTEL_SDK_DISABLED not true).
	Enabled bool
	// ServiceName is the resource's service.name (OTEL_SERVICE_NAME, default "smartfeed").
	ServiceName string
	// Sampler is the sampler's name (OTEL_TRACES_SAMPLER, default parentbased_always_on) and
	// SamplerArg its argument (OTEL_TRACES_SAMPLER_ARG: the ratio of the traceidratio samplers).
	Sampler    string
	SamplerArg float64
	// Endpoint is the OTLP endpoint, for the log line (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
	// OTEL_EXPORTER_OTLP_ENDPOINT); the exporter reads it and the other OTEL_EXPORTER_OTLP_*
	// variables (headers, certificate, timeout, insecure) itself.
	Endpoint string
}

// FromEnv reads the tracing configuration through getenv (os.Getenv in the binary). It refuses
// an exporter, protocol or sampler it does not support, so a typo does not silently turn
// tracing off or sample nothing.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{ServiceName: DefaultServiceName, Sampler: "parentbased_always_on", SamplerArg: 1}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		c.ServiceName = v
	}
	if disabled, _ := strconv.ParseBool(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); disabled {
		return c, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "", "none":
		return c, nil
	case "otlp":
		c.Enabled = true
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER %s: want otlp or none", quote.Q(exp))
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p := strings.TrimSpace(proto); p != "" && p != "grpc" {
		return c, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %s: only grpc is supported", quote.Q(p))
	}
	c.Endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if c.Endpoint == "" {
		c.Endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if v := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")); v != "" {
		c.Sampler = strings.ToLower(v)
	}
	if _, err := c.sampler(); err != nil {
		return c, err
	}
	if v := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); v != "" && strings.HasSuffix(c.Sampler, "traceidratio") {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return c, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %s: want a ratio in [0, 1]", quote.Q(v))
		}
		c.SamplerArg = r
	}
	return c, nil
}

// sampler is the sampler c names.
func (c Config) sampler() (sdktrace.Sampler, error) {
	switch c.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(c.SamplerArg), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SamplerArg)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %s: want always_on, always_off, traceidratio, or one of them prefixed parentbased_", quote.Q(c.Sampler))
}

// Provider is the process's tracing: an SDK tracer provider exporting over OTLP/gRPC, or, when
// tracing is off, nothing. A nil *Provider is a disabled one.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// New builds the provider of c; attrs are added to the resource (the process's role, say). With
// c.Enabled false it returns a disabled provider and starts nothing. The exporter connects
// lazily: an unreachable collector costs dropped spans, never a failed start.
func New(ctx context.Context, c Config, attrs ...attribute.KeyValue) (*Provider, error) {
	if !c.Enabled {
		return &Provider{}, nil
	}
	return NewWithExporter(ctx, c, nil, attrs...)
}

// NewWithExporter is New with the spans sent to exp instead of an OTLP exporter (tests pass
// tracetest's in-memory exporter); exp nil means the OTLP exporter. The spans are batched.
func NewWithExporter(ctx context.Context, c Config, exp sdktrace.SpanExporter, attrs ...attribute.KeyValue) (*Provider, error) {
	sampler, err := c.sampler()
	if err != nil {
		return nil, err
	}
	if exp == nil {
		if exp, err = otlptracegrpc.New(ctx); err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over the defaults here.
	res, err := resource.New(ctx,
		resource.WithAttributes(append([]attribute.KeyValue{attribute.String("service.name", c.ServiceName)}, attrs...)...),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler))}, nil
}

// Enabled reports whether spans are recorded.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// TracerProvider is what the services take: nil when tracing is off, which they read as "make
// no span".
func (p *Provider) TracerProvider() trace.TracerProvider {
	if !p.Enabled() {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still buffered and stops the exporter, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// Propagator is the one propagator of trace context between processes: W3C traceparent and
// tracestate.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// ServerHandler is the gRPC server stats handler that makes a server span of every call but
// health checks (a child of the caller's span when the call carries one); nil when tracing is
// off.
func (p *Provider) ServerHandler() stats.Handler {
	if !p.Enabled() {
		return nil
	}
	return otelgrpc.NewServerHandler(p.grpcOptions()...)
}

// ClientHandler is the gRPC client stats handler that makes a client span of every call and
// sends its context along; nil when tracing is off.
func (p *Provider) ClientHandler() stats.Handler {
	if !p.Enabled() {
		return nil
	}
	return otelgrpc.NewClientHandler(p.grpcOptions()...)
}

func (p *Provider) grpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{otelgrpc.WithTracerProvider(p.sdk), otelgrpc.WithPropagators(Propagator()),
		// The process's metrics are Prometheus ones; otelgrpc's own would go nowhere.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck()))}
}
