package worker

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestFeatureCacheLifetime checks the cache's bounds: an entry is served for less than ttl
// after it was put, never after; forget drops it; a full generation rotates so that at most two
// generations are held; a nil cache keeps nothing.
func TestFeatureCacheLifetime(t *testing.T) {
	const ttl = time.Minute
	k := func(n int) featureKey { return featureKey{kind: featAffinity, user: zen.ID(n), of: 7} }
	type step struct {
		after  time.Duration // clock advance before the step
		put    []int         // keys put (value: the key's number)
		forget []int
		want   map[int]int64 // lookups of keys 1..4: the ones found
	}
	for name, steps := range map[string][]step{
		"served within ttl, not after": {
			{put: []int{1}, want: map[int]int64{1: 1}},
			{after: ttl/2 - time.Second, want: map[int]int64{1: 1}},
			{after: time.Second, want: map[int]int64{1: 1}}, // rotated into the old generation
			{after: ttl/2 - time.Second, want: map[int]int64{1: 1}},
			{after: time.Second, want: map[int]int64{}}, // ttl since the put
		},
		"a put after a rotation lives its own ttl": {
			{put: []int{1}},
			{after: ttl / 2, put: []int{2}, want: map[int]int64{1: 1, 2: 2}},
			{after: ttl / 2, want: map[int]int64{2: 2}},
			{after: ttl/2 - time.Second, want: map[int]int64{2: 2}},
			{after: time.Second, want: map[int]int64{}},
		},
		"idle longer than ttl": {
			{put: []int{1, 2}},
			{after: 3 * ttl, want: map[int]int64{}},
		},
		"forget": {
			{put: []int{1, 2}}, // a full generation: now the old one
			{after: ttl / 4, put: []int{3}, forget: []int{1, 3}, want: map[int]int64{2: 2}},
		},
		"full generations rotate": { // max 2 per generation: the oldest of four puts is gone
			{put: []int{1, 2, 3, 4}, want: map[int]int64{3: 3, 4: 4}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := &clock{t: time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)}
			c := newFeatureCache(ttl, 2, clk.now, prometheus.NewCounter(prometheus.CounterOpts{Name: "h"}),
				prometheus.NewCounter(prometheus.CounterOpts{Name: "m"}))
			for i, s := range steps {
				clk.add(s.after)
				var keys []featureKey
				var vals []int64
				for _, n := range s.put {
					keys, vals = append(keys, k(n)), append(vals, int64(n))
				}
				c.put(keys, vals)
				for _, n := range s.forget {
					c.forget(k(n))
				}
				if s.want == nil {
					continue
				}
				look := []featureKey{k(1), k(2), k(3), k(4)}
				got, ok := make([]int64, 4), make([]bool, 4)
				c.get(look, got, ok)
				found := map[int]int64{}
				for j := range look {
					if ok[j] {
						found[j+1] = got[j]
					}
				}
				if d := cmp.Diff(s.want, found); d != "" {
					t.Errorf("step %d (-want +got):\n%s", i, d)
				}
				if n := len(c.cur) + len(c.old); n > 4 {
					t.Errorf("step %d: %d entries held, want at most 2 generations of 2", i, n)
				}
			}
		})
	}
	var nilCache *featureCache
	ok := []bool{false}
	nilCache.put([]featureKey{k(1)}, []int64{1})
	nilCache.get([]featureKey{k(1)}, []int64{0}, ok)
	nilCache.forget(k(1))
	if ok[0] {
		t.Error("a nil cache served an entry")
	}
	if newFeatureCache(-1, 10, time.Now, nil, nil) != nil {
		t.Error("a negative ttl made a cache")
	}
}

