package loadgen

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixedServer serves one call at a time (a slot channel: concurrency 1), each taking the
// service time slow(i) of the i-th call it serves.
type fixedServer struct {
	slot chan struct{}
	n    int
	slow func(i int) time.Duration
}

func newFixedServer(slow func(i int) time.Duration) *fixedServer {
	return &fixedServer{slot: make(chan struct{}, 1), slow: slow}
}

func (s *fixedServer) call(ctx context.Context, _ uint64) Outcome {
	select {
	case s.slot <- struct{}{}:
	case <-ctx.Done():
		return Outcome{Code: "DeadlineExceeded"}
	}
	d := s.slow(s.n)
	s.n++
	time.Sleep(d) // sleep: the server's injected service time per call
	<-s.slot
	return Outcome{Code: CodeOK, Fresh: "included"}
}

// within reports whether got is want within rel (relative) — HdrHistogram's 3 significant
// digits put a value up to 0.1% above the one recorded.
func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// TestFromScheduleCountsQueueing runs the generator against a server that takes a known,
// fixed time per call, one call at a time, in synctest's bubble (its clock moves only when
// every goroutine waits, so the service time is exact, whatever else the machine runs). Under
// its capacity both latencies are the service time. Over it, the backlog grows through the
// window: counted from each call's scheduled start the latencies grow with it (call i of a
// window offered at twice the capacity waits 2.5 i ms for its turn), while counted from the
// send they stay the service time: a generator that timed from the send would report a server
// drowning in its backlog as healthy (coordinated omission).
func TestFromScheduleCountsQueueing(t *testing.T) {
	const service = 5 * time.Millisecond // capacity 200/s
	type pcts struct{ P50, P99, P999 float64 }
	for _, tc := range []struct {
		name             string
		rate             float64
		inFlight         int
		sched, send      pcts
		achieved         float64
		held             bool
		minSeconds       float64
		unsent, schedule int
	}{
		// 100/s: a call every 10 ms, each served in 5 ms: no queue.
		{name: "under capacity", rate: 100, inFlight: 1, sched: pcts{5, 5, 5}, send: pcts{5, 5, 5},
			achieved: 100, held: true, minSeconds: 0.99, schedule: 100},
		// 400/s for 1 s: call i is due at 2.5i ms and, the server serving one at a time from
		// the first, ends at 5(i+1) ms: from its schedule it took 2.5i+5 ms. The 400 calls take
		// 2 s: 200/s achieved.
		{name: "twice the capacity, one in flight", rate: 400, inFlight: 1,
			sched: pcts{2.5*199 + 5, 2.5*395 + 5, 2.5*399 + 5}, send: pcts{5, 5, 5},
			achieved: 200, held: false, minSeconds: 2, schedule: 400},
		// 8 in flight queue at the server instead of the generator: from the send they then
		// wait behind up to 7 others (40 ms), from the schedule as long as before.
		{name: "twice the capacity, eight in flight", rate: 400, inFlight: 8,
			sched: pcts{2.5*199 + 5, 2.5*395 + 5, 2.5*399 + 5}, send: pcts{40, 40, 40},
			achieved: 200, held: false, minSeconds: 2, schedule: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newFixedServer(func(int) time.Duration { return service })
				ws, sum, err := Run(t.Context(), Config{
					Kinds: []Kind{{Name: "fixed", Call: srv.call}}, Rates: []float64{tc.rate}, Window: time.Second,
					Overrun: 10 * time.Second, InFlight: tc.inFlight, Bound: 10 * time.Millisecond,
					LoadAvg: func() (float64, error) { return 0.5, nil }, Cores: 2,
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(ws) != 1 {
					t.Fatalf("%d windows, want 1", len(ws))
				}
				w := ws[0]
				if w.Scheduled != tc.schedule || w.Unsent != tc.unsent || w.Errors[CodeOK] != tc.schedule {
					t.Errorf("scheduled %d, unsent %d, ok %d; want %d, %d, %d", w.Scheduled, w.Unsent, w.Errors[CodeOK], tc.schedule, tc.unsent, tc.schedule)
				}
				for _, c := range []struct {
					what      string
					got, want pcts
				}{
					{"from schedule", pcts{w.FromSchedule.P50, w.FromSchedule.P99, w.FromSchedule.P999}, tc.sched},
					{"from send", pcts{w.FromSend.P50, w.FromSend.P99, w.FromSend.P999}, tc.send},
				} {
					// The first eight of "eight in flight" find the server's queue shorter:
					// from the send, the p50 and up are the full queue's.
					if !within(c.got.P50, c.want.P50, 0.002) || !within(c.got.P99, c.want.P99, 0.002) || !within(c.got.P999, c.want.P999, 0.002) {
						t.Errorf("%s: got %+v ms, want %+v ms (within 0.2%%)", c.what, c.got, c.want)
					}
				}
				if w.Seconds < tc.minSeconds || !within(w.Achieved, tc.achieved, 0.01) {
					t.Errorf("%.3f s, achieved %.1f/s; want ≥ %.0f s and %.0f/s", w.Seconds, w.Achieved, tc.minSeconds, tc.achieved)
				}
				if w.Held != tc.held || sum.MaxRate["fixed"] != map[bool]float64{true: tc.rate, false: 0}[tc.held] {
					t.Errorf("held %v, max rate %v; want held %v", w.Held, sum.MaxRate["fixed"], tc.held)
				}
				if diff := cmp.Diff(map[string]int{"included": tc.schedule}, w.Fresh); diff != "" {
					t.Errorf("fresh (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestPercentilesMatchInjected: a server whose every 50th call takes 40 ms and the others 2 ms
// (2% slow), offered well under its capacity: the p50 from the send is 2 ms and the p99 and
// p99.9 are 40 ms, as injected; from the schedule a slow call's successor, due 10 ms after
// it, waits 30 ms more for the server.
func TestPercentilesMatchInjected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFixedServer(func(i int) time.Duration {
			if i%50 == 49 {
				return 40 * time.Millisecond
			}
			return 2 * time.Millisecond
		})
		ws, _, err := Run(t.Context(), Config{Kinds: []Kind{{Name: "fixed", Call: srv.call}}, Rates: []float64{100},
			Window: 10 * time.Second, InFlight: 4, Bound: 10 * time.Millisecond, LoadAvg: func() (float64, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		w := ws[0]
		if w.FromSend.N != 1000 || !within(w.FromSend.P50, 2, 0.002) || !within(w.FromSend.P99, 40, 0.002) || !within(w.FromSend.P999, 40, 0.002) {
			t.Errorf("from send %+v: want 1000 calls, p50 2 ms, p99 and p99.9 40 ms", w.FromSend)
		}
		// 20 slow calls (2%) and 20 successors that queued behind them (2 + 30 ms): p99 40 ms.
		if !within(w.FromSchedule.P50, 2, 0.002) || !within(w.FromSchedule.P99, 40, 0.002) || w.Held {
			t.Errorf("from schedule %+v (held %v): want p50 2 ms, p99 40 ms, not held", w.FromSchedule, w.Held)
		}
	})
}

// TestOverrunCountsUnsentCalls: offered far over capacity with a short overrun, the calls never
// sent are counted, and counted in the from-schedule histogram at their lower bound (the time
// they had waited when the generator gave up on them), never left out.
func TestOverrunCountsUnsentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFixedServer(func(int) time.Duration { return 10 * time.Millisecond }) // 100/s
		ws, _, err := Run(t.Context(), Config{Kinds: []Kind{{Name: "fixed", Call: srv.call}}, Rates: []float64{1000},
			Window: time.Second, Overrun: 0, InFlight: 1, Bound: 10 * time.Millisecond, LoadAvg: func() (float64, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		w := ws[0]
		// One slot, 10 ms a call: about 100 sent in the second (the last one waited for), the
		// other 900 not.
		if w.Errors[CodeOK] < 95 || w.Errors[CodeOK] > 105 || w.Unsent != 1000-w.Errors[CodeOK] {
			t.Errorf("ok %d, unsent %d: want about 100 and the rest", w.Errors[CodeOK], w.Unsent)
		}
		if w.FromSchedule.N != 1000 {
			t.Errorf("from schedule has %d calls, want all 1000 (the unsent at their lower bound)", w.FromSchedule.N)
		}
		if w.FromSchedule.P50 < 400 {
			t.Errorf("from schedule p50 %.1f ms: want ≥ 400 ms (half the calls were due in the first half-second and waited at least until its end)", w.FromSchedule.P50)
		}
	})
}

// TestStepsAndAlternation: kinds alternate A B A B at each rate (two rounds), a kind that fails
// a rate is not stepped further except at the report rates, and its highest rate held is the
// last of an unbroken run from the bottom.
func TestStepsAndAlternation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fast := newFixedServer(func(int) time.Duration { return 100 * time.Microsecond }) // 10,000/s
		slow := newFixedServer(func(int) time.Duration { return 4 * time.Millisecond })   // 250/s
		var order []string
		idles := 0
		_, sum, err := Run(t.Context(), Config{
			Kinds:       []Kind{{Name: "fast", Call: fast.call}, {Name: "slow", Call: slow.call}},
			Rates:       []float64{400, 100, 200, 1000}, // sorted by Run
			ReportRates: []float64{100, 400},
			Window:      500 * time.Millisecond, Overrun: 5 * time.Second, Rounds: 2, InFlight: 1, Bound: 10 * time.Millisecond,
			LoadAvg:  func() (float64, error) { return 0, nil },
			Idle:     func(context.Context) error { idles++; return nil },
			OnWindow: func(w Window) { order = append(order, w.Kind) },
		})
		if err != nil {
			t.Fatal(err)
		}
		// 100, 200: both, twice; 400 (a report rate): both, slow not held; 1000: fast only.
		want := []string{"fast", "slow", "fast", "slow", "fast", "slow", "fast", "slow", "fast", "slow", "fast", "slow", "fast", "fast"}
		if diff := cmp.Diff(want, order); diff != "" {
			t.Errorf("window order (-want +got):\n%s", diff)
		}
		if idles != len(want) {
			t.Errorf("%d idle waits, want one before each of the %d windows", idles, len(want))
		}
		if diff := cmp.Diff(map[string]float64{"fast": 1000, "slow": 200}, sum.MaxRate); diff != "" {
			t.Errorf("max rate held (-want +got):\n%s", diff)
		}
		if st, ok := sum.Step("slow", 400); !ok || st.Held || st.Windows != 2 {
			t.Errorf("slow at 400/s: %+v, %v: want two windows, not held", st, ok)
		}
	})
}

// TestLoadWarning: a load average over the cores during a window is reported on it.
func TestLoadWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFixedServer(func(int) time.Duration { return time.Millisecond })
		load := 1.0
		ws, sum, err := Run(t.Context(), Config{Kinds: []Kind{{Name: "fixed", Call: srv.call}}, Rates: []float64{10},
			Window: 3 * time.Second, InFlight: 1, Bound: 10 * time.Millisecond, Cores: 2,
			LoadAvg: func() (float64, error) { load++; return load, nil }})
		if err != nil {
			t.Fatal(err)
		}
		if ws[0].LoadAvg.Start != 2 || ws[0].LoadAvg.Max < 3 || ws[0].Warning == "" || len(sum.Warnings) != 1 {
			t.Errorf("load %+v, warning %q, summary warnings %q: want a warning (load over 2 cores)", ws[0].LoadAvg, ws[0].Warning, sum.Warnings)
		}
	})
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		out  string
	}{
		{"0", []int{0}, "0"},
		{"0-1", []int{0, 1}, "0-1"},
		{"3,0-1,1", []int{0, 1, 3}, "0-1,3"},
	} {
		got, err := ParseCPUList(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" || FormatCPUList(got) != tc.out {
			t.Errorf("%q: %v (%s), want %v (%s)", tc.in, got, FormatCPUList(got), tc.want, tc.out)
		}
	}
	for _, bad := range []string{"", "x", "2-1", "-1"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestZipfPicker: with s > 1 the most drawn user takes a large share and most users are drawn
// rarely; every draw is one of the users.
func TestZipfPicker(t *testing.T) {
	users := make([]uint64, 1000)
	for i := range users {
		users[i] = uint64(1000 + i)
	}
	pick, err := ZipfPicker(users, 1.1, 3)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[uint64]int{}
	for range 100000 {
		u := pick()
		if u < 1000 || u >= 2000 {
			t.Fatalf("drew %d, not a user", u)
		}
		counts[u]++
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	if top < 10000 || len(counts) < 300 {
		t.Errorf("top user %d of 100000 draws, %d distinct: want a skew (top ≥ 10%%) over many users (≥ 300)", top, len(counts))
	}
}

// TestReportRatesAfterEveryKindFailed: a report rate is measured even when every kind failed a
// lower rate and the rates between were skipped.
func TestReportRatesAfterEveryKindFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := newFixedServer(func(int) time.Duration { return 4 * time.Millisecond }) // 250/s
		var offered []float64
		_, _, err := Run(t.Context(), Config{Kinds: []Kind{{Name: "slow", Call: slow.call}}, Rates: []float64{400, 1000, 2000},
			ReportRates: []float64{2000}, Window: 100 * time.Millisecond, Overrun: 0, InFlight: 1, Bound: 10 * time.Millisecond,
			LoadAvg: func() (float64, error) { return 0, nil }, OnWindow: func(w Window) { offered = append(offered, w.Offered) }})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]float64{400, 2000}, offered); diff != "" {
			t.Errorf("rates measured (-want +got):\n%s", diff)
		}
	})
}

