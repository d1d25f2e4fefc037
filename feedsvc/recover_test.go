package feedsvc

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/zen"
)

// fakeInFlight is the generator as recovery sees it: the chunks it handed out (listed here by the
// test), minus those the fake generator has settled.
type fakeInFlight struct {
	gen    *fakeGen
	mu     sync.Mutex
	chunks map[zen.ID][]InFlightChunk
}

func (f *fakeInFlight) add(user zen.ID, c InFlightChunk) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chunks == nil {
		f.chunks = map[zen.ID][]InFlightChunk{}
	}
	f.chunks[user] = append(f.chunks[user], c)
}

func (f *fakeInFlight) InFlightUsers(_ context.Context, after zen.ID, limit int) ([]zen.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []zen.ID
	for u, cs := range f.chunks {
		if u > after && slices.ContainsFunc(cs, func(c InFlightChunk) bool { _, ok := f.gen.settledAs(c.ID); return !ok }) {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out[:min(limit, len(out))], nil
}

func (f *fakeInFlight) PendingChunks(_ context.Context, user zen.ID) ([]InFlightChunk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []InFlightChunk
	for _, c := range f.chunks[user] {
		if _, ok := f.gen.settledAs(c.ID); !ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeInFlight) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	return f.gen.Settle(ctx, user, chunkID, delivered)
}

// TestRecoverer: what one pass does with each kind of chunk a crash leaves behind.
func TestRecoverer(t *testing.T) {
	now := time.Now()
	old, young := now.Add(-2*time.Minute).UnixMilli(), now.UnixMilli()
	type outcome struct {
		Settled   bool // the generator was told
		Delivered bool
		InFeed    int // items of the user's materialized feed
	}
	tests := []struct {
		name string
		// served: the chunk was recorded by a GetFeed whose materialize job was lost; else the
		// generator handed it out and the feed never recorded it.
		served    bool
		createdMs int64
		withGen   bool
		olderThan time.Duration
		want      outcome
		wantN     int
	}{
		{"never recorded, old: back to the pools", false, old, true, time.Minute, outcome{Settled: true}, 1},
		{"never recorded, young: left alone", false, young, true, time.Minute, outcome{}, 0},
		{"recorded, job lost: materialized through the generator's list", true, old, true, time.Minute,
			outcome{Settled: true, Delivered: true, InFeed: 5}, 1},
		{"recorded, job lost, no generator: materialized from the feed's index", true, old, false, time.Millisecond,
			outcome{Settled: true, Delivered: true, InFeed: 5}, 1},
		{"never recorded, no generator: nothing to see", false, old, false, time.Millisecond, outcome{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			id := "c1"
			if tt.served {
				e.get(t, "", 10)
				e.svc.Wait()
				e.queue.take() // the materialize job is lost
			} else {
				if _, err := e.gen.GenerateChunk(t.Context(), e.user); err != nil { // handed out, never recorded
					t.Fatal(err)
				}
			}
			var gen InFlight
			if tt.withGen {
				f := &fakeInFlight{gen: e.gen}
				f.add(e.user, InFlightChunk{ID: id, CreatedMs: tt.createdMs})
				gen = f
			}
			// sleep: the served chunk grows older than the smallest olderThan (1 ms).
			time.Sleep(5 * time.Millisecond)
			r := NewRecoverer(e.svc, gen, RecoverOptions{OlderThan: tt.olderThan, Batch: 1, Now: func() time.Time { return now }})
			n, err := r.Pass(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			e.svc.Wait()
			e.flush(t)
			var got outcome
			got.Delivered, got.Settled = e.gen.settledAs(id)
			e.gen.mu.Lock()
			e.gen.err = errors.New("generator down") // the read below shows the materialized feed only
			e.gen.mu.Unlock()
			got.InFeed = len(e.all(t, 100))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			if n != tt.wantN {
				t.Errorf("pass recovered %d chunks, want %d", n, tt.wantN)
			}
			// A second pass finds nothing left to do.
			if n, err := r.Pass(t.Context()); err != nil || n != 0 {
				t.Errorf("second pass: %d, %v; want 0, nil", n, err)
			}
		})
	}
}

// TestRecovererPagesUsers: more in-flight users than one batch are all visited in one pass.
func TestRecovererPagesUsers(t *testing.T) {
	e := newEnv(t, nil)
	f := &fakeInFlight{gen: e.gen}
	old := time.Now().Add(-time.Hour).UnixMilli()
	var want []string
	for i := range 5 {
		u := userID(t, uint64(10+i))
		c, err := e.gen.GenerateChunk(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		f.add(u, InFlightChunk{ID: c.ID, CreatedMs: old})
		want = append(want, c.ID)
	}
	n, err := NewRecoverer(e.svc, f, RecoverOptions{Batch: 2}).Pass(t.Context())
	if err != nil || n != len(want) {
		t.Fatalf("pass: %d, %v; want %d, nil", n, err, len(want))
	}
	for _, id := range want {
		if d, ok := e.gen.settledAs(id); !ok || d {
			t.Errorf("chunk %s: settled %v, delivered %v; want given back", id, ok, d)
		}
	}
}

// scanTimes records when the pending index of each shard was scanned.
type scanTimes struct {
	zen.Table
	mu sync.Mutex
	at []time.Time
}

func (s *scanTimes) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if len(o.Start) > 8 && o.Start[8] == prefixPendingIndex {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.mu.Unlock()
	}
	return s.Table.Scan(ctx, o)
}

// passes cuts the scan times into passes (a new pass starts after a gap longer than gap) and
// returns how long each took, first scan to last, and its number of scans.
func (s *scanTimes) passes(gap time.Duration) (took []time.Duration, scans []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := 0
	for i, at := range s.at {
		if i == 0 || at.Sub(s.at[i-1]) > gap {
			took, scans, first = append(took, 0), append(scans, 0), i
		}
		took[len(took)-1] = at.Sub(s.at[first])
		scans[len(scans)-1]++
	}
	return took, scans
}

// TestRecovererRunSpreadsPasses: the startup pass reads every shard's pending index at once; the
// periodic passes after it spread those reads over Spread of the interval (on HBase a pass at
// once is a burst of thousands of region server calls every minute), and still recover what
// a crash left.
func TestRecovererRunSpreadsPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, users := pendingOnShards(t, nil)
		const shards = 16
		st := &scanTimes{Table: e.repl}
		e.rebuild(t, func(d *Deps) { d.Primary, d.IndexShards, d.Now = st, shards, e.svc.now })
		every := 400 * time.Millisecond
		r := NewRecoverer(e.svc, nil, RecoverOptions{OlderThan: time.Minute, Now: e.svc.now})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { r.Run(ctx, every); close(done) }()
		// The bubble's clock moves only when every goroutine in it waits: the passes' scans are
		// timed by the recoverer's tickers alone, whatever the machine's load.
		// sleep: two and a half intervals of the bubble's clock: the startup pass and one periodic one.
		time.Sleep(2*every + every/2)
		cancel()
		<-done

		took, scans := st.passes(every / 4)
		if len(took) < 2 {
			t.Fatalf("%d passes seen (%v scans), want at least 2", len(took), scans)
		}
		// Shards 0..7 and then 8..15 are walked by two RecoverAll calls per pass at most; each pass
		// reads every shard once.
		if scans[0] != shards || scans[1] != shards {
			t.Errorf("scans per pass = %v, want %d in each", scans, shards)
		}
		if took[0] != 0 {
			t.Errorf("startup pass took %v, want it at once", took[0])
		}
		// Spread 0.5: 15 gaps of every/2/16 after the first scan.
		if want := time.Duration(float64(every) * 0.5 * (shards - 1) / shards); took[1] != want {
			t.Errorf("periodic pass took %v, want it spread over %v", took[1], want)
		}
		if diff := cmp.Diff([]bool{true, true, false}, doneUsers(t, e, users)); diff != "" {
			t.Errorf("users recovered (-want +got):\n%s", diff)
		}
	})
}

