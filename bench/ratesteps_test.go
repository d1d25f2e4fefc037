package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/smartfeed/smartfeed/bench/loadgen"
)

func TestReadStepHeld(t *testing.T) {
	bound := 10 * time.Millisecond
	for _, tc := range []struct {
		name string
		s    ReadStep
		want bool
	}{
		{"fast and on rate", ReadStep{Offered: 1000, Calls: 3000, Achieved: 1000, P99Ms: 4}, true},
		{"p99 at the bound", ReadStep{Offered: 1000, Calls: 3000, Achieved: 1000, P99Ms: 10}, false},
		{"p99 over the bound", ReadStep{Offered: 1000, Calls: 3000, Achieved: 1000, P99Ms: 25}, false},
		{"90% achieved", ReadStep{Offered: 1000, Calls: 2700, Achieved: 900, P99Ms: 4}, true},
		{"under 90% achieved", ReadStep{Offered: 1000, Calls: 2690, Achieved: 899, P99Ms: 4}, false},
		{"fast errors are not achieved", ReadStep{Offered: 1000, Calls: 3000, Errors: 600, Achieved: 800, P99Ms: 1}, false},
		{"nothing succeeded", ReadStep{Offered: 1000, Calls: 10, Errors: 10}, false},
	} {
		if got := tc.s.held(bound); got != tc.want {
			t.Errorf("%s: held = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// stepSystem is a System whose GetFeed is instant (or takes service) for its first fastCalls
// calls and then takes slow, and every failEvery-th call fails at once. Pin, Arrived and
// FanoutPending are there for the fanout that runs beside the searches.
type stepSystem struct {
	System
	calls     atomic.Int64
	pins      atomic.Int64
	fastCalls int64
	slow      time.Duration
	service   time.Duration
	failEvery int64
}

func (f *stepSystem) GetFeed(ctx context.Context, _ uint64, _ int) error {
	n := f.calls.Add(1)
	if f.failEvery > 0 && n%f.failEvery == 0 {
		return errors.New("unavailable")
	}
	d := f.service
	if n > f.fastCalls {
		d = f.slow
	}
	if d > 0 {
		// sleep: the call's injected latency, exact on the bubble's clock.
		time.Sleep(d)
	}
	return nil
}

func (f *stepSystem) Pin(context.Context, uint64, []uint64) (uint64, error) {
	return uint64(f.pins.Add(1)), nil
}
func (f *stepSystem) Arrived(context.Context, uint64, uint64) (time.Time, bool, error) {
	return time.Now(), true, nil
}
func (f *stepSystem) FanoutPending(context.Context) (int, error) { return 0, nil }

// instantBaseline is a Redis peer that answers at once.
type instantBaseline struct{ reads atomic.Int64 }

func (b *instantBaseline) Push(context.Context, []uint64, uint64, float64) (int, error) {
	return 0, nil
}
func (b *instantBaseline) Read(context.Context, uint64, int) ([]uint64, error) {
	b.reads.Add(1)
	return nil, nil
}

// The steps run inside a synctest bubble: its clock moves only when every goroutine waits, so a
// call's latency is exactly the time its fake GetFeed sleeps, whatever the machine's load.
const (
	testBound   = 50 * time.Millisecond
	testStepFor = 400 * time.Millisecond
)

func TestRateStepsStopRule(t *testing.T) {
	four := []float64{50, 100, 200, 400}
	for _, tc := range []struct {
		name      string
		sys       *stepSystem
		rates     []float64
		conc      int
		wantSteps int
		wantBest  float64
		label     string
	}{{
		// 21 + 41 calls in the first two steps (both ends of each step are scheduled); from
		// the third step's fourth call on, calls take 120 ms.
		name: "stops at the first step whose p99 reaches the bound", sys: &stepSystem{fastCalls: 65, slow: 120 * time.Millisecond},
		rates: four, conc: 64, wantSteps: 3, wantBest: 100, label: "100/s",
	}, {
		// 2 calls of 10 ms at once: at most 200 calls/s, so 400/s offered achieves half of it
		// while each call still takes 10 ms (the wait for a slot shows only from the schedule).
		name: "stops at the first step under 90% of offered achieved", sys: &stepSystem{fastCalls: 1 << 40, service: 10 * time.Millisecond},
		rates: []float64{50, 100, 400}, conc: 2, wantSteps: 3, wantBest: 100, label: "100/s",
	}, {
		name: "a first step not held holds nothing", sys: &stepSystem{slow: 120 * time.Millisecond},
		rates: four, conc: 64, wantSteps: 1, wantBest: 0, label: "none (not even 50/s)",
	}, {
		name: "every step held", sys: &stepSystem{fastCalls: 1 << 40},
		rates: four, conc: 64, wantSteps: 4, wantBest: 400, label: "≥ 400/s (held every step tried)",
	}, {
		// Every 4th call fails at once: 75% achieved at every rate.
		name: "errors are not achieved", sys: &stepSystem{fastCalls: 1 << 40, failEvery: 4},
		rates: four, conc: 64, wantSteps: 1, wantBest: 0, label: "none (not even 50/s)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var lines []string
				say := func(f string, a ...any) { lines = append(lines, f) }
				steps, best := rateSteps(context.Background(), "GetFeed", tc.rates, testStepFor, 0, tc.conc, testBound,
					func(int) error { return tc.sys.GetFeed(context.Background(), 0, 50) }, nil, say)
				if len(steps) != tc.wantSteps || best != tc.wantBest {
					t.Fatalf("%d steps, best %.0f/s; want %d steps, best %.0f/s: %+v", len(steps), best, tc.wantSteps, tc.wantBest, steps)
				}
				for i, s := range steps {
					if s.Offered != tc.rates[i] {
						t.Errorf("step %d offered %.0f/s, want %.0f/s", i, s.Offered, tc.rates[i])
					}
					if want := i < len(steps)-1 || tc.wantBest == tc.rates[len(tc.rates)-1]; s.Held != want {
						t.Errorf("step %d (%.0f/s) held = %v, want %v: %+v", i, s.Offered, s.Held, want, s)
					}
					if s.SchedP99Ms < s.P99Ms {
						t.Errorf("step %d: p99 from schedule %.2f ms under the p99 %.2f ms", i, s.SchedP99Ms, s.P99Ms)
					}
				}
				if len(lines) != len(steps) {
					t.Errorf("%d lines said for %d steps", len(lines), len(steps))
				}
				if got := rateStepsLabel(steps, best); got != tc.label {
					t.Errorf("label %q, want %q", got, tc.label)
				}
			})
		})
	}
}

// readRates drives the System's GetFeed and then the peer over the same steps, with fanout
// publishing beside them.
func TestReadRatesOnFakeSystem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 41 + 41 calls in the first two steps; from the third step's ninth call on, 120 ms.
		sys := &stepSystem{fastCalls: 90, slow: 120 * time.Millisecond}
		base := &instantBaseline{}
		m := NewModel(50, 1)
		w := &World{M: m, IDs: make([]uint64, m.Users)}
		for i := range w.IDs {
			w.IDs[i] = uint64(i + 1)
		}
		opts := Quick()
		opts.EventRate, opts.ReadStepRates, opts.ReadStepFor, opts.ReadP99Bound = 20, []float64{50, 100, 200, 400}, testStepFor, testBound
		opts.ReadStepMinCalls = 40 // the 50/s step runs 800 ms (41 calls), the others testStepFor
		var said strings.Builder
		say := func(f string, a ...any) { fmt.Fprintf(&said, f+"\n", a...) }
		r := readRates(context.Background(), sys, base, w, m.Readers(100, 3), opts, time.Now(), say)
		gs, gbest, rs, rbest := r.getfeed, r.getfeedBest, r.redis, r.redisBest
		if len(gs) != 3 || gbest != 100 {
			t.Errorf("GetFeed: %d steps, best %.0f/s; want 3 steps, best 100/s: %+v", len(gs), gbest, gs)
		}
		if len(gs) > 0 && (gs[0].Calls != 41 || gs[0].Seconds < 0.8) {
			t.Errorf("the 50/s step made %d calls in %.2f s; want 41 in at least 0.8 s (ReadStepMinCalls 40)", gs[0].Calls, gs[0].Seconds)
		}
		if len(rs) != 4 || rbest != 400 {
			t.Errorf("Redis: %d steps, best %.0f/s; want 4 steps, best 400/s: %+v", len(rs), rbest, rs)
		}
		if n := base.reads.Load(); n < 280 {
			t.Errorf("the peer was read %d times, want about 324 (41 + 41 + 81 + 161)", n)
		}
		if sys.pins.Load() == 0 {
			t.Error("no fanout ran beside the searches")
		}
		if !strings.Contains(said.String(), "GetFeed held 100/s with p99 under 50ms; Redis ZREVRANGE ≥ 400/s (held every step tried)\n") {
			t.Errorf("summary line missing:\n%s", said.String())
		}
		if len(r.floor) != 0 {
			t.Errorf("a System that is no Pinger: %d empty-call steps, want none", len(r.floor))
		}
	})
}

