package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitTook runs Yield and returns how long it took.
func waitTook(ctx context.Context, g *Gate) time.Duration {
	start := time.Now()
	g.Yield(ctx)
	return time.Since(start)
}

func TestYieldWaitsForRequestsInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := New(time.Minute, reg)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitTook(t.Context(), g); d > 50*time.Millisecond {
		t.Fatalf("Yield with no request in flight took %v", d)
	}
	end1, end2 := g.Begin(), g.Begin()
	if n := g.InFlight(); n != 2 {
		t.Fatalf("InFlight = %d, want 2", n)
	}
	done := make(chan struct{})
	go func() {
		g.Yield(t.Context())
		close(done)
	}()
	end1()
	end1() // a second call of the same end does not count twice
	select {
	case <-done:
		t.Fatal("Yield returned while a request was still in flight")
	case <-time.After(100 * time.Millisecond):
	}
	end2()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Yield still waiting after the last request ended")
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after both ended, want 0", n)
	}
	if n := testutil.ToFloat64(g.yields); n != 1 {
		t.Errorf("yields counted %v, want 1 (the Yield with nothing in flight does not count)", n)
	}
	// The gate is reusable: a new request makes Yield wait again.
	end3 := g.Begin()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if d := waitTook(ctx, g); d < 40*time.Millisecond {
		t.Errorf("Yield with a request in flight returned after %v, before its context ended", d)
	}
	end3()
}

func TestYieldWaitsAtMostMaxWait(t *testing.T) {
	g, err := New(30*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	end := g.Begin()
	defer end()
	d := waitTook(t.Context(), g)
	if d < 25*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Yield took %v with a request in flight throughout, want about the 30ms max wait", d)
	}
}

func TestNilGateAdmitsAll(t *testing.T) {
	var g *Gate
	end := g.Begin()
	g.Yield(t.Context())
	end()
	if g.InFlight() != 0 {
		t.Fatal("nil gate counts requests")
	}
	if _, err := New(0, nil); err == nil {
		t.Fatal("New(0) accepted a zero max wait")
	}
}
