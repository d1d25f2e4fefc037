package feedsvc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// gatedGen holds every GenerateChunk until release is closed, and says when one entered.
type gatedGen struct {
	Generator
	entered chan struct{}
	release chan struct{}
}

func (g *gatedGen) GenerateChunk(ctx context.Context, user zen.ID) (Chunk, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Generator.GenerateChunk(ctx, user)
}

// waitFor polls cond until it holds, failing t after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAdmissionSheds: with feed.max_inflight calls running, a GetFeed call waits in line up to
// feed.admission_wait and is then shed, RESOURCE_EXHAUSTED with a RetryInfo; with the line full
// it is shed at once; both are counted by reason. Once the running calls end, the waiting one
// runs and new calls are served again.
func TestAdmissionSheds(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *hedge.Policy) {
		c.MaxInflight, c.AdmissionWait, c.GeneratorDeadline = 1, 20*time.Millisecond, time.Minute
	})
	gate := &gatedGen{Generator: e.gen, entered: make(chan struct{}, 8), release: make(chan struct{})}
	e.rebuild(t, func(d *Deps) { d.Generator = gate })
	open := sync.OnceFunc(func() { close(gate.release) })
	t.Cleanup(open)
	feed, _ := dial(t, e)
	req := &feedv1.GetFeedRequest{UserIdStr: e.user.String(), PageSize: 10}
	type answer struct {
		resp *feedv1.GetFeedResponse
		err  error
	}
	call := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := feed.GetFeed(t.Context(), req)
			ch <- answer{resp, err}
		}()
		return ch
	}
	shed := func(reason string) float64 { return testutil.ToFloat64(e.svc.m.shed.WithLabelValues(reason)) }

	first := call()
	<-gate.entered // the one slot is taken

	// Bounded: a call admitted past the limit would wait on the held generator.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := feed.GetFeed(ctx, req)
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("call past the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	var delays []time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delays = append(delays, ri.GetRetryDelay().AsDuration())
		}
	}
	if diff := cmp.Diff([]time.Duration{20 * time.Millisecond}, delays); diff != "" {
		t.Errorf("RetryInfo delays (-want +got):\n%s", diff)
	}

	// A long wait: the next call waits in line, and the one after it finds the line full.
	c := e.svc.Config()
	c.AdmissionWait = time.Minute
	if err := e.svc.SetConfig(c); err != nil {
		t.Fatal(err)
	}
	waiting := call()
	waitFor(t, "a call in line", func() bool { _, w := e.svc.adm.inflight(); return w == 1 })
	if _, err := feed.GetFeed(ctx, req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("call with the line full: %v, want RESOURCE_EXHAUSTED", err)
	}
	if diff := cmp.Diff(map[string]float64{shedQueueTimeout: 1, shedQueueFull: 1},
		map[string]float64{shedQueueTimeout: shed(shedQueueTimeout), shedQueueFull: shed(shedQueueFull)}); diff != "" {
		t.Errorf("smartfeed_feed_shed_total (-want +got):\n%s", diff)
	}

	// The load falls: the running call ends, the waiting one runs, new ones are served.
	open()
	for _, ch := range []<-chan answer{first, waiting} {
		if a := <-ch; a.err != nil || len(a.resp.Items) == 0 {
			t.Fatalf("admitted call: %d items, %v", len(a.resp.GetItems()), a.err)
		}
	}
	if resp, err := feed.GetFeed(t.Context(), req); err != nil || len(resp.Items) == 0 {
		t.Fatalf("call after the load fell: %v", err)
	}
	e.svc.Wait()
	if r, w := e.svc.adm.inflight(); r != 0 || w != 0 {
		t.Errorf("after every call ended: %d running, %d waiting; want none", r, w)
	}
	if got := shed(shedQueueTimeout) + shed(shedQueueFull); got != 2 {
		t.Errorf("calls shed in all = %v, want 2 (none once the load fell)", got)
	}
}

// TestAdmissionLine: slots go to the calls in line in order, a call that gives up leaves the
// line, and a lower limit takes effect as calls end.
func TestAdmissionLine(t *testing.T) {
	var a admission
	ctx := t.Context()
	for range 2 {
		if r, err := a.acquire(ctx, 2, time.Minute); r != "" || err != nil {
			t.Fatalf("acquire under the limit: %q, %v", r, err)
		}
	}
	if r, _ := a.acquire(ctx, 2, 0); r != shedQueueFull {
		t.Fatalf("acquire at the limit with no wait: %q, want %s", r, shedQueueFull)
	}
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := a.acquire(cctx, 2, time.Minute); gaveUp <- err }()
	got := make(chan string, 1)
	waitFor(t, "the first in line", func() bool { _, w := a.inflight(); return w == 1 })
	go func() { r, _ := a.acquire(ctx, 2, time.Minute); got <- r }()
	waitFor(t, "the second in line", func() bool { _, w := a.inflight(); return w == 2 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a call whose context ended got a slot")
	}
	a.release(2)
	if r := <-got; r != "" {
		t.Fatalf("second in line: %q, want a slot", r)
	}
	a.release(2)
	a.release(2)
	if r, w := a.inflight(); r != 0 || w != 0 {
		t.Errorf("after every release: %d running, %d waiting", r, w)
	}
}