// pingStepSystem is a stepSystem whose empty call (Pinger) takes ping after its first fastPings.
type pingStepSystem struct {
	*stepSystem
	pings     atomic.Int64
	fastPings int64
	ping      time.Duration
}

func (p *pingStepSystem) Ping(context.Context) error {
	if p.pings.Add(1) > p.fastPings {
		// sleep: the empty call's injected latency, exact on the bubble's clock.
		time.Sleep(p.ping)
	}
	return nil
}

// With a Pinger, the same steps run on the empty call after the peer's: the transport's own
// ceiling, searched like the others.
func TestReadRatesFloorSearch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The empty call is instant for the first two steps (41 + 41 calls), then takes 120 ms.
		sys := &pingStepSystem{stepSystem: &stepSystem{fastCalls: 1 << 40}, fastPings: 90, ping: 120 * time.Millisecond}
		m := NewModel(50, 1)
		w := &World{M: m, IDs: make([]uint64, m.Users)}
		for i := range w.IDs {
			w.IDs[i] = uint64(i + 1)
		}
		opts := Quick()
		opts.EventRate, opts.ReadStepRates, opts.ReadStepFor, opts.ReadP99Bound = 20, []float64{50, 100, 200}, testStepFor, testBound
		opts.ReadStepMinCalls = 40
		var said strings.Builder
		say := func(f string, a ...any) { fmt.Fprintf(&said, f+"\n", a...) }
		r := readRates(context.Background(), sys, &instantBaseline{}, w, m.Readers(100, 3), opts, time.Now(), say)
		if len(r.getfeed) != 3 || r.getfeedBest != 200 || len(r.redis) != 3 {
			t.Errorf("GetFeed %d steps best %.0f, Redis %d steps; want 3, 200, 3", len(r.getfeed), r.getfeedBest, len(r.redis))
		}
		if len(r.floor) != 3 || r.floorBest != 100 || r.floor[2].Held {
			t.Errorf("empty call: %d steps, best %.0f/s; want 3 steps, best 100/s, the last not held: %+v", len(r.floor), r.floorBest, r.floor)
		}
		if n := sys.pings.Load(); n < 120 {
			t.Errorf("%d empty calls, want about 142 (41 + 41 + 61)", n)
		}
		if want := "; an empty gRPC call 100/s\n"; !strings.Contains(said.String(), want) {
			t.Errorf("summary line without %q:\n%s", want, said.String())
		}
		res := &Results{Ratios: map[string]float64{}, RateStepBoundMs: 10, GetFeedRateSteps: r.getfeed, GetFeedMaxRate: r.getfeedBest,
			RedisRateSteps: r.redis, RedisMaxRate: r.redisBest, FloorRateSteps: r.floor, FloorMaxRate: r.floorBest}
		if got, want := res.RateStepsSummary(), "; an empty gRPC call held 100/s"; !strings.HasSuffix(got, want) {
			t.Errorf("summary %q, want it to end with %q", got, want)
		}
		md := Markdown(res, "")
		for _, want := range []string{"| empty gRPC call | 200 |", "an empty call on GetFeed's gRPC connection held **100/s**"} {
			if !strings.Contains(md, want) {
				t.Errorf("report without %q", want)
			}
		}
	})
}

