package tracing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestFromEnv: tracing is off unless OTEL_TRACES_EXPORTER=otlp; what it cannot do is refused
// with the variable named, never silently ignored.
func TestFromEnv(t *testing.T) {
	def := Config{ServiceName: DefaultServiceName, Sampler: "parentbased_always_on", SamplerArg: 1}
	on := def
	on.Enabled = true
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{name: "unset: off", want: def},
		{name: "none: off", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: def},
		{name: "otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: on},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, want: def},
		{name: "endpoint, traces-specific first", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4317"},
			want: Config{Enabled: true, ServiceName: DefaultServiceName, Sampler: "parentbased_always_on", SamplerArg: 1, Endpoint: "http://b:4317"}},
		{name: "service name and ratio sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "feed",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
			want: Config{Enabled: true, ServiceName: "feed", Sampler: "parentbased_traceidratio", SamplerArg: 0.01}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "http protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			wantErr: "only grpc"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "jaeger_remote"},
			wantErr: "OTEL_TRACES_SAMPLER"},
		{name: "ratio out of range", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "long value quoted bounded", env: map[string]string{"OTEL_TRACES_EXPORTER": strings.Repeat("x", 10000)},
			wantErr: "(10000 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromEnv = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				if len(err.Error()) > 300 {
					t.Errorf("error of %d bytes: the value is not bounded", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("FromEnv (-want +got):\n%s", d)
			}
		})
	}
}

// TestDisabled: a disabled provider (and a nil one) gives the services nothing to call.
func TestDisabled(t *testing.T) {
	p, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Provider{p, nil} {
		if p.Enabled() || p.TracerProvider() != nil || p.ServerHandler() != nil || p.ClientHandler() != nil {
			t.Errorf("disabled provider: enabled %v, tracer provider %v, handlers %v %v", p.Enabled(), p.TracerProvider(),
				p.ServerHandler(), p.ClientHandler())
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// TestEnabledExports: spans of an enabled provider reach its exporter when flushed, with the
// service name and the resource attributes given.
func TestEnabledExports(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := NewWithExporter(context.Background(), Config{Enabled: true, ServiceName: "smartfeed-test", Sampler: "always_on"}, exp)
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "work")
	span.End()
	if err := p.sdk.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	defer func() { _ = p.Shutdown(context.Background()) }()
	if len(spans) != 1 || spans[0].Name != "work" {
		t.Fatalf("exported %v, want the one span", spans)
	}
	name, _ := spans[0].Resource.Set().Value("service.name")
	if name.AsString() != "smartfeed-test" {
		t.Errorf("service.name %q, want smartfeed-test", name.AsString())
	}
}

// TestOTLPUnreachable: with the collector unreachable, New still starts (the exporter connects
// lazily), spans are dropped, and Shutdown returns within its context and leaves no goroutine.
func TestOTLPUnreachable(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	c, err := FromEnv(func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if p.ServerHandler() == nil || p.ClientHandler() == nil || p.TracerProvider() == nil {
		t.Fatal("enabled provider without handlers or tracer provider")
	}
	_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "lost")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_ = p.Shutdown(ctx) // the export fails: what matters is that it returns
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
}
