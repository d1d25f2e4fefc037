package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/smartfeed/smartfeed/internal/config"
)

// libLogs routes the logs of the libraries that only have a process-wide logger (go-redis's,
// logrus, which gohbase logs to, and OpenTelemetry's error handler) into the zap logger of the running command, so a process
// writes one stream in one format. main installs it once (installLibLogs); each command points
// it at its logger (use). Until then, and in tests, which never run main, the libraries keep
// their own loggers.
type libLogs struct{ log atomic.Pointer[zap.Logger] }

var bridge libLogs

// use sends the libraries' logs to log from now on.
func (b *libLogs) use(log *zap.Logger) { b.log.Store(log) }

func (b *libLogs) logger() *zap.Logger {
	if l := b.log.Load(); l != nil {
		return l
	}
	return zap.NewNop()
}

// installLibLogs points go-redis and logrus at the bridge. Called once, by main.
func installLibLogs() {
	redis.SetLogger(redisLogger{&bridge})
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.InfoLevel)
	logrus.AddHook(logrusHook{&bridge})
	otel.SetErrorHandler(otelErrors{&bridge})
}

// otelErrors is OpenTelemetry's error handler: its errors are spans the exporter could not send
// (the collector unreachable), at most one per export batch.
type otelErrors struct{ b *libLogs }

func (o otelErrors) Handle(err error) {
	o.b.logger().Named("tracing").Warn("spans not exported", zap.Error(err))
}

// redisLogger is go-redis's logger: its lines are connection-pool trouble (a Redis down).
type redisLogger struct{ b *libLogs }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.b.logger().Named("redis").Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// logrusHook forwards logrus entries (gohbase's region lookups and retries) with their fields.
// gohbase's info lines (a region added, a client connected) are routine: they go to debug.
type logrusHook struct{ b *libLogs }

func (logrusHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h logrusHook) Fire(e *logrus.Entry) error {
	fields := make([]zap.Field, 0, len(e.Data))
	for k, v := range e.Data {
		fields = append(fields, zap.Any(k, v))
	}
	l := h.b.logger().Named("hbase")
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		l.Error(e.Message, fields...)
	case logrus.WarnLevel:
		l.Warn(e.Message, fields...)
	default:
		l.Debug(e.Message, fields...)
	}
	return nil
}

// newLogger builds the zap logger of cfg, writing to w.
func newLogger(cfg config.Log, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(cfg.Level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if cfg.Format == "console" || cfg.Format == "auto" && isTerminal(w) {
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		enc = zapcore.NewJSONEncoder(ec)
	}
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl))
	bridge.use(log) // the libraries' own logs join this stream (main installs the bridge)
	return log, nil
}
