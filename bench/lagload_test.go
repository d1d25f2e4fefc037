package bench

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

func TestLagStepRates(t *testing.T) {
	if d := cmp.Diff([]float64{5, 10, 20, 80}, lagStepRates([]float64{5, 20, 80}, 10)); d != "" {
		t.Errorf("rates (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]float64{5, 20}, lagStepRates([]float64{20, 5}, 20)); d != "" {
		t.Errorf("rates with the sustained one among them (-want +got):\n%s", d)
	}
}

func TestLagBySecond(t *testing.T) {
	ms := time.Millisecond
	series := []lagPoint{{100 * ms, 10 * ms}, {900 * ms, 30 * ms}, {1500 * ms, 2000 * ms}, {3200 * ms, 5 * ms}}
	got := lagBySecond(series, func(at time.Duration) float64 {
		if at < 2*time.Second {
			return 5
		}
		return 20
	})
	want := []LagSecond{{At: 0, Rate: 5, N: 2, P50Ms: 10, P99Ms: 30, MaxMs: 30}, {At: 1, Rate: 5, N: 1, P50Ms: 2000, P99Ms: 2000, MaxMs: 2000},
		{At: 3, Rate: 20, N: 1, P50Ms: 5, P99Ms: 5, MaxMs: 5}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(LagSecond{})); d != "" {
		t.Errorf("by second (-want +got):\n%s", d)
	}
}

// lagSystem fans out instantly (its queues are always empty) with a lag of fast for the first
// fastPins pins and slow after; it counts a GetFeed for each call of the read load running.
type lagSystem struct {
	System
	fastPins   int64
	fast, slow time.Duration
	reads      atomic.Uint64

	mu      sync.Mutex
	pins    map[uint64]time.Time
	n       int64
	pinTime []time.Time
}

func (s *lagSystem) Pin(_ context.Context, _ uint64, _ []uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	now := time.Now()
	s.pins[uint64(s.n)] = now
	s.pinTime = append(s.pinTime, now)
	return uint64(s.n), nil
}

func (s *lagSystem) Arrived(_ context.Context, _, pin uint64) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lag := s.fast
	if int64(pin) > s.fastPins {
		lag = s.slow
	}
	return s.pins[pin].Add(lag), true, nil
}

func (s *lagSystem) FanoutPending(context.Context) (int, error) { return 0, nil }
func (s *lagSystem) FreshCounts() map[string]uint64 {
	return map[string]uint64{"included": s.reads.Load()}
}

// The steps run while the read load runs (every pin between its start and its stop), stop at
// the first rate at or above the sustained one whose lag p99 is over the bound, and report the
// highest rate under it and the lag at the sustained rate.
func TestLagUnderReads(t *testing.T) {
	ctx := context.Background()
	m := NewModel(60, 3)
	w := &World{M: m, IDs: make([]uint64, m.Users)}
	for i := range w.IDs {
		w.IDs[i] = uint64(i + 1)
	}
	// Steps at 5, 10, 20 and 40 events/s of 1 s each: the first 15 pins (5 + 10) are fast.
	sys := &lagSystem{fastPins: 15, fast: 100 * time.Millisecond, slow: 3 * time.Second, pins: map[uint64]time.Time{}}
	var started, stopped time.Time
	var gotRate float64
	opts := Options{StepRates: []float64{5, 20, 40}, EventRate: 10, StepFor: time.Second, LagBound: 2 * time.Second, LagReadRate: 1000,
		ReadLoad: func(ctx context.Context, users []uint64, rate float64) (func() (*loadgen.Report, error), error) {
			started, gotRate = time.Now(), rate
			done := make(chan struct{})
			go func() {
				t := time.NewTicker(time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-t.C:
						sys.reads.Add(1)
					}
				}
			}()
			return func() (*loadgen.Report, error) {
				close(done)
				stopped = time.Now()
				return &loadgen.Report{Windows: []loadgen.Window{{Kind: loadgen.KindGetFeed, Offered: rate, Achieved: 990}}, PeakRSSMiB: 12}, nil
			}, nil
		}}
	lr, err := lagUnderReads(ctx, sys, w, w.IDs, opts, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	if gotRate != 1000 {
		t.Errorf("read load offered %v/s, want 1000", gotRate)
	}
	var rates []float64
	for _, s := range lr.Steps {
		rates = append(rates, s.Rate)
	}
	if d := cmp.Diff([]float64{5, 10, 20}, rates); d != "" {
		t.Errorf("steps run (-want +got):\n%s", d)
	}
	if lr.MaxRate != 10 || math.Abs(lr.LagP99AtEventRate-0.1) > 0.01 {
		t.Errorf("max rate %v, lag p99 at 10/s %v s; want 10 and 0.1", lr.MaxRate, lr.LagP99AtEventRate)
	}
	for _, p := range sys.pinTime {
		if p.Before(started) || p.After(stopped) {
			t.Fatalf("a pin at %v, outside the read load (%v to %v)", p, started, stopped)
		}
	}
	if lr.GetFeed == nil || lr.GetFeed.Achieved != 990 || lr.GeneratorPeakRSSMiB != 12 {
		t.Errorf("the generator's window %+v, RSS %v", lr.GetFeed, lr.GeneratorPeakRSSMiB)
	}
	if len(lr.BySecond) == 0 {
		t.Error("no lag by second")
	}
	res := &Results{Ratios: map[string]float64{}, LagUnderReads: lr}
	md := lagUnderReadsMarkdown(res, func(s string) string { return s })
	if want := "lag p99 at the sustained 10 events/s: **0.10 s**"; !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
}