// TestRecoveryTakesALane: the recovery pass completes a chunk in a background lane, as the read
// path's own background work does. While something else holds the only lane the pass waits,
// with nothing materialized; once the lane is free it completes the chunk and gives the lane
// back. A pass whose context ends while it waits fails without materializing.
func TestRecoveryTakesALane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.rebuild(t, func(d *Deps) { d.BackgroundLanes = 1 })
		e.get(t, "", 10)
		e.svc.Wait()
		e.queue.take() // the materialize job is lost
		// sleep: the served chunk grows older than the pass's olderThan (1 ms) on the bubble's clock.
		time.Sleep(5 * time.Millisecond)
		r := NewRecoverer(e.svc, nil, RecoverOptions{OlderThan: time.Millisecond, Batch: 1})
		done := func() float64 { return testutil.ToFloat64(e.svc.m.materialized.WithLabelValues("done")) }
		type result struct {
			n   int
			err error
		}

		holdLane(t, e.svc) // something else holds the only lane
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan result, 1)
		go func() { n, err := r.Pass(ctx); out <- result{n, err} }()
		synctest.Wait() // every goroutine of the bubble is blocked: the pass waits for the lane
		select {
		case res := <-out:
			t.Fatalf("the pass ended with the lane held: %+v", res)
		default:
		}
		if got := done(); got != 0 {
			t.Fatalf("%v chunks materialized with the lane held, want 0", got)
		}
		cancel()
		if res := <-out; !errors.Is(res.err, context.Canceled) || res.n != 0 {
			t.Fatalf("cancelled pass: %+v; want 0 chunks and context.Canceled", res)
		}
		if got := done(); got != 0 {
			t.Fatalf("%v chunks materialized by the cancelled pass, want 0", got)
		}

		e.svc.lanes.Release() // the lane is free: the next pass completes the chunk
		if n, err := r.Pass(t.Context()); err != nil || n != 1 {
			t.Fatalf("pass with the lane free: %d, %v; want 1, nil", n, err)
		}
		if got := done(); got != 1 {
			t.Errorf("%v chunks materialized, want 1", got)
		}
		if got := e.svc.lanes.InUse(); got != 0 {
			t.Errorf("%d lanes held after the pass, want 0", got)
		}
	})
}
