package pinlater

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// blackHole accepts connections and never answers: a Redis that hangs.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// While Redis hangs, the callers of isDraining do not queue behind the one refreshing the
// drain set: they answer from the copy they have (before the fix every enqueue in the process,
// GetFeed's materialize enqueue among them, waited behind a client-wide lock held across the
// Redis call: 20 callers × the read timeout).
func TestIsDrainingHoldsNoLockAcrossRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: blackHole(t), ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	c := &Client{rdb: rdb, ttl: time.Millisecond, drain: map[string]bool{"fanout": true},
		drainT: time.Now().Add(-time.Hour)}
	const callers = 20
	took := make([]time.Duration, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			t0 := time.Now()
			v, err := c.isDraining(ctx, "fanout")
			took[i] = time.Since(t0)
			if err != nil || !v {
				t.Errorf("caller %d: isDraining = %v, %v; want the copy's true", i, v, err)
			}
		}()
	}
	wg.Wait()
	fast := 0
	for _, d := range took {
		if d < 100*time.Millisecond {
			fast++
		}
	}
	// One caller refreshes and waits out the read timeout; the others answer at once.
	if fast < callers-1 {
		t.Errorf("%d of %d callers answered within 100ms while Redis hung (took %v)", fast, callers, took)
	}
}