// TestFanoutFeatureCache runs fanouts of alice's pins while another process (a direct write to
// the store) changes two receivers' features: the scores follow within FeatureTTL, at once after
// this worker's own RecordEngagement and follow backfill, and at once with the cache off or when
// the lists go out as chunk tasks. A user deleted after a fanout gets nothing from the next one
// once worker.active_ttl has passed (TestFanoutActiveCache has the rest of that).
func TestFanoutFeatureCache(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	for _, tc := range []struct {
		name  string
		cfg   Config
		stale bool // whether an outside change is seen only after ttl
	}{
		{"cached", Config{FeatureTTL: ttl}, true},
		{"off", Config{FeatureTTL: -1}, false},
		// Lists delivered by chunk tasks (long ones) read the features every time.
		{"chunk tasks", Config{FeatureTTL: ttl, InlineReceivers: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, zenmem.New(), tc.cfg, 4, nil)
			f0, f1, f2, f3 := w.followers[0], w.followers[1], w.followers[2], w.followers[3]
			fanout := func() map[zen.ID]float64 {
				t.Helper()
				return poolScores(t, w, fanoutNewPin(t, w, w.cats), f0, f1, f2, f3)
			}
			check := func(step string, s map[zen.ID]float64, raisedF1, raisedF2 bool) {
				t.Helper()
				if s[f0] == 0 {
					t.Fatalf("%s: f0 got nothing", step)
				}
				if got := s[f1] > s[f0]; got != raisedF1 {
					t.Errorf("%s: f1's score raised %v (%v vs f0's %v), want %v", step, got, s[f1], s[f0], raisedF1)
				}
				if got := s[f2] > s[f0]; got != raisedF2 {
					t.Errorf("%s: f2's score raised %v (%v vs f0's %v), want %v", step, got, s[f2], s[f0], raisedF2)
				}
			}
			check("first", fanout(), false, false)
			// Another process raises f1's affinity for alice and makes f2 follow cats.
			if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(f1, rowAffinity, w.alice), Value: i64Bytes(5)}}); err != nil {
				t.Fatal(err)
			}
			if err := w.g.AddEdge(ctx, zen.Edge{From: f2, Type: zen.EdgeFollowsInterest, To: w.cats}); err != nil {
				t.Fatal(err)
			}
			// And f3 is deleted (the tombstone only: the rest of the delete is not needed here).
			if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(f3, rowActive, 0), Value: i64Bytes(deletedUser)}}); err != nil {
				t.Fatal(err)
			}
			w.clk.add(ttl - time.Second)
			s := fanout()
			check("before ttl", s, !tc.stale, !tc.stale)
			if s[f3] != 0 {
				t.Errorf("deleted f3 got the pin (score %v)", s[f3])
			}
			w.clk.add(time.Second)
			check("at ttl", fanout(), true, true)

			// This worker's own writes are seen at once.
			if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(f1, rowAffinity, w.alice), Delete: true}}); err != nil {
				t.Fatal(err)
			}
			if err := w.g.RemoveEdge(ctx, f2, zen.EdgeFollowsInterest, w.cats); err != nil {
				t.Fatal(err)
			}
			w.clk.add(ttl)
			check("reset", fanout(), false, false) // f1 and f2 cached again, as plain followers
			if err := w.w.RecordEngagement(ctx, f1, w.pins[1], w.alice); err != nil {
				t.Fatal(err)
			}
			if err := w.g.AddEdge(ctx, zen.Edge{From: f2, Type: zen.EdgeFollowsInterest, To: w.cats}); err != nil {
				t.Fatal(err)
			}
			bf, err := pinlater.NewFollowBackfill(pinlater.FollowBackfillPayload{User: uint64(f2), Target: uint64(w.cats), TargetKind: pinlater.KindInterest})
			if err != nil {
				t.Fatal(err)
			}
			if err := handler(t, w.q, bf.Type()).ProcessTask(ctx, bf); err != nil {
				t.Fatal(err)
			}
			check("after this worker's engagement and follow backfill", fanout(), true, true)

			if tc.stale {
				hits := testutil.ToFloat64(w.w.m.featureHits)
				misses := testutil.ToFloat64(w.w.m.featureMisses)
				if hits == 0 || misses == 0 {
					t.Errorf("feature cache hits %v, misses %v: want both counted", hits, misses)
				}
			}
		})
	}
}