// The report shows both searches and the highest rates held.
func TestReportHasRateSteps(t *testing.T) {
	r := &Results{Profile: "quick", Ratios: map[string]float64{}, RateStepBoundMs: 10, RateStepConc: 128,
		GetFeedRateSteps: []ReadStep{{Offered: 200, Achieved: 199, P50Ms: 1.5, P99Ms: 4.25, Held: true},
			{Offered: 500, Achieved: 410, P50Ms: 9, P99Ms: 31.5, Errors: 3}},
		GetFeedMaxRate: 200,
		RedisRateSteps: []ReadStep{{Offered: 200, Achieved: 200, P99Ms: 0.5, Held: true}, {Offered: 500, Achieved: 500, P99Ms: 0.6, Held: true}},
		RedisMaxRate:   500}
	if got, want := r.RateStepsSummary(), "GetFeed held 200/s with p99 under 10 ms; Redis ZREVRANGE held ≥ 500/s (held every step tried)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	md := Markdown(r, "")
	for _, want := range []string{"## Read throughput", "| GetFeed | 500 | 410 | 9.00 ms | 31.50 ms |",
		"GetFeed held **200/s**", "Redis ZREVRANGE held **≥ 500/s (held every step tried)**"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// recordingSystem records the users GetFeed was called for; it fails for the users in fail.
type recordingSystem struct {
	System
	users []uint64
	fail  map[uint64]bool
}

func (f *recordingSystem) GetFeed(_ context.Context, user uint64, _ int) error {
	f.users = append(f.users, user)
	if f.fail[user] {
		return errors.New("unavailable")
	}
	return nil
}

// visitOnce calls GetFeed once per distinct reader, in the order they first appear, and times
// only the calls that succeeded.
func TestVisitOnce(t *testing.T) {
	w := &World{IDs: []uint64{10, 11, 12, 13}}
	sys := &recordingSystem{fail: map[uint64]bool{12: true}}
	lat, seen := visitOnce(context.Background(), sys, w, []int{2, 0, 2, 3, 0, 2, 3}, 50)
	if diff := cmp.Diff([]uint64{12, 10, 13}, sys.users); diff != "" {
		t.Errorf("GetFeed calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]bool{0: true, 2: true, 3: true}, seen); diff != "" {
		t.Errorf("distinct readers (-want +got):\n%s", diff)
	}
	if lat.N != 2 {
		t.Errorf("%d visits timed, want 2 (the failed one is not)", lat.N)
	}
}

// The report times GetFeed's pages by fresh status at each rate, from the load generator's steps.
func TestReportHasFreshLatency(t *testing.T) {
	r := &Results{Profile: "quick", Ratios: map[string]float64{}, RateStepBoundMs: 10,
		GetFeedRateSteps: []ReadStep{{Offered: 1000, Achieved: 1000, P50Ms: 1, P99Ms: 12}},
		LoadGen: &LoadGenResult{Summary: &loadgen.Summary{Steps: []loadgen.Step{
			{Kind: loadgen.KindGetFeed, Offered: 1000, FreshFromSend: map[string]loadgen.Percentiles{
				"recent": {N: 700, P50: 0.5, P99: 3, P999: 7}, "included": {N: 300, P50: 2.25, P99: 14.5, P999: 30}}},
			{Kind: loadgen.KindRedis, Offered: 1000},
		}}}}
	md := Markdown(r, "")
	for _, want := range []string{"| offered/s | fresh status | pages | p50 | p99 | p99.9 |",
		"| 1000 | included | 300 | 2.25 ms | 14.50 ms | 30.00 ms |\n| 1000 | recent | 700 | 0.50 ms | 3.00 ms | 7.00 ms |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestMaxRateRatios: GetFeed's highest rate held over each peer's; a peer that held no rate
// gives no ratio, which Write lists as not measured (not 0, which would say GetFeed held none).
func TestMaxRateRatios(t *testing.T) {
	for name, tc := range map[string]struct {
		getfeed, redis, floor float64
		want                  map[string]float64
		notMeasured           []string
	}{
		"both held":       {1000, 10000, 5000, map[string]float64{"getfeed_max_rate_vs_redis": 0.1, "getfeed_max_rate_vs_grpc_floor": 0.2}, nil},
		"getfeed none":    {0, 10000, 5000, map[string]float64{"getfeed_max_rate_vs_redis": 0, "getfeed_max_rate_vs_grpc_floor": 0}, nil},
		"redis held none": {0, 0, 200, map[string]float64{"getfeed_max_rate_vs_grpc_floor": 0}, []string{"getfeed_max_rate_vs_redis"}},
	} {
		t.Run(name, func(t *testing.T) {
			res := &Results{Ratios: map[string]float64{}, GetFeedMaxRate: tc.getfeed, RedisMaxRate: tc.redis, FloorMaxRate: tc.floor}
			res.setMaxRateRatios()
			if diff := cmp.Diff(tc.want, res.Ratios); diff != "" {
				t.Errorf("ratios (-want +got):\n%s", diff)
			}
			if err := Write(t.TempDir(), res); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, k := range res.NotMeasured {
				if strings.Contains(k, "max_rate") {
					got = append(got, k)
				}
			}
			if diff := cmp.Diff(tc.notMeasured, got); diff != "" {
				t.Errorf("max-rate ratios not measured (-want +got):\n%s", diff)
			}
		})
	}
}
