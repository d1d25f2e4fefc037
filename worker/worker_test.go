package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// world is a small graph: author alice with board travel and interest cats; followers f0..fN-1
// of alice; g0 follows travel; h0 follows cats; pins p0..p3 by alice on travel (p0 tagged cats).
type world struct {
	*env
	alice, travel, cats zen.ID
	followers           []zen.ID
	pins                []zen.ID
}

func newWorld(t testing.TB, s zen.Store, cfg Config, nFollowers int, wrap func(zen.Table) zen.Table) *world {
	t.Helper()
	ctx := context.Background()
	e := newEnvWrap(t, s, cfg, wrap)
	w := &world{env: e}
	mk := func(tp zen.Type, near zen.ID, data map[string]any) zen.ID {
		o, err := e.g.Create(ctx, tp, near, data)
		if err != nil {
			t.Fatal(err)
		}
		return o.ID
	}
	edge := func(from zen.ID, et zen.EdgeType, to zen.ID) { w.edge(t, from, et, to) }
	w.alice = mk(zen.TypeUser, 0, nil)
	w.travel = mk(zen.TypeBoard, w.alice, nil)
	w.cats = mk(zen.TypeInterest, 0, nil)
	for i := range nFollowers {
		f := mk(zen.TypeUser, 0, map[string]any{"i": i})
		w.followers = append(w.followers, f)
		edge(f, zen.EdgeFollowsUser, w.alice)
	}
	g0, h0 := mk(zen.TypeUser, 0, nil), mk(zen.TypeUser, 0, nil)
	edge(g0, zen.EdgeFollowsBoard, w.travel)
	edge(h0, zen.EdgeFollowsInterest, w.cats)
	w.followers = append(w.followers, g0, h0)
	for i := range 4 {
		p := mk(zen.TypePin, w.travel, map[string]any{"author": w.alice.String(), "board": w.travel.String(),
			"created_ms": e.clk.now().UnixMilli() - int64(i)*3600_000})
		w.pins = append(w.pins, p)
		edge(w.alice, zen.EdgeUserPins, p)
		edge(w.travel, zen.EdgeBoardPins, p)
		if i == 0 {
			edge(p, zen.EdgePinInterests, w.cats)
		}
	}
	return w
}