// TestCancelledWindowCountsOnlyDueCalls: a window cancelled before its end (the lag-under-reads
// phase stops a window of an hour when its steps are done) counts as scheduled, and as unsent,
// only the calls due before the cancellation, not the rest of the hour.
func TestCancelledWindowCountsOnlyDueCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newFixedServer(func(int) time.Duration { return time.Millisecond })
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2*time.Second, cancel)
		ws, _, _ := Run(ctx, Config{Kinds: []Kind{{Name: "fixed", Call: srv.call}}, Rates: []float64{100},
			Window: time.Hour, Overrun: time.Second, InFlight: 4, Bound: 10 * time.Millisecond, LoadAvg: func() (float64, error) { return 0, nil }})
		if len(ws) != 1 {
			t.Fatalf("%d windows, want 1", len(ws))
		}
		w := ws[0]
		if w.Scheduled < 195 || w.Scheduled > 205 || w.Unsent > 5 {
			t.Errorf("scheduled %d, unsent %d: want about 200 (2 s at 100/s) and a few at most", w.Scheduled, w.Unsent)
		}
	})
}

// TestInterruptedCallsAreNotErrors: the calls in flight when the run is interrupted (the
// lag-under-reads phase stops its window so) fail with the cancellation; they are counted as
// interrupted, apart from the server's errors, and the calls the server failed on its own stay
// errors.
func TestInterruptedCallsAreNotErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		call := func(ctx context.Context, _ uint64) Outcome {
			switch since := time.Since(start); {
			case since < 500*time.Millisecond:
				return Outcome{Code: CodeOK}
			case since < time.Second:
				return Outcome{Code: "Unavailable"}
			}
			<-ctx.Done() // from 1 s on the server answers nothing until the interrupt
			return Outcome{Code: "Canceled"}
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2*time.Second, cancel)
		ws, sum, _ := Run(ctx, Config{Kinds: []Kind{{Name: "k", Call: call}}, Rates: []float64{100},
			Window: time.Hour, Overrun: time.Second, InFlight: 4, Bound: 10 * time.Millisecond, LoadAvg: func() (float64, error) { return 0, nil }})
		if len(ws) != 1 {
			t.Fatalf("%d windows, want 1", len(ws))
		}
		w := ws[0]
		if diff := cmp.Diff(map[string]int{CodeOK: 50, "Unavailable": 50}, w.Errors); diff != "" {
			t.Errorf("calls by code (-want +got):\n%s", diff)
		}
		if w.Interrupted != 4 {
			t.Errorf("interrupted %d, want the 4 in flight at the interrupt", w.Interrupted)
		}
		if sent := w.Scheduled - w.Unsent; sent != 104 {
			t.Errorf("sent %d (scheduled %d, unsent %d), want 104: 100 answered and 4 interrupted", sent, w.Scheduled, w.Unsent)
		}
		if len(sum.Steps) != 1 || sum.Steps[0].Interrupted != 4 {
			t.Errorf("steps %+v, want one with the 4 interrupted calls", sum.Steps)
		}
	})
}

