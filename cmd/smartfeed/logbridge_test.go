package main

import (
	"context"
	"errors"
	"testing"

	"github.com/sirupsen/logrus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestLibLogsJoinTheStream: go-redis's, logrus's (gohbase's) and OpenTelemetry's lines arrive in the command's
// zap logger, named, at fitting levels, with logrus's fields kept.
func TestLibLogsJoinTheStream(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	b := &libLogs{}
	b.use(zap.New(core))
	redisLogger{b}.Printf(context.Background(), "redis: pool.go:770: failed to dial after %d attempts\n", 5)
	h := logrusHook{b}
	_ = h.Fire(&logrus.Entry{Level: logrus.InfoLevel, Message: "added new region", Data: logrus.Fields{"region": "r1"}})
	_ = h.Fire(&logrus.Entry{Level: logrus.ErrorLevel, Message: "region lookup failed"})
	otelErrors{b}.Handle(errors.New("traces export: connection refused"))
	es := logs.All()
	if len(es) != 4 {
		t.Fatalf("%d entries, want 4", len(es))
	}
	want := []struct {
		name, msg string
		lvl       zapcore.Level
	}{
		{"redis", "redis: pool.go:770: failed to dial after 5 attempts", zapcore.WarnLevel},
		{"hbase", "added new region", zapcore.DebugLevel},
		{"hbase", "region lookup failed", zapcore.ErrorLevel},
		{"tracing", "spans not exported", zapcore.WarnLevel},
	}
	for i, w := range want {
		if es[i].LoggerName != w.name || es[i].Message != w.msg || es[i].Level != w.lvl {
			t.Errorf("entry %d: %s %q %v, want %s %q %v", i, es[i].LoggerName, es[i].Message, es[i].Level, w.name, w.msg, w.lvl)
		}
	}
	if es[1].ContextMap()["region"] != "r1" {
		t.Errorf("logrus fields lost: %v", es[1].ContextMap())
	}
}