// TestFanoutActiveCache: a receiver's last-active row that said "deliver" is kept for
// ActiveTTL, so a tombstone or an old last-active time written by another process (a direct
// write to the store) stops deliveries only once it has passed; this worker's own user delete
// stops them at once; a row that said "skip" is never kept, so a user seen again gets the next
// pin; with the cache off, or lists sent as chunk tasks, every pin reads the row.
func TestFanoutActiveCache(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	for _, tc := range []struct {
		name   string
		cfg    Config
		cached bool
	}{
		{"cached", Config{ActiveTTL: ttl}, true},
		{"off", Config{ActiveTTL: -1}, false},
		{"chunk tasks", Config{ActiveTTL: ttl, InlineReceivers: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, zenmem.New(), tc.cfg, 3, nil)
			f0, f1, f2 := w.followers[0], w.followers[1], w.followers[2]
			// fanout fans out a new pin of alice's and says which of f0..f2 got it.
			fanout := func() []bool {
				t.Helper()
				s := poolScores(t, w, fanoutNewPin(t, w), f0, f1, f2)
				return []bool{s[f0] != 0, s[f1] != 0, s[f2] != 0}
			}
			check := func(step string, got []bool, want ...bool) {
				t.Helper()
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: f0, f1, f2 delivered (-want +got):\n%s", step, diff)
				}
			}
			check("first", fanout(), true, true, true)
			// Another process deletes f1 (its tombstone) and f2 has not been seen for longer
			// than InactiveAfter.
			old := w.clk.now().Add(-w.w.cfg.InactiveAfter - time.Hour).UnixMilli()
			if err := w.state.Apply(ctx, []zen.Mutation{
				{Key: stateKey(f1, rowActive, 0), Value: i64Bytes(deletedUser)},
				{Key: stateKey(f2, rowActive, 0), Value: i64Bytes(old)},
			}); err != nil {
				t.Fatal(err)
			}
			w.clk.add(ttl / 2)
			check("within ttl", fanout(), true, tc.cached, tc.cached)
			// This worker deletes f0: its own fanouts read the tombstone at once.
			del, err := pinlater.NewUserDelete(pinlater.UserDeletePayload{User: uint64(f0)})
			if err != nil {
				t.Fatal(err)
			}
			if err := handler(t, w.q, del.Type()).ProcessTask(ctx, del); err != nil {
				t.Fatal(err)
			}
			check("after this worker's user delete", fanout(), false, tc.cached, tc.cached)
			w.clk.add(ttl / 2)
			check("at ttl", fanout(), false, false, false)
			// f2 is seen again: a "skip" was not kept, so the next pin reaches it.
			if err := w.state.Apply(ctx, []zen.Mutation{{Key: stateKey(f2, rowActive, 0), Value: i64Bytes(w.clk.now().UnixMilli())}}); err != nil {
				t.Fatal(err)
			}
			check("f2 back", fanout(), false, false, true)
			if hits := testutil.ToFloat64(w.w.m.activeHits); (hits > 0) != tc.cached {
				t.Errorf("active cache hits %v, want some: %v", hits, tc.cached)
			}
		})
	}
}

// fanoutNewPin creates a pin of alice's on travel, tagged with interests, runs its fanout task
// and the tasks it enqueued, and returns the pin.
func fanoutNewPin(t *testing.T, w *world, interests ...zen.ID) zen.ID {
	t.Helper()
	ctx := context.Background()
	p, err := w.g.Create(ctx, zen.TypePin, w.travel, map[string]any{"author": w.alice.String(), "board": w.travel.String(),
		"created_ms": w.clk.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	var ins []uint64
	for _, in := range interests {
		if err := w.g.AddEdge(ctx, zen.Edge{From: p.ID, Type: zen.EdgePinInterests, To: in}); err != nil {
			t.Fatal(err)
		}
		ins = append(ins, uint64(in))
	}
	task, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(p.ID), Author: uint64(w.alice), Board: uint64(w.travel),
		CreatedMs: w.clk.now().UnixMilli(), Interests: ins})
	if err != nil {
		t.Fatal(err)
	}
	if err := handler(t, w.q, task.Type()).ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// poolScores returns each of users' score for pin in its following pool (absent: not there).
func poolScores(t *testing.T, w *world, pin zen.ID, users ...zen.ID) map[zen.ID]float64 {
	t.Helper()
	out := map[zen.ID]float64{}
	for _, u := range users {
		es, err := w.w.Pools().Top(context.Background(), u, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Pin == pin {
				out[u] = e.Score
			}
		}
	}
	return out
}
