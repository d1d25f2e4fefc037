package main

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/tracing"
)

// tracingFlushTimeout bounds the export of the spans still buffered when the process stops.
const tracingFlushTimeout = 5 * time.Second

// startTracing builds the process's tracing from the OTEL_* environment variables (package
// tracing: off unless OTEL_TRACES_EXPORTER=otlp) and returns it with what flushes and stops it.
func startTracing(ctx context.Context, role string, log *zap.Logger) (*tracing.Provider, func(), error) {
	tc, err := tracing.FromEnv(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	tp, err := tracing.New(ctx, tc, attribute.String("smartfeed.role", role),
		attribute.String("service.version", buildVersion()))
	if err != nil {
		return nil, nil, err
	}
	if tp.Enabled() {
		log.Info("tracing on", zap.String("service_name", tc.ServiceName), zap.String("endpoint", tc.Endpoint),
			zap.String("sampler", tc.Sampler), zap.Float64("sampler_arg", tc.SamplerArg))
	}
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed", zap.Error(err))
		}
	}, nil
}

// newTracedApp is newApp with the process's tracing (startTracing), and what flushes and stops
// the tracing once the app has run.
func newTracedApp(ctx context.Context, role string, cfg config.Config, log *zap.Logger, reg *prometheus.Registry) (*app, func(), error) {
	tp, stop, err := startTracing(ctx, role, log)
	if err != nil {
		return nil, nil, err
	}
	a, err := newApp(ctx, role, cfg, log, reg, withTracing(tp))
	if err != nil {
		stop()
		return nil, nil, err
	}
	return a, stop, nil
}

// traceProvider is the app's tracing (nil or disabled: off).
type traceProvider = tracing.Provider

// appOption sets up an app before newApp builds its services.
type appOption func(*app)

// withTracing makes the app's servers, clients and services record spans through tp.
func withTracing(tp *tracing.Provider) appOption { return func(a *app) { a.tracing = tp } }

// newAppState is the app of role before anything is built: opts applied.
func newAppState(role string, cfg config.Config, log *zap.Logger, reg *prometheus.Registry, opts []appOption) *app {
	a := &app{role: role, cfg: cfg, log: log, reg: reg, stores: newStores(cfg.Storage, log, reg)}
	for _, o := range opts {
		o(a)
	}
	return a
}

// tracerProvider is what the app's services record spans through; nil when tracing is off.
func (a *app) tracerProvider() trace.TracerProvider { return a.tracing.TracerProvider() }

// statsHandlers are the stats handler options of the public gRPC server: the quiet gate's count
// of calls in flight and the tracing's server spans, those that are on.
func (a *app) statsHandlers() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if a.quiet != nil {
		opts = append(opts, grpc.StatsHandler(a.quiet.StatsHandler()))
	}
	return append(opts, a.traceServer()...)
}

// traceServer is the option of a gRPC server that makes a span of every call (none when tracing
// is off).
func (a *app) traceServer() []grpc.ServerOption {
	if h := a.tracing.ServerHandler(); h != nil {
		return []grpc.ServerOption{grpc.StatsHandler(h)}
	}
	return nil
}

// traceDial is the option of a gRPC client that makes a span of every call and sends its trace
// context along (none when tracing is off).
func (a *app) traceDial() []grpc.DialOption {
	if h := a.tracing.ClientHandler(); h != nil {
		return []grpc.DialOption{grpc.WithStatsHandler(h)}
	}
	return nil
}