// TestLatencyByFreshStatus: GetFeed's pages are timed by fresh status too, in each window and
// each step: a server whose pages that run the generator ("included") take 20 ms and whose
// others ("recent") take 1 ms shows each status at its own latency, where the whole window's
// p99 is the slow kind's alone.
func TestLatencyByFreshStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		call := func(_ context.Context, _ uint64) Outcome {
			n++
			if n%4 == 0 {
				time.Sleep(20 * time.Millisecond) // sleep: the injected service time of a generator page
				return Outcome{Code: CodeOK, Fresh: "included"}
			}
			time.Sleep(time.Millisecond) // sleep: the injected service time of a page as it stood
			return Outcome{Code: CodeOK, Fresh: "recent"}
		}
		ws, sum, err := Run(t.Context(), Config{Kinds: []Kind{{Name: KindGetFeed, Call: call}}, Rates: []float64{100},
			Window: 4 * time.Second, InFlight: 1, Bound: 10 * time.Millisecond, LoadAvg: func() (float64, error) { return 0, nil }})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			n   int64
			p99 float64
		}{"included": {100, 20}, "recent": {300, 1}}
		st, ok := sum.Step(KindGetFeed, 100)
		if !ok {
			t.Fatal("no step at 100/s")
		}
		for where, got := range map[string]map[string]Percentiles{"window": ws[0].FreshFromSend, "step": st.FreshFromSend} {
			if len(got) != len(want) {
				t.Fatalf("%s: fresh statuses %v, want %v", where, got, want)
			}
			for f, w := range want {
				q := got[f]
				if q.N != w.n || !within(q.P50, w.p99, 0.002) || !within(q.P99, w.p99, 0.002) {
					t.Errorf("%s: %s = %+v, want %d pages at %v ms", where, f, q, w.n, w.p99)
				}
			}
		}
		if !within(ws[0].FromSend.P99, 20, 0.002) {
			t.Errorf("the window's p99 from the send = %v ms, want 20 (the generator pages')", ws[0].FromSend.P99)
		}
	})
}
