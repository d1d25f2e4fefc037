package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRotateInTurns checks that the kinds of call take turns over the same stretch of time,
// each getting its share and its own call numbering, and that each kind's results are its own.
func TestRotateInTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var log []int // the kind of each call, in the order they were made
		var seen [2][]int
		kind := func(k int, fail bool) func(i int) error {
			return func(i int) error {
				mu.Lock()
				log = append(log, k)
				seen[k] = append(seen[k], i)
				mu.Unlock()
				if fail {
					return errors.New("refused")
				}
				return nil
			}
		}
		start := time.Now()
		tr := rotate(context.Background(), 200, 400*time.Millisecond, 100*time.Millisecond, 4, kind(0, false), kind(1, true))
		took := time.Since(start)

		// Turns of 100 ms: the log switches kind every ~20 calls, 4 turns each, not once in the
		// middle.
		switches := 0
		for i := 1; i < len(log); i++ {
			if log[i] != log[i-1] {
				switches++
			}
		}
		if switches < 7 {
			t.Errorf("the kinds switched %d times over 8 turns, want 7: not in turns", switches)
		}
		// On the bubble's clock: exactly the two kinds' 400 ms.
		if took != 800*time.Millisecond {
			t.Errorf("rotate took %v, want 800 ms (400 ms each)", took)
		}
		for k := range 2 {
			// Each kind numbers its calls across its turns: 0..n-1, each once.
			want := make([]int, len(seen[k]))
			for i := range want {
				want[i] = i
			}
			got := append([]int(nil), seen[k]...)
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kind %d's call numbers (-want +got):\n%s", k, diff)
			}
			if n := tr[k].calls; n < 60 || n > 100 {
				t.Errorf("kind %d made %d calls in 400 ms at 200/s, want about 80", k, n)
			}
			if tr[k].calls != len(seen[k]) {
				t.Errorf("kind %d counted %d calls, made %d", k, tr[k].calls, len(seen[k]))
			}
		}
		if g := tr[0]; g.errs != 0 || len(g.inOrder) != g.calls || g.summary().N != g.calls || len(g.sorted()) != g.calls || !slices.IsSorted(g.sorted()) {
			t.Errorf("the good kind: %d errors, %d latencies in order, %d in the summary, of %d calls", g.errs, len(g.inOrder), g.summary().N, g.calls)
		}
		if g := tr[0]; len(g.starts) != len(g.inOrder) {
			t.Errorf("the good kind: %d starts beside %d latencies", len(g.starts), len(g.inOrder))
		}
		if b := tr[1]; b.errs != b.calls || len(b.inOrder) != 0 || b.rate() != 0 {
			t.Errorf("the failing kind: %d errors of %d calls, %d latencies, rate %v", b.errs, b.calls, len(b.inOrder), b.rate())
		}
		if r := tr[0].rate(); r < 120 || r > 220 {
			t.Errorf("the good kind's rate %.0f/s over its own turns, want about 200", r)
		}
		if tr[0].sched.result() == nil {
			t.Error("no scheduling delay over the good kind's turns")
		}
	})
}

// TestRotateOneTurnEach checks that with no slice each kind runs once, for the whole of d,
// one after the other.
func TestRotateOneTurnEach(t *testing.T) {
	var mu sync.Mutex
	var log []int
	kind := func(k int) func(int) error {
		return func(int) error { mu.Lock(); log = append(log, k); mu.Unlock(); return nil }
	}
	rotate(context.Background(), 200, 100*time.Millisecond, 0, 2, kind(0), kind(1))
	switches := 0
	for i := 1; i < len(log); i++ {
		if log[i] != log[i-1] {
			switches++
		}
	}
	if switches != 1 || len(log) == 0 || log[0] != 0 {
		t.Errorf("with no slice the kinds switched %d times (first %v), want once, GetFeed's first", switches, log[:min(1, len(log))])
	}
}

// TestRotateStopsWithContext checks that a cancelled context ends the rotation.
func TestRotateStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	rotate(ctx, 100, time.Hour, 50*time.Millisecond, 2, func(int) error { return nil }, func(int) error { return nil })
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("rotate ran %v past its context's 150 ms", took)
	}
}

// TestP99ByWindow cuts a phase into minutes by when each call started: the last window takes
// a remainder under half a window, a longer remainder is a window of its own, and a minute in
// which nothing started is 0.
func TestP99ByWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	// calls makes one call a second from 0 to last seconds, taking ms(second) milliseconds.
	calls := func(last int, ms func(s int) int) *turnResult {
		tr := &turnResult{}
		for s := 0; s <= last; s++ {
			tr.starts = append(tr.starts, t0.Add(time.Duration(s)*time.Second))
			tr.inOrder = append(tr.inOrder, time.Duration(ms(s))*time.Millisecond)
		}
		return tr
	}
	byMinute := func(s int) int { return s/60 + 1 }
	for _, tc := range []struct {
		name string
		tr   *turnResult
		span time.Duration
		want []float64
	}{
		{"three minutes and a little", calls(184, byMinute), 185 * time.Second, []float64{1, 2, 4}},
		{"a remainder under half joins the last", calls(199, func(s int) int { return min(s/60+1, 3) }), 200 * time.Second, []float64{1, 2, 3}},
		{"a remainder over half is its own", calls(214, byMinute), 215 * time.Second, []float64{1, 2, 3, 4}},
		{"an empty minute", &turnResult{starts: []time.Time{t0, t0.Add(150 * time.Second)}, inOrder: []time.Duration{time.Millisecond, 5 * time.Millisecond}},
			3 * time.Minute, []float64{1, 0, 5}},
		{"shorter than a window", calls(29, byMinute), 30 * time.Second, []float64{1}},
		{"no span", calls(3, byMinute), 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.tr.p99ByWindow(t0, t0.Add(tc.span), time.Minute)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("p99 by minute (-want +got):\n%s", diff)
			}
		})
	}
}

// beside makes its calls for as long as the peer runs, at the rate asked, and stops with it: a
// call the peer's end cuts short is not counted, and the peer's error is the result.
func TestBeside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var made []int
		call := func(ctx context.Context, i int) error {
			mu.Lock()
			made = append(made, i)
			mu.Unlock()
			if i == 0 { // in flight until the peer is done
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		s, err := beside(context.Background(), 200, 4, call, func(context.Context) error {
			// sleep: the peer runs 300 ms on the bubble's clock, the span the calls are paced in.
			time.Sleep(300 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(made)
		mu.Unlock()
		// The bubble's clock: calls due at 0, 5, ... 295 ms (60), and at the peer's last
		// instant two more may start: the one due at 300 ms, when its timer runs before the
		// peer's sleep ends, and the next, when pacedAt's wait for a slot meets the cancelled
		// context and a free slot at once and picks the slot (run.go's select).
		if n < 60 || n > 62 {
			t.Errorf("%d calls beside a 300 ms peer at 200/s, want 60 to 62", n)
		}
		if s.N != n-1 {
			t.Errorf("%d calls counted of %d made; want all but the one cut short", s.N, n)
		}
		// sleep: ten more calls' time on the bubble's clock, in which none may start.
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		if len(made) != n {
			t.Errorf("%d calls made after the peer was done", len(made)-n)
		}
		mu.Unlock()
		if _, err := beside(context.Background(), 200, 4, call, func(context.Context) error { return errors.New("no java") }); err == nil || err.Error() != "no java" {
			t.Errorf("the peer's error: got %v", err)
		}
	})
}
