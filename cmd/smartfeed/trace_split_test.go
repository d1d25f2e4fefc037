package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// traceSpan is one span as the test sees it, from the OTLP receiver (the role processes) or
// from the test's own in-memory exporter (the test's client calls).
type traceSpan struct {
	trace, id, parent string // hex; parent "" for a root
	name, role        string // role: the process's smartfeed.role, "test" for the test's own
	start             time.Time
	links             []string // "trace/span" of each link
}

// otlpReceiver is an OTLP/gRPC trace collector that keeps every span it is sent in memory.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []traceSpan
}

// Export implements the OTLP TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		role := otlpAttr(rs.GetResource().GetAttributes(), "smartfeed.role")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				ts := traceSpan{trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parent: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(), role: role,
					start: time.Unix(0, int64(s.GetStartTimeUnixNano()))}
				for _, l := range s.GetLinks() {
					ts.links = append(ts.links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				r.spans = append(r.spans, ts)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func otlpAttr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// of returns the spans received so far of trace id.
func (r *otlpReceiver) of(id string) []traceSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []traceSpan
	for _, s := range r.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

// startOTLPReceiver serves an otlpReceiver on a loopback port until the test ends.
func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r, lis.Addr().String()
}

// spanForest renders spans as trees by parent, children in start order, each line
// "name (role)"; a span whose parent is missing is listed under "missing parent".
func spanForest(spans []traceSpan) string {
	byID := map[string]bool{}
	for _, s := range spans {
		byID[s.id] = true
	}
	kids := map[string][]traceSpan{}
	var roots, orphans []traceSpan
	for _, s := range spans {
		switch {
		case s.parent == "":
			roots = append(roots, s)
		case byID[s.parent]:
			kids[s.parent] = append(kids[s.parent], s)
		default:
			orphans = append(orphans, s)
		}
	}
	var b strings.Builder
	var walk func(level int, ss []traceSpan)
	walk = func(level int, ss []traceSpan) {
		slices.SortStableFunc(ss, func(x, y traceSpan) int { return x.start.Compare(y.start) })
		for _, s := range ss {
			fmt.Fprintf(&b, "%s%s (%s)", strings.Repeat("  ", level), s.name, s.role)
			if len(s.links) > 0 {
				fmt.Fprintf(&b, " links %v", s.links)
			}
			b.WriteString("\n")
			walk(level+1, kids[s.id])
		}
	}
	walk(0, roots)
	if len(orphans) > 0 {
		b.WriteString("missing parent:\n")
		walk(1, orphans)
	}
	return b.String()
}

// TestSplitTrace follows one pin through the split deployment by its trace: the test's root
// span, CreatePin on the graph process, the fanout task on the worker process, then the
// follower's GetFeed on the feed process and the GenerateChunk it sends the generator process.
// Every process exports its spans over OTLP to a receiver in the test; together with the test's
// own client spans they must form one trace: one trace ID, every span's parent present, and
// every role process among them.
func TestSplitTrace(t *testing.T) {
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	if testing.Short() {
		t.Skip("split processes: builds the binary and runs four processes; skipped with -short")
	}
	redis, ns := testenv.RedisNamespace(t, "splittrace")
	zk := testenv.HBase(t)
	recv, addr := startOTLPReceiver(t)
	s := newSplit(t, redis, ns, zk, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+addr,
		"OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_TRACES_SAMPLER=parentbased_always_on",
		// Spans leave each process a tenth of a second after they end, not five seconds.
		"OTEL_BSP_SCHEDULE_DELAY=100")

	// The follow before the pin, outside the trace.
	A, B := s.user("alice"), s.user("bob")
	bA := s.board(A)
	s.follow(B, A)
	s.drain()

	// The test's own client: its calls are spans of the test's trace, their context sent along.
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	conn := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp),
				otelgrpc.WithPropagators(propagation.TraceContext{}))))
		s.must(err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx, root := tp.Tracer("test").Start(s.ctx, "pin journey")
	p, err := graphv1.NewGraphServiceClient(conn(s.graphAddr)).CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: uint64(A),
		BoardId: uint64(bA), Details: "traced", ImageUrl: "https://example.com/traced.jpg"})
	s.must(err)
	pin := zen.ID(p.GetId())
	s.drain()
	var served bool
	s.waitFor("the pin in B's feed", 30*time.Second, func() bool {
		r, err := feedv1.NewFeedServiceClient(conn(s.feedAddr)).GetFeed(ctx, &feedv1.GetFeedRequest{UserId: uint64(B), PageSize: 50})
		s.must(err)
		for _, it := range r.GetItems() {
			served = served || zen.ID(it.GetPinId()) == pin
		}
		return served
	})
	root.End()
	if !served {
		t.Fatal("the pin never reached B's feed: the trace has no journey to check")
	}
	traceID := root.SpanContext().TraceID().String()

	var own []traceSpan
	for _, st := range exp.GetSpans() {
		own = append(own, traceSpan{trace: st.SpanContext.TraceID().String(), id: st.SpanContext.SpanID().String(),
			parent: map[bool]string{true: st.Parent.SpanID().String()}[st.Parent.IsValid()], name: st.Name, role: "test",
			start: st.StartTime})
	}
	// Spans arrive from four processes, each in its own time; wait until the trace holds the
	// spans of each step and no span lacks its parent.
	want := []string{"smartfeed.graph.v1.GraphService/CreatePin", "pinlater enqueue fanout", "pinlater process fanout",
		"worker pool insert", "smartfeed.feed.v1.FeedService/GetFeed", "smartfeed.generator.v1.GeneratorService/GenerateChunk",
		"generator take", "hedge read"}
	var all []traceSpan
	complete := func() bool {
		all = append(append([]traceSpan{}, own...), recv.of(traceID)...)
		ids := map[string]bool{}
		names := map[string]bool{}
		for _, sp := range all {
			ids[sp.id], names[sp.name] = true, true
		}
		for _, sp := range all {
			if sp.parent != "" && !ids[sp.parent] {
				return false
			}
		}
		for _, n := range want {
			if !names[n] {
				return false
			}
		}
		return true
	}
	s.waitFor("the processes' spans of the trace", 30*time.Second, complete)
	tree := spanForest(all)
	t.Logf("trace %s, %d spans:\n%s", traceID, len(all), tree)
	if strings.Contains(tree, "missing parent:") {
		t.Errorf("spans whose parent is not in the trace: the trace is broken")
	}
	roles := map[string]bool{}
	for _, sp := range all {
		roles[sp.role] = true
	}
	for _, r := range []string{roleGraph, roleWorker, roleFeed, roleGenerator} {
		if !roles[r] {
			t.Errorf("no span of the %s process in the trace", r)
		}
	}
	names := map[string]bool{}
	for _, sp := range all {
		names[sp.name] = true
	}
	for _, n := range want {
		if !names[n] {
			t.Errorf("no span %q in the trace", n)
		}
	}
	if n := len(all) - len(own); n == 0 {
		t.Errorf("the processes exported no span of the trace")
	}
	if other := len(recv.of("")); other != 0 {
		t.Errorf("%d spans without a trace ID", other)
	}
}