// edge adds the edge from -et-> to, and its inverse when the type has one.
func (w *world) edge(t testing.TB, from zen.ID, et zen.EdgeType, to zen.ID) {
	t.Helper()
	ctx := context.Background()
	if err := w.g.AddEdge(ctx, zen.Edge{From: from, Type: et, To: to}); err != nil {
		t.Fatal(err)
	}
	if _, ok := et.Inverse(); ok {
		h, _ := w.g.HasEdge(ctx, from, et, to)
		if err := w.g.AddInverse(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *world) fanoutTask(t *testing.T, pin int) *pinlater.Task {
	t.Helper()
	p := pinlater.FanoutPayload{Pin: uint64(w.pins[pin]), Author: uint64(w.alice), Board: uint64(w.travel), CreatedMs: w.clk.now().UnixMilli()}
	if pin == 0 {
		p.Interests = []uint64{uint64(w.cats)}
	}
	task, err := pinlater.NewFanout(p)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// pools returns every receiver's pools, as the generator would read them.
func (w *world) poolsDump(t *testing.T) string {
	t.Helper()
	var s string
	for i, u := range append([]zen.ID{w.alice}, w.followers...) {
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
			es, err := w.w.Pools().Top(context.Background(), u, src, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				s += fmt.Sprintf("u%d %d %d %.9f %s\n", i, src, e.Pin, e.Score, e.Reason)
			}
		}
	}
	return s
}

func handler(t *testing.T, q *inlineQueue, typ string) pinlater.Handler {
	t.Helper()
	h := q.handlers[typ]
	if h == nil {
		t.Fatalf("no handler registered for %s", typ)
	}
	return h
}

// TestHandlersIdempotent runs each handler's task twice and checks that the second run changes
// no row of the pools and state tables (invariant 5).
func TestHandlersIdempotent(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{ChunkSize: 3, TrimEvery: 1, PoolCap: 2}, 7, nil)
	// Spawned chunk tasks are collected, then each is run twice.
	mustTask := func(task *pinlater.Task, err error) *pinlater.Task {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	twice := func(name string, task *pinlater.Task) {
		t.Helper()
		h := handler(t, w.q, task.Type())
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatalf("%s first run: %v", name, err)
		}
		pools1, state1, queued1 := snapshot(t, w.pools), snapshot(t, w.state), w.q.len()
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatalf("%s second run: %v", name, err)
		}
		if d := cmp.Diff(pools1, snapshot(t, w.pools)); d != "" {
			t.Errorf("%s: second run changed the pools (-once +twice):\n%s", name, d)
		}
		if d := cmp.Diff(state1, snapshot(t, w.state)); d != "" {
			t.Errorf("%s: second run changed the state (-once +twice):\n%s", name, d)
		}
		if w.q.len() != queued1 {
			t.Errorf("%s: second run enqueued %d more tasks, want 0 (deduplicated)", name, w.q.len()-queued1)
		}
	}
	for i := range 3 {
		twice("fanout", w.fanoutTask(t, i))
		for task := w.q.pop(); task != nil; task = w.q.pop() {
			twice("fanout-chunk", task)
		}
	}
	if n, _ := w.w.Pools().Size(ctx, w.followers[0], zen.SourceFollowing); n != 2 {
		t.Errorf("follower pool size %d, want the cap 2", n)
	}
	nf := len(w.followers)
	newcomer := w.followers[nf-1] // h0 follows only cats; make it follow alice too
	if err := w.g.AddEdge(ctx, zen.Edge{From: newcomer, Type: zen.EdgeFollowsUser, To: w.alice}); err != nil {
		t.Fatal(err)
	}
	twice("follow-backfill", mustTask(pinlater.NewFollowBackfill(pinlater.FollowBackfillPayload{User: uint64(newcomer), Target: uint64(w.alice), TargetKind: pinlater.KindUser})))
	if err := w.g.RemoveEdge(ctx, w.followers[0], zen.EdgeFollowsUser, w.alice); err != nil {
		t.Fatal(err)
	}
	twice("unfollow-cleanup", mustTask(pinlater.NewUnfollowCleanup(pinlater.UnfollowCleanupPayload{User: uint64(w.followers[0]), Target: uint64(w.alice), TargetKind: pinlater.KindUser})))
	if n, _ := w.w.Pools().Size(ctx, w.followers[0], 0); n != 0 {
		t.Errorf("after unfollow: %d entries left, want 0", n)
	}
	twice("pin-delete", mustTask(pinlater.NewPinDelete(pinlater.PinDeletePayload{Pin: uint64(w.pins[0]), Author: uint64(w.alice)})))
	for _, u := range w.followers {
		es, _ := w.w.Pools().Top(ctx, u, zen.SourceFollowing, 100)
		for _, e := range es {
			if e.Pin == w.pins[0] {
				t.Errorf("deleted pin still in %d's pool", u)
			}
		}
	}
	if err := w.w.RecordEngagement(ctx, w.followers[1], w.pins[1], w.alice); err != nil {
		t.Fatal(err)
	}
	twice("user-delete", mustTask(pinlater.NewUserDelete(pinlater.UserDeletePayload{User: uint64(w.followers[1])})))
	if n, _ := w.w.Pools().Size(ctx, w.followers[1], 0); n != 0 {
		t.Errorf("deleted user has %d pool entries", n)
	}
	if a, _ := w.w.Affinity(ctx, w.followers[1], w.alice); a != 0 {
		t.Errorf("deleted user's affinity %d, want 0", a)
	}
}

