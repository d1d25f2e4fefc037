package pinlater

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// spanTree renders the spans of one trace as an indented tree of "name [attempt]" lines,
// children sorted by name; a span whose parent is not among spans (nor root's remote parent)
// is listed under "orphans".
func spanTree(spans tracetest.SpanStubs) string {
	kids := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots, orphans []tracetest.SpanStub
	for _, s := range spans {
		switch p := s.Parent.SpanID(); {
		case !s.Parent.IsValid():
			roots = append(roots, s)
		case ids[p]:
			kids[p] = append(kids[p], s)
		default:
			orphans = append(orphans, s)
		}
	}
	label := func(s tracetest.SpanStub) string {
		for _, a := range s.Attributes {
			if a.Key == "pinlater.attempt" {
				return fmt.Sprintf("%s [attempt %d]", s.Name, a.Value.AsInt64())
			}
		}
		return s.Name
	}
	var b strings.Builder
	var walk func(level int, ss []tracetest.SpanStub)
	walk = func(level int, ss []tracetest.SpanStub) {
		slices.SortStableFunc(ss, func(x, y tracetest.SpanStub) int { return strings.Compare(label(x), label(y)) })
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", level), label(s))
			walk(level+1, kids[s.SpanContext.SpanID()])
		}
	}
	walk(0, roots)
	if len(orphans) > 0 {
		b.WriteString("orphans:\n")
		walk(1, orphans)
	}
	return b.String()
}

// traceIDs is the set of trace IDs of spans.
func traceIDs(spans tracetest.SpanStubs) map[trace.TraceID]int {
	m := map[trace.TraceID]int{}
	for _, s := range spans {
		m[s.SpanContext.TraceID()]++
	}
	return m
}

// TestTraceFollowsTasks: a task's runs, a retry included, and the tasks it enqueues in turn sit
// in the trace of the call that enqueued the first one: CreatePin → fanout → fanout-chunk, one
// trace ID and each span the child of the one before.
func TestTraceFollowsTasks(t *testing.T) {
	e := newEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	c, err := NewClient(e.opt, e.log, prometheus.NewRegistry(), WithNamespace(e.ns), WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := e.config()
	cfg.TracerProvider = tp
	var chunkRuns atomic.Int32
	e.start(cfg, map[string]Handler{
		TypeFanout: Typed(func(ctx context.Context, p FanoutPayload) error {
			_, err := c.Enqueue(ctx, mustTask(NewFanoutChunk(FanoutChunkPayload{Pin: p.Pin, Author: p.Author, Board: p.Board,
				CreatedMs: p.CreatedMs, Source: 1, ListFrom: p.Author, EdgeType: 1, Limit: 10})))
			return err
		}),
		TypeFanoutChunk: Typed(func(ctx context.Context, p FanoutChunkPayload) error {
			if chunkRuns.Add(1) == 1 {
				return RetryAfter(errors.New("store unavailable"), 10*time.Millisecond)
			}
			return nil
		}),
	})

	ctx, root := tp.Tracer("test").Start(t.Context(), "CreatePin")
	if _, err := c.Enqueue(ctx, mustTask(NewFanout(FanoutPayload{Pin: 11, Author: 12, Board: 13, CreatedMs: 1}))); err != nil {
		t.Fatal(err)
	}
	root.End()
	testenv.WaitFor(t, 20*time.Second, "both runs of the chunk task exported", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "pinlater process "+TypeFanoutChunk {
				n++
			}
		}
		return n == 2
	})
	spans := exp.GetSpans()
	tree := spanTree(spans)
	t.Logf("trace:\n%s", tree)
	want := `CreatePin
  pinlater enqueue fanout
    pinlater process fanout [attempt 1]
      pinlater enqueue fanout-chunk
        pinlater process fanout-chunk [attempt 1]
        pinlater process fanout-chunk [attempt 2]
`
	if d := cmp.Diff(want, tree); d != "" {
		t.Errorf("span tree (-want +got):\n%s", d)
	}
	if ids := traceIDs(spans); len(ids) != 1 {
		t.Errorf("spans of %d traces, want one: %v", len(ids), ids)
	}
}

// TestTraceSurvivesRelay: a task that Redis did not take (down at enqueue time) and the relay
// enqueued later still runs in the trace of the call that enqueued it: the trace context is
// kept in its outbox row.
func TestTraceSurvivesRelay(t *testing.T) {
	rp := testenv.StartRedis(t)
	opt := asynq.RedisClientOpt{Addr: rp.Addr()}
	log := zaptest.NewLogger(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	c, err := NewClient(opt, log, prometheus.NewRegistry(), WithNamespace("relay"), WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	box := newMemOutbox()
	d := durableOn(t, c, box)

	rp.Kill()
	ctx, root := tp.Tracer("test").Start(t.Context(), "DeletePin")
	info, err := d.Enqueue(ctx, pinTask(1))
	root.End()
	if err != nil || !info.Deferred {
		t.Fatalf("enqueue with Redis down: %+v, %v; want OK, deferred", info, err)
	}
	rp.Start()
	// The relay's pass runs under no span of its own: the row's context is the parent.
	if n, err := d.RelayOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("relay = %d, %v; want 1", n, err)
	}
	srv, err := NewServer(Config{Redis: opt, Namespace: "relay", Concurrency: 1, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: time.Second, Outbox: box, TracerProvider: tp}, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleFunc(TypePinDelete, func(context.Context, *Task) error { return nil })
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	testenv.WaitFor(t, 20*time.Second, "the relayed task's run exported", func() bool {
		return slices.ContainsFunc(exp.GetSpans(), func(s tracetest.SpanStub) bool { return s.Name == "pinlater process "+TypePinDelete })
	})
	spans := exp.GetSpans()
	tree := spanTree(spans)
	t.Logf("trace:\n%s", tree)
	// The inline enqueue that Redis refused is a span of its own, under the call.
	want := `DeletePin
  pinlater enqueue pin-delete
  pinlater enqueue pin-delete
    pinlater process pin-delete [attempt 1]
`
	if d := cmp.Diff(want, tree); d != "" {
		t.Errorf("span tree (-want +got):\n%s", d)
	}
	if ids := traceIDs(spans); len(ids) != 1 {
		t.Errorf("spans of %d traces, want one: %v", len(ids), ids)
	}
}
