package quiet

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func newGate(t *testing.T) *Gate {
	t.Helper()
	g, err := New(0, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestWaitNothingInFlight: with no request in flight Wait returns at once (after the grace),
// and says it found a gap.
func TestWaitNothingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t)
		start := time.Now()
		if !g.Wait(context.Background(), time.Second) {
			t.Fatal("Wait with nothing in flight = false, want true")
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("Wait with nothing in flight took %v", took)
		}
		if got := testutil.ToFloat64(g.waits.WithLabelValues("quiet")); got != 1 {
			t.Errorf("quiet waits = %v, want 1", got)
		}
	})
}

// TestWaitForTheLastExit: Wait holds while requests are in flight and returns once the last one
// exits, not when the first one does.
func TestWaitForTheLastExit(t *testing.T) {
	g := newGate(t)
	g.Enter()
	g.Enter()
	done := make(chan bool, 1)
	go func() { done <- g.Wait(context.Background(), 10*time.Second) }()
	select {
	case <-done:
		t.Fatal("Wait returned with two requests in flight")
	case <-time.After(50 * time.Millisecond):
	}
	g.Exit()
	select {
	case <-done:
		t.Fatal("Wait returned with one request still in flight")
	case <-time.After(50 * time.Millisecond):
	}
	g.Exit()
	select {
	case ok := <-done:
		if !ok {
			t.Error("Wait after the last exit = false, want true")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the last request exited")
	}
	if got := g.InFlight(); got != 0 {
		t.Errorf("in flight = %d, want 0", got)
	}
}

// TestWaitBound: a request that never ends delays the background work by the bound, no more.
func TestWaitBound(t *testing.T) {
	g := newGate(t)
	g.Enter()
	defer g.Exit()
	const bound = 30 * time.Millisecond
	start := time.Now()
	if g.Wait(context.Background(), bound) {
		t.Error("Wait with a request in flight throughout = true, want false")
	}
	took := time.Since(start)
	if took < bound || took > bound+2*time.Second {
		t.Errorf("Wait took %v, want about %v", took, bound)
	}
	if got := testutil.ToFloat64(g.waits.WithLabelValues("bound")); got != 1 {
		t.Errorf("bound waits = %v, want 1", got)
	}
}

// TestWaitCancelled: a cancelled context ends the wait at once.
func TestWaitCancelled(t *testing.T) {
	g := newGate(t)
	g.Enter()
	defer g.Exit()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	if g.Wait(ctx, time.Minute) {
		t.Error("cancelled Wait = true, want false")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("cancelled Wait took %v", took)
	}
}

// TestNilGate: a nil Gate counts nothing and never waits.
func TestNilGate(t *testing.T) {
	var g *Gate
	g.Enter()
	g.Exit()
	if !g.Wait(context.Background(), time.Hour) || g.InFlight() != 0 {
		t.Error("nil Gate waited or counted")
	}
}

// TestNoLostWakeup: requests enter and exit concurrently with waiters that keep arriving, and
// then stop. Every waiter finds a gap: none waits for a wake-up it missed (the requests stop, so
// no later exit would wake it, and it would sit until its bound), and the count ends at 0.
func TestNoLostWakeup(t *testing.T) {
	g := newGate(t)
	var reqs sync.WaitGroup
	for range 4 {
		reqs.Go(func() {
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				g.Enter()
				time.Sleep(50 * time.Microsecond)
				g.Exit()
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	const bound = 20 * time.Second
	var waiters sync.WaitGroup
	var mu sync.Mutex
	missed := 0
	start := time.Now()
	for i := range 400 {
		time.Sleep(time.Duration(i%4) * 100 * time.Microsecond) // arrivals spread over the requests
		waiters.Go(func() {
			if !g.Wait(context.Background(), bound) {
				mu.Lock()
				missed++
				mu.Unlock()
			}
		})
	}
	reqs.Wait()
	waiters.Wait()
	if missed > 0 {
		t.Errorf("%d of 400 waiters reached their bound", missed)
	}
	if took := time.Since(start); took > bound/2 {
		t.Errorf("waiters took %v after the requests stopped", took)
	}
	if got := g.InFlight(); got != 0 {
		t.Errorf("in flight = %d after every request ended, want 0", got)
	}
}

// TestStatsHandler: on a real gRPC server, a unary call counts from its start to its end, and
// a stream does not count at all.
func TestStatsHandler(t *testing.T) {
	g := newGate(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	srv := grpc.NewServer(grpc.StatsHandler(g.StatsHandler()),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			entered <- struct{}{}
			<-release
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			entered <- struct{}{}
			<-release
			return nil
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A stream held open counts nothing.
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_ = stream
	<-entered
	if got := g.InFlight(); got != 0 {
		t.Errorf("in flight with a stream open = %d, want 0", got)
	}

	// A unary call counts while it runs.
	res := make(chan error, 1)
	go func() {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		res <- err
	}()
	<-entered
	if got := g.InFlight(); got != 1 {
		t.Errorf("in flight during a unary call = %d, want 1", got)
	}
	close(release)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// End is reported once the answer is written; the client may have it a moment before.
	deadline := time.Now().Add(5 * time.Second)
	for g.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := g.InFlight(); got != 0 {
		t.Errorf("in flight after the unary call = %d, want 0", got)
	}
}