// TestFanoutChunkCrashRetry fails the chunk's k-th pool write for every k, then retries without
// faults: the pools must end exactly as after a clean run (nothing lost, nothing twice).
func TestFanoutChunkCrashRetry(t *testing.T) {
	ctx := context.Background()
	cfg := Config{ChunkSize: 1000, TrimEvery: 1, PoolCap: 3}
	clean := newWorld(t, zenmem.New(), cfg, 5, nil)
	for i := range 4 {
		clean.q.Enqueue(ctx, clean.fanoutTask(t, i))
	}
	if err := clean.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	want := clean.poolsDump(t)
	if want == "" {
		t.Fatal("clean run delivered nothing")
	}
	for k := 1; ; k++ {
		var ft *faultyTable
		w := newWorld(t, zenmem.New(), cfg, 5, func(tb zen.Table) zen.Table {
			ft = &faultyTable{Table: tb, failAt: k}
			return ft
		})
		failed := false
		for i := range 4 {
			w.q.Enqueue(ctx, w.fanoutTask(t, i))
		}
		for task := w.q.pop(); task != nil; task = w.q.pop() {
			h := handler(t, w.q, task.Type())
			if err := h.ProcessTask(ctx, task); err != nil {
				if !errors.Is(err, errFault) {
					t.Fatalf("k=%d: %v", k, err)
				}
				failed = true
				ft.mu.Lock()
				ft.failAt = 0
				ft.mu.Unlock()
				if err := h.ProcessTask(ctx, task); err != nil { // the retry
					t.Fatalf("k=%d retry: %v", k, err)
				}
			}
		}
		if got := w.poolsDump(t); got != want {
			t.Fatalf("k=%d: pools after crash+retry differ (-clean +retried):\n%s", k, cmp.Diff(want, got))
		}
		if !failed {
			if k < 3 {
				t.Fatalf("only %d pool writes: fault injection did not bite", k)
			}
			t.Logf("failed each of the %d pool writes once, then retried", k-1)
			break // k is past the last write: every write has been failed once
		}
	}
}

// TestInvalidPayloadsRefused checks that malformed IDs are archived (ErrInvalidPayload), not
// retried, and write nothing.
func TestInvalidPayloadsRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{}, 2, nil)
	before := snapshot(t, w.pools)
	board := uint64(w.travel)
	user := uint64(w.alice)
	cases := map[string]pinlater.Payload{
		"fanout pin is a board":    pinlater.FanoutPayload{V: 1, Pin: board, Author: user, Board: board, CreatedMs: 1},
		"fanout author is a pin":   pinlater.FanoutPayload{V: 1, Pin: uint64(w.pins[0]), Author: uint64(w.pins[0]), Board: board, CreatedMs: 1},
		"chunk edge lists pins":    pinlater.FanoutChunkPayload{V: 1, Pin: uint64(w.pins[0]), Author: user, Board: board, CreatedMs: 1, Source: 1, ListFrom: board, EdgeType: uint16(zen.EdgeBoardPins), Limit: 10},
		"chunk bad cursor":         pinlater.FanoutChunkPayload{V: 1, Pin: uint64(w.pins[0]), Author: user, Board: board, CreatedMs: 1, Source: 1, ListFrom: user, EdgeType: uint16(zen.EdgeFollowedByUser), Cursor: "garbage", Limit: 10},
		"chunk source 9":           pinlater.FanoutChunkPayload{V: 1, Pin: uint64(w.pins[0]), Author: user, Board: board, CreatedMs: 1, Source: 9, ListFrom: user, EdgeType: uint16(zen.EdgeFollowedByUser), Limit: 10},
		"backfill target mistyped": pinlater.FollowBackfillPayload{V: 1, User: user, Target: board, TargetKind: pinlater.KindUser},
		"unfollow user is a board": pinlater.UnfollowCleanupPayload{V: 1, User: board, Target: user, TargetKind: pinlater.KindUser},
		"pin delete pin is a user": pinlater.PinDeletePayload{V: 1, Pin: user, Author: user},
		"user delete of a board":   pinlater.UserDeletePayload{V: 1, User: board},
	}
	for name, p := range cases {
		task, err := pinlater.NewTask(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = handler(t, w.q, task.Type()).ProcessTask(ctx, task)
		if !errors.Is(err, pinlater.ErrInvalidPayload) {
			t.Errorf("%s: error %v, want ErrInvalidPayload", name, err)
		}
	}
	if d := cmp.Diff(before, snapshot(t, w.pools)); d != "" {
		t.Errorf("refused payloads wrote to the pools:\n%s", d)
	}
	if w.q.len() != 0 {
		t.Errorf("refused payloads enqueued %d tasks", w.q.len())
	}
}

