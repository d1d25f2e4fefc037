package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestPacedAt: every call runs once, at most conc at once, none before its due time, due times
// spaced by 1/rate.
func TestPacedAt(t *testing.T) {
	const n, conc, rate = 60, 3, 2000.0
	var running, most atomic.Int64
	var mu sync.Mutex
	seen := map[int]time.Time{}
	got := pacedAt(context.Background(), rate, 0, n, conc, func(i int, due time.Time) {
		if now := time.Now(); now.Before(due) {
			t.Errorf("call %d started %v before its due time", i, due.Sub(now))
		}
		r := running.Add(1)
		for {
			m := most.Load()
			if r <= m || most.CompareAndSwap(m, r) {
				break
			}
		}
		// sleep: each call holds its slot 2 ms, so the calls overlap and the conc bound is tested.
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		mu.Lock()
		defer mu.Unlock()
		if _, dup := seen[i]; dup {
			t.Errorf("call %d ran twice", i)
		}
		seen[i] = due
	})
	if got != n || len(seen) != n {
		t.Fatalf("pacedAt returned %d and ran %d calls, want %d", got, len(seen), n)
	}
	if m := most.Load(); m > conc {
		t.Errorf("%d calls ran at once, want at most %d", m, conc)
	}
	step := time.Duration(float64(time.Second) / rate)
	for i := 1; i < n; i++ {
		if d := seen[i].Sub(seen[i-1]); d < step-time.Microsecond || d > step+time.Microsecond {
			t.Errorf("due times of calls %d and %d are %v apart, want %v", i-1, i, d, step)
		}
	}
}

// TestPacedStopsWithContext: a cancelled context ends the pacing and every started call is
// waited for.
func TestPacedStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var done atomic.Int64
		go func() {
			// sleep: the cancel comes 50 ms into an hour of pacing, on the bubble's clock.
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		paced(ctx, 100, time.Hour, 0, 4, func(int) {
			// sleep: each call takes 1 ms on the bubble's clock, so some are in flight at the cancel.
			time.Sleep(time.Millisecond)
			done.Add(1)
		})
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("paced ran %v after its context was cancelled", took)
		}
		if done.Load() == 0 {
			t.Error("no call ran before the cancel")
		}
	})
}

// TestPacedStartsNothingAfterCancel: no call starts once the context is cancelled, even when a
// slot is free as the wait for the next due time ends, and the count returned is the calls run.
func TestPacedStartsNothingAfterCancel(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var ran, late atomic.Int64
			go func() {
				// sleep: 55 ms on the bubble's clock falls between two due times (every 10 ms).
				time.Sleep(55 * time.Millisecond)
				cancel()
			}()
			got := pacedAt(ctx, 100, time.Hour, 0, 4, func(int, time.Time) {
				if ctx.Err() != nil {
					late.Add(1)
				}
				ran.Add(1)
			})
			if late.Load() > 0 {
				t.Errorf("%d calls started after the context was cancelled", late.Load())
			}
			if int64(got) != ran.Load() {
				t.Errorf("pacedAt returned %d, ran %d calls", got, ran.Load())
			}
		})
	}
}