// TestRebuildSignal: a user back after a long absence is reported Rebuilding until the rebuild
// task has run, and then has the pins the fanout skipped.
func TestRebuildSignal(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{InactiveAfter: 24 * time.Hour}, 2, nil)
	away := w.followers[0]
	if err := w.w.SetLastActive(ctx, away, w.clk.now().Add(-48*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	w.q.Enqueue(ctx, w.fanoutTask(t, 0))
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.w.Pools().Size(ctx, away, 0); n != 0 {
		t.Fatalf("inactive user got %d entries, want 0 (skipped)", n)
	}
	if n, _ := w.w.Pools().Size(ctx, w.followers[1], 0); n != 1 {
		t.Fatalf("active user got %d entries, want 1", n)
	}
	if w.w.Rebuilding(ctx, away) {
		t.Fatal("rebuilding before the user returned")
	}
	rb, err := w.w.Touch(ctx, away)
	if err != nil || !rb {
		t.Fatalf("Touch of a returning user = %v, %v; want true", rb, err)
	}
	if !w.w.Rebuilding(ctx, away) {
		t.Fatal("Rebuilding false while the rebuild is queued")
	}
	if rb, _ := w.w.Touch(ctx, away); !rb {
		t.Fatal("second Touch during the rebuild: want true")
	}
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if w.w.Rebuilding(ctx, away) {
		t.Fatal("still rebuilding after the rebuild ran")
	}
	if n, _ := w.w.Pools().Size(ctx, away, 0); n != 4 {
		t.Fatalf("rebuilt pools hold %d entries, want alice's 4 pins", n)
	}
	if rb, _ := w.w.Touch(ctx, w.followers[1]); rb {
		t.Fatal("an active user's Touch reported rebuilding")
	}
}

// TestRebuildRunAgainWritesSameRows: a rebuild task that runs again after it finished (its
// completion lost with a failed-over Redis primary, or the outbox relay enqueueing it once more)
// ages the pins as of the rebuild's start, as its first run did, so it writes the same pool rows
// at any later time: no second row per pin with a lower score.
func TestRebuildRunAgainWritesSameRows(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{InactiveAfter: 24 * time.Hour}, 1, nil)
	away := w.followers[0]
	if err := w.w.SetLastActive(ctx, away, w.clk.now().Add(-48*time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	w.clk.add(time.Hour)
	if rb, err := w.w.Touch(ctx, away); err != nil || !rb {
		t.Fatalf("Touch of a returning user = %v, %v; want true", rb, err)
	}
	if w.q.len() != 1 {
		t.Fatalf("%d tasks queued after Touch, want the rebuild", w.q.len())
	}
	rebuild := w.q.pending[0]
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	if w.w.Rebuilding(ctx, away) {
		t.Fatal("still rebuilding after the rebuild ran")
	}
	pools, state := snapshot(t, w.pools), snapshot(t, w.state)
	if n, _ := w.w.Pools().Size(ctx, away, 0); n != 4 {
		t.Fatalf("rebuilt pools hold %d entries, want alice's 4 pins", n)
	}
	for _, later := range []time.Duration{time.Minute, 6 * time.Hour} {
		w.clk.add(later)
		if err := handler(t, w.q, rebuild.Type()).ProcessTask(ctx, rebuild); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(pools, snapshot(t, w.pools)); diff != "" {
			t.Errorf("the rebuild run again %v later changed the pools (-first run +again):\n%s", later, diff)
		}
		if diff := cmp.Diff(state, snapshot(t, w.state)); diff != "" {
			t.Errorf("the rebuild run again %v later changed the state (-first run +again):\n%s", later, diff)
		}
		if w.w.Rebuilding(ctx, away) {
			t.Errorf("rebuilding after the rebuild ran again %v later", later)
		}
	}
}

// TestHotAuthorChunks: a follower list above HotFollowers is split into ceil(n/ChunkSize) chunk
// tasks (enqueued with the bulk option; TestPinlaterRedis checks the queue on a real Redis); a
// list of at most InlineReceivers is delivered in the fanout task itself, whole even past a page;
// and a list counted small enough for that but longer than InlineReceivers (its count one low
// after a failed increment, or grown since) is delivered inline as far as it goes, then all of it
// as chunks.
func TestHotAuthorChunks(t *testing.T) {
	for _, tc := range []struct {
		name            string
		inline          int
		undercount      int64
		chunks, inlined float64
	}{
		// alice: 10 followers → 3 chunks; travel: 1 follower → inline.
		{"default", 0, 0, 3, 1},
		// Every list as chunk tasks: 3 + 1.
		{"never inline", -1, 0, 4, 0},
		// alice inline too, all 10 in the task although a page is 4.
		{"inline past a page", 100, 0, 0, 2},
		// alice counted 8: inline, the first 8 of her 10, then her 3 pages as chunks.
		{"counted short", 8, 2, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := zenmem.New()
			w := newWorld(t, s, Config{ChunkSize: 4, HotFollowers: 5, InlineReceivers: tc.inline}, 10, nil)
			if tc.undercount != 0 {
				counters, _ := s.Table(ctx, zen.TableCounters)
				key := binary.BigEndian.AppendUint64(nil, uint64(w.alice))
				key = binary.BigEndian.AppendUint16(append(key, 'e'), uint16(zen.EdgeFollowedByUser))
				if n, err := counters.Increment(ctx, key, -tc.undercount); err != nil || n != 10-tc.undercount {
					t.Fatalf("undercount: %d, %v", n, err)
				}
			}
			w.q.Enqueue(ctx, w.fanoutTask(t, 1))
			if err := w.q.run(ctx); err != nil {
				t.Fatal(err)
			}
			if got := float64(w.q.counts[pinlater.TypeFanoutChunk]); got != tc.chunks {
				t.Errorf("chunks enqueued %v, want %v", got, tc.chunks)
			}
			if got := testutil.ToFloat64(w.w.m.inline); got != tc.inlined {
				t.Errorf("lists delivered inline %v, want %v", got, tc.inlined)
			}
			for _, u := range w.followers[:11] {
				if n, _ := w.w.Pools().Size(ctx, u, zen.SourceFollowing); n != 1 {
					t.Errorf("receiver %d has %d entries, want 1", u, n)
				}
			}
		})
	}
}

// TestFanoutDelay checks the fanout delay histogram: one observation at the end of the fanout
// task and one per chunk task, each the time since the pin's created_ms; none for a pin deleted
// before its fanout ran; and a created_ms in the future counts as no delay.
func TestFanoutDelay(t *testing.T) {
	for _, tc := range []struct {
		name      string
		createdAt time.Duration // created_ms relative to the worker's clock
		deleted   bool
		count     uint64
		sum       float64
	}{
		// alice: 10 followers → 3 chunk tasks of 4; the fanout task itself delivers travel's.
		{"fanout and chunks", -1500 * time.Millisecond, false, 4, 6},
		{"clock ahead", 3 * time.Second, false, 4, 0},
		// The fanout task of a deleted pin ends at once, without chunks and without a delay.
		{"deleted pin", -time.Second, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, zenmem.New(), Config{ChunkSize: 4, HotFollowers: 5}, 10, nil)
			if tc.deleted {
				if err := w.g.Delete(ctx, w.pins[1]); err != nil {
					t.Fatal(err)
				}
			}
			p := pinlater.FanoutPayload{Pin: uint64(w.pins[1]), Author: uint64(w.alice), Board: uint64(w.travel),
				CreatedMs: w.clk.now().Add(tc.createdAt).UnixMilli()}
			task, err := pinlater.NewFanout(p)
			if err != nil {
				t.Fatal(err)
			}
			w.q.Enqueue(ctx, task)
			if err := w.q.run(ctx); err != nil {
				t.Fatal(err)
			}
			m := &dto.Metric{}
			if err := w.w.m.delay.Write(m); err != nil {
				t.Fatal(err)
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != tc.count || math.Abs(h.GetSampleSum()-tc.sum) > 1e-9 {
				t.Errorf("delay histogram: %d observations summing to %v s, want %d summing to %v s",
					h.GetSampleCount(), h.GetSampleSum(), tc.count, tc.sum)
			}
			// Every delay was the same: all of them are in the one bucket that holds it (buckets
			// from 5 ms, each 1.5× the last), none below it.
			want := tc.sum / float64(max(tc.count, 1))
			for _, b := range h.GetBucket() {
				up, n := b.GetUpperBound(), b.GetCumulativeCount()
				if (up >= want && up <= max(want*1.5, 0.005) && n != tc.count) || (up < want && n != 0) {
					t.Errorf("bucket ≤ %v s counts %d, want the %d delays of %v s in the bucket that holds them", up, n, tc.count, want)
				}
			}
		})
	}
}

// TestConcurrentDuplicateChunks runs every chunk task of four fanouts on 4 goroutines, each task
// twice at once (a redelivered task racing its first run): the pools must equal a sequential
// run's.
func TestConcurrentDuplicateChunks(t *testing.T) {
	ctx := context.Background()
	cfg := Config{ChunkSize: 2, TrimEvery: 1, PoolCap: 3, InlineReceivers: -1}
	seq := newWorld(t, zenmem.New(), cfg, 9, nil)
	for i := range 4 {
		seq.q.Enqueue(ctx, seq.fanoutTask(t, i))
	}
	if err := seq.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	want := seq.poolsDump(t)

	w := newWorld(t, openStore(t, "pebble"), cfg, 9, nil)
	for i := range 4 {
		if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(ctx, w.fanoutTask(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	var chunks []*pinlater.Task
	for task := w.q.pop(); task != nil; task = w.q.pop() {
		chunks = append(chunks, task, task)
	}
	h := handler(t, w.q, pinlater.TypeFanoutChunk)
	if err := parallelN(ctx, 4, len(chunks), func(ctx context.Context, i int) error { return h.ProcessTask(ctx, chunks[i]) }); err != nil {
		t.Fatal(err)
	}
	if got := w.poolsDump(t); got != want {
		t.Errorf("concurrent duplicate chunks (-sequential +concurrent):\n%s", cmp.Diff(want, got))
	}
}

// TestLateFanoutRespectsTakenAndSaved: a fanout chunk run late (retried, redelivered, re-run
// after the feed was served) neither puts back a pin the receiver's feed already took, nor
// gives a pin to a receiver who saved it, even when the save ran before the chunk did.
func TestLateFanoutRespectsTakenAndSaved(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{ChunkSize: 1000, TrimEvery: 1}, 3, nil)
	f0, f1, f2 := w.followers[0], w.followers[1], w.followers[2]
	has := func(u, pin zen.ID) bool {
		t.Helper()
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
			es, err := w.w.Pools().Top(ctx, u, src, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.Pin == pin {
					return true
				}
			}
		}
		return false
	}
	// chunks runs the fanout of pin i and returns its chunk tasks, run once.
	chunks := func(i int) []*pinlater.Task {
		t.Helper()
		if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(ctx, w.fanoutTask(t, i)); err != nil {
			t.Fatal(err)
		}
		var out []*pinlater.Task
		for task := w.q.pop(); task != nil; task = w.q.pop() {
			out = append(out, task)
		}
		return out
	}
	run := func(tasks []*pinlater.Task) {
		t.Helper()
		for _, task := range tasks {
			if err := handler(t, w.q, task.Type()).ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	repin := func(user, pin zen.ID) {
		t.Helper()
		b, err := w.g.Create(ctx, zen.TypeBoard, user, nil)
		if err != nil {
			t.Fatal(err)
		}
		task, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(pin), Author: uint64(user), Board: uint64(b.ID), CreatedMs: w.clk.now().UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
		for w.q.pop() != nil { // the repin's own chunks: the saver's followers (none here)
		}
	}
	p1, p2 := w.pins[1], w.pins[2]
	c1 := chunks(1)
	run(c1)
	if !has(f0, p1) || !has(f1, p1) {
		t.Fatal("fanout did not reach f0 and f1")
	}
	// f0's feed takes p1; f1 saves p1. Then alice's chunks of p1 run again.
	if got, err := w.w.Pools().Take(ctx, f0, []zen.PoolEntry{{Pin: p1}}); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	repin(f1, p1)
	if has(f1, p1) {
		t.Error("the saver still has the pin it saved")
	}
	run(c1)
	if has(f0, p1) {
		t.Error("a re-run chunk put back a pin f0's feed had taken")
	}
	if has(f1, p1) {
		t.Error("a re-run chunk gave f1 the pin it saved")
	}
	// Out of order: f2 saves p2 before alice's chunk of p2 reaches it.
	c2 := chunks(2)
	repin(f2, p2)
	run(c2)
	if has(f2, p2) {
		t.Error("a chunk that ran after the save gave f2 the pin it saved")
	}
	if !has(f0, p2) {
		t.Error("f0 did not get p2")
	}
}

// TestUnknownPinFails: a fanout (or chunk) naming a pin this store never had fails with
// ErrUnknownObject, so pinlater retries and then dead-letters it, and writes nothing; a
// soft-deleted pin completes quietly (its fanout is moot).
func TestUnknownPinFails(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{}, 2, nil)
	before := snapshot(t, w.pools)
	ghost, err := zen.NewID(w.pins[0].Shard(), zen.TypePin, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	user, board := uint64(w.alice), uint64(w.travel)
	for name, p := range map[string]pinlater.Payload{
		"fanout": pinlater.FanoutPayload{V: 1, Pin: uint64(ghost), Author: user, Board: board, CreatedMs: 1},
		"chunk": pinlater.FanoutChunkPayload{V: 1, Pin: uint64(ghost), Author: user, Board: board, CreatedMs: 1, Source: 1,
			ListFrom: user, EdgeType: uint16(zen.EdgeFollowedByUser), Limit: 10},
	} {
		task, err := pinlater.NewTask(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := handler(t, w.q, task.Type()).ProcessTask(ctx, task); !errors.Is(err, ErrUnknownObject) {
			t.Errorf("%s of an unknown pin: %v, want ErrUnknownObject", name, err)
		}
	}
	if d := cmp.Diff(before, snapshot(t, w.pools)); d != "" {
		t.Errorf("tasks of an unknown pin wrote to the pools:\n%s", d)
	}
	if w.q.len() != 0 {
		t.Errorf("tasks of an unknown pin enqueued %d tasks", w.q.len())
	}
	if err := w.g.Delete(ctx, w.pins[1]); err != nil {
		t.Fatal(err)
	}
	if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(ctx, w.fanoutTask(t, 1)); err != nil {
		t.Errorf("fanout of a deleted pin: %v, want it to complete", err)
	}
}

// TestOnInsertSeesWrittenEntries: the insert hook is called with exactly the entries the fanout
// wrote, after they are in the pools, and not after it is cleared.
func TestOnInsertSeesWrittenEntries(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{ChunkSize: 100, TrimEvery: 1 << 20}, 5, nil)
	var seen []zen.PoolEntry
	w.w.OnInsert(func(es []zen.PoolEntry) {
		for _, e := range es {
			// Written before the hook runs: a reader finds it.
			top, err := w.w.Pools().Top(ctx, e.User, e.Source, 100)
			if err != nil {
				t.Errorf("top: %v", err)
			}
			if !slices.ContainsFunc(top, func(x zen.PoolEntry) bool { return x.Pin == e.Pin }) {
				t.Errorf("hook saw pin %d for %d before it was in the pool", e.Pin, e.User)
			}
		}
		seen = append(seen, es...)
	})
	run := func(pin int) {
		t.Helper()
		if err := handler(t, w.q, w.fanoutTask(t, pin).Type()).ProcessTask(ctx, w.fanoutTask(t, pin)); err != nil {
			t.Fatal(err)
		}
		for task := w.q.pop(); task != nil; task = w.q.pop() {
			if err := handler(t, w.q, task.Type()).ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(0)
	var got, want []string
	for _, e := range seen {
		got = append(got, fmt.Sprintf("%d/%d", e.User, e.Pin))
	}
	for _, u := range append([]zen.ID{w.alice}, w.followers...) {
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
			es, err := w.w.Pools().Top(ctx, u, src, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				want = append(want, fmt.Sprintf("%d/%d", u, e.Pin))
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatal("the fanout wrote nothing")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("hook saw (-pools +hook):\n%s", d)
	}
	w.w.OnInsert(nil)
	n := len(seen)
	run(1)
	if len(seen) != n {
		t.Errorf("hook called %d more times after it was cleared", len(seen)-n)
	}
}

// TestUserDeleteSecondPass: a user's deletion schedules itself once more (pass 2, after the
// longest fanout run), and that pass removes the pool rows a fanout that had read the user as
// live wrote after the first pass; the second pass schedules nothing.
func TestUserDeleteSecondPass(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, zenmem.New(), Config{}, 3, nil)
	w.q.Enqueue(ctx, w.fanoutTask(t, 0))
	if err := w.q.run(ctx); err != nil {
		t.Fatal(err)
	}
	gone := w.followers[1]
	if n, _ := w.w.Pools().Size(ctx, gone, 0); n == 0 {
		t.Fatal("the fanout delivered nothing to the user to delete")
	}
	task, err := pinlater.NewUserDelete(pinlater.UserDeletePayload{User: uint64(gone)})
	if err != nil {
		t.Fatal(err)
	}
	w.q.Enqueue(ctx, task)
	first := w.q.pop()
	if err := handler(t, w.q, pinlater.TypeUserDelete).ProcessTask(ctx, first); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.w.Pools().Size(ctx, gone, 0); n != 0 {
		t.Fatalf("after the first pass: %d pool entries", n)
	}
	second := w.q.pop()
	if second == nil || second.Type() != pinlater.TypeUserDelete || w.q.len() != 0 {
		t.Fatalf("the first pass enqueued %v and %d more, want one user-delete", second, w.q.len())
	}
	var p pinlater.UserDeletePayload
	if err := json.Unmarshal(second.Payload(), &p); err != nil {
		t.Fatal(err)
	}
	if want := (pinlater.UserDeletePayload{V: pinlater.PayloadVersion, User: uint64(gone), Pass: pinlater.UserDeleteLastPass}); p != want {
		t.Errorf("second pass payload %+v, want %+v", p, want)
	}
	fanout, _ := pinlater.DefaultPolicy(pinlater.TypeFanout)
	if d := w.w.userDeleteRecheck(); d <= fanout.Timeout+w.w.Config().ActiveTTL {
		t.Errorf("second pass after %v: not past a fanout run (%v) and the active cache (%v)", d, fanout.Timeout, w.w.Config().ActiveTTL)
	}
	// A fanout that read the user's last-active row before the tombstone writes now.
	late := zen.PoolEntry{User: gone, Source: zen.SourceFollowing, Score: 1, Pin: w.pins[3], Author: w.alice,
		Board: w.travel, CreatedMs: w.clk.now().UnixMilli()}
	if _, err := w.w.Pools().Insert(ctx, []zen.PoolEntry{late}); err != nil {
		t.Fatal(err)
	}
	if err := handler(t, w.q, pinlater.TypeUserDelete).ProcessTask(ctx, second); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.w.Pools().Size(ctx, gone, 0); n != 0 {
		t.Errorf("after the second pass: %d pool entries, want 0", n)
	}
	if w.q.len() != 0 {
		t.Errorf("the second pass enqueued %d tasks, want none", w.q.len())
	}
}
