package zenmove_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenmove"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

func key(shard uint16, local uint64) []byte {
	id, _ := zen.NewID(shard, zen.TypePin, local)
	return binary.BigEndian.AppendUint64(nil, uint64(id))
}

type rig struct {
	backs  map[string]zen.Store
	router *zenroute.Store
	maps   *zenmove.Local
	tables map[string]zen.Table // routed
	state  zen.Table
}

func newRig(t *testing.T, fenceWait time.Duration) *rig {
	t.Helper()
	backs := map[string]zen.Store{"default": zenmem.New(), "target": zenmem.New()}
	m, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 63, Store: "default", Open: true}})
	if err != nil {
		t.Fatal(err)
	}
	router, err := zenroute.New(backs, m, zenroute.Options{FenceWait: fenceWait})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{backs: backs, router: router, maps: &zenmove.Local{Router: router}, tables: map[string]zen.Table{}}
	for _, name := range zenroute.ShardedTables() {
		if r.tables[name], err = router.Table(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	if r.state, err = router.Table(t.Context(), "meta"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) mover(t *testing.T, o zenmove.Options) *zenmove.Mover {
	t.Helper()
	o.State = r.state
	if o.Batch == 0 {
		o.Batch = 16
	}
	mv, err := zenmove.New(r.backs, r.maps, o)
	if err != nil {
		t.Fatal(err)
	}
	return mv
}

func (r *rig) rows(t *testing.T, store, table string, from, to uint16) []zen.KV {
	t.Helper()
	tb, err := r.backs[store].Table(t.Context(), table)
	if err != nil {
		t.Fatal(err)
	}
	start, stop := zen.ShardKeyRange(from, to)
	kvs, err := tb.Scan(t.Context(), zen.ScanOptions{Start: start, Stop: stop})
	if err != nil {
		t.Fatal(err)
	}
	return kvs
}

func (r *rig) fill(t *testing.T, shards []uint16, n int) {
	t.Helper()
	for _, name := range zenroute.ShardedTables() {
		var muts []zen.Mutation
		for _, sh := range shards {
			for i := range n {
				muts = append(muts, zen.Mutation{Key: key(sh, uint64(i+1)), Value: []byte(fmt.Sprintf("%s-%d-%d", name, sh, i))})
			}
		}
		if err := r.tables[name].Apply(t.Context(), muts); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMoveUnderLoad moves shards 8–15 while writers write every shard and readers read: every
// acknowledged write is readable afterwards, the moved rows are all on the target, reads of the
// moved shards go to the target, and, while the fence is up, writes to the moved shards wait and
// writes to the shards beside them do not.
func TestMoveUnderLoad(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.fill(t, []uint16{0, 7, 8, 9, 15, 16, 40}, 50)
	reg := prometheus.NewRegistry()
	mv := r.mover(t, zenmove.Options{Registerer: reg, Remainder: 5})

	ctx, cancel := context.WithCancel(t.Context())
	var (
		wg            sync.WaitGroup
		acked         sync.Map // key string -> value
		writes, reads atomic.Int64
	)
	defer func() { cancel(); wg.Wait() }() // a failed wait below leaves no load running
	shards := []uint16{0, 7, 8, 9, 12, 15, 16, 40}
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			tb := r.tables[zen.TableEdges]
			for i := 0; ctx.Err() == nil; i++ {
				sh := shards[rng.IntN(len(shards))]
				k := key(sh, uint64(1000+w*100000+i)) // each writer its own keys
				v := []byte(fmt.Sprintf("w%d-%d", w, i))
				err := tb.Apply(ctx, []zen.Mutation{{Key: k, Value: v}})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("write shard %d: %v", sh, err)
					}
					return
				}
				acked.Store(string(k), string(v))
				writes.Add(1)
				// Overwrite an old row sometimes, so catch-up passes see changes, not only inserts.
				// Each writer overwrites its own old rows (locals 1+w, 5+w, …, 45+w): two writers'
				// concurrent writes of one row may land in either order, so "the last one
				// acknowledged" would not say which value the row must hold.
				if rng.IntN(4) == 0 {
					ok := key(sh, uint64(1+w+4*rng.IntN(12)))
					ov := []byte(fmt.Sprintf("over-w%d-%d", w, i))
					if err := tb.Apply(ctx, []zen.Mutation{{Key: ok, Value: ov}}); err == nil {
						acked.Store(string(ok), string(ov))
					}
				}
			}
		})
	}
	wg.Go(func() {
		tb := r.tables[zen.TableObjects]
		for ctx.Err() == nil {
			if _, err := tb.Get(ctx, key(9, 3)); err != nil && ctx.Err() == nil {
				t.Errorf("read during the move: %v", err)
				return
			}
			reads.Add(1)
		}
	})
	testenv.WaitFor(t, testenv.WaitTimeout, "the load to be under way (100 writes and a read acknowledged)", func() bool {
		return writes.Load() >= 100 && reads.Load() > 0
	})
	var (
		phases []string
		probed bool
	)
	res, err := mv.Move(t.Context(), zenmove.Plan{From: 8, To: 15, Target: "target"}, func(p zenmove.Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Phase == "final" && !probed {
			probed = true
			probeFence(t, r.tables[zen.TableEdges], &acked)
		}
	})
	if err == nil {
		// Writes and reads go on after the switch.
		w, rd := writes.Load(), reads.Load()
		testenv.WaitFor(t, testenv.WaitTimeout, "100 writes and a read acknowledged after the move", func() bool {
			return writes.Load() >= w+100 && reads.Load() > rd
		})
	}
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("move: %d passes, %d copied, %d deleted, %d in the final pass, fence %v, took %v; %d writes",
		res.Passes, res.RowsCopied, res.RowsDeleted, res.FinalRows, res.Fence, res.Took, writes.Load())
	if diff := cmp.Diff([]string{"count", "pass", "verify", "switch", "done"}, compact(phases)); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	if res.Fence <= 0 || res.Source != "default" {
		t.Errorf("result: %+v", res)
	}
	if !probed {
		t.Error("no final pass reported: the fence was not probed")
	}
	want := []zen.ShardRange{{From: 0, To: 7, Store: "default", Open: true}, {From: 8, To: 15, Store: "target", Open: true},
		{From: 16, To: 63, Store: "default", Open: true}}
	if diff := cmp.Diff(want, r.router.Shards().Ranges()); diff != "" {
		t.Errorf("map after the move (-want +got):\n%s", diff)
	}
	// Every moved row is on the target.
	for _, name := range zenroute.ShardedTables() {
		src, dst := r.rows(t, "default", name, 8, 15), r.rows(t, "target", name, 8, 15)
		if len(dst) < len(src) {
			t.Errorf("%s: %d rows on the target, %d on the source", name, len(dst), len(src))
		}
		if other := r.rows(t, "target", name, 0, 7); len(other) > 0 {
			t.Errorf("%s: %d rows of unmoved shards on the target", name, len(other))
		}
	}
	// Poison the source: reads of moved shards must not see it.
	src, _ := r.backs["default"].Table(t.Context(), zen.TableEdges)
	var poison []zen.Mutation
	for _, kv := range r.rows(t, "default", zen.TableEdges, 8, 15) {
		poison = append(poison, zen.Mutation{Key: kv.Key, Value: []byte("POISON")})
	}
	if err := src.Apply(t.Context(), poison); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged write reads back.
	n := 0
	acked.Range(func(k, v any) bool {
		n++
		got, err := r.tables[zen.TableEdges].Get(t.Context(), []byte(k.(string)))
		if err != nil || string(got) != v.(string) {
			t.Errorf("acknowledged write shard %d: read %q, %v; want %q", zen.KeyShard([]byte(k.(string))), got, err, v)
			return false
		}
		return true
	})
	t.Logf("%d acknowledged rows read back", n)
	if got := testutilCounter(t, reg, "smartfeed_shardmove_moves_total"); got != 1 {
		t.Errorf("moves_total = %v", got)
	}
	// A rerun finds the move done.
	res, err = mv.Move(t.Context(), zenmove.Plan{From: 8, To: 15, Target: "target"}, nil)
	if err != nil || !res.AlreadyDone {
		t.Errorf("rerun: %+v, %v", res, err)
	}
}

// probeFence runs inside the mover's progress callback during the final pass, so the fence on
// shards 8–15 cannot lift while it runs. A write to shard 7 or 16 must go through (one that
// waited on the fence would fail with ErrFenced after the rig's 5 s FenceWait); a write to shard 8
// or 15 must still be waiting when its 50 ms context ends (no wall-clock bound: the fence holds
// however slowly the machine runs). The writes that go through are added to acked.
func probeFence(t *testing.T, tb zen.Table, acked *sync.Map) {
	t.Helper()
	for _, sh := range []uint16{7, 16} {
		k, v := key(sh, 900000), fmt.Sprintf("beside the fence %d", sh)
		if err := tb.Apply(t.Context(), []zen.Mutation{{Key: k, Value: []byte(v)}}); err != nil {
			t.Errorf("write to unmoved shard %d while shards 8–15 are fenced: %v", sh, err)
			continue
		}
		acked.Store(string(k), v)
	}
	for _, sh := range []uint16{8, 15} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		err := tb.Apply(ctx, []zen.Mutation{{Key: key(sh, 900000), Value: []byte("through the fence")}})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("write to fenced shard %d during the final pass: %v, want it waiting on the fence", sh, err)
		}
	}
}

func compact(s []string) []string {
	var out []string
	for _, x := range s {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	// "final" follows "pass"; fold it so the check does not depend on the pass count.
	var o2 []string
	for _, x := range out {
		if x == "final" {
			continue
		}
		o2 = append(o2, x)
	}
	return o2
}

// testutilCounter sums the named counter in reg over its series, or over those with the given
// label value when label is set.
func testutilCounter(t *testing.T, reg *prometheus.Registry, name string, label ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(label) == 2 {
				for _, l := range m.GetLabel() {
					if l.GetName() == label[0] && l.GetValue() != label[1] {
						continue series
					}
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestDryRun reports rows and bytes per shard and changes nothing.
func TestDryRun(t *testing.T) {
	r := newRig(t, time.Second)
	r.fill(t, []uint16{3, 4, 5}, 10)
	before := r.router.Shards()
	res, err := r.mover(t, zenmove.Options{}).DryRun(t.Context(), zenmove.Plan{From: 4, To: 9, Target: "target"})
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(zenroute.ShardedTables())) // 10 rows in each table
	want := []zenmove.ShardStat{{Shard: 4, Rows: 10 * n, Bytes: res.Shards[0].Bytes}, {Shard: 5, Rows: 10 * n, Bytes: res.Shards[0].Bytes}}
	if diff := cmp.Diff(want, res.Shards); diff != "" || res.Source != "default" || res.TargetRows != 0 {
		t.Errorf("dry run: source %s, target rows %d, shards (-want +got):\n%s", res.Source, res.TargetRows, diff)
	}
	if !r.router.Shards().Equal(before) {
		t.Error("dry run changed the map")
	}
	for _, name := range zenroute.ShardedTables() {
		if rows := r.rows(t, "target", name, 0, 63); len(rows) > 0 {
			t.Errorf("dry run wrote %d rows of %s", len(rows), name)
		}
	}
}

// TestPlanRefused checks the plans a move refuses before doing anything.
func TestPlanRefused(t *testing.T) {
	r := newRig(t, time.Second)
	split, _ := r.router.Shards().With(10, 20, func(x *zen.ShardRange) { x.Store = "target" })
	if err := r.maps.Publish(t.Context(), split); err != nil {
		t.Fatal(err)
	}
	mv := r.mover(t, zenmove.Options{})
	for name, p := range map[string]zenmove.Plan{
		"several stores": {From: 5, To: 15, Target: "target"},
		"unknown target": {From: 0, To: 5, Target: "nowhere"},
		"past the map":   {From: 60, To: 70, Target: "target"},
		"from above to":  {From: 5, To: 4, Target: "target"},
	} {
		if _, err := mv.Move(t.Context(), p, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if !r.router.Shards().Equal(split) {
		t.Error("a refused plan changed the map")
	}
}

// lossyTable drops, silently, every write of one key: a target that loses data.
type lossyTable struct {
	zen.Table
	lose []byte
}

func (l lossyTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	var keep []zen.Mutation
	for _, m := range muts {
		if string(m.Key) != string(l.lose) {
			keep = append(keep, m)
		}
	}
	return l.Table.Apply(ctx, keep)
}

type lossyStore struct {
	zen.Store
	lose []byte
}

func (l lossyStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := l.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return lossyTable{Table: t, lose: l.lose}, nil
}

// TestVerifyMismatchLiftsFence checks that a target that does not match the source after the
// final pass fails verification: the fence is lifted, the map keeps the shards on the source,
// and writes to them go on.
func TestVerifyMismatchLiftsFence(t *testing.T) {
	r := newRig(t, time.Second)
	r.fill(t, []uint16{8}, 20)
	before := r.router.Shards()
	backs := map[string]zen.Store{"default": r.backs["default"], "target": lossyStore{Store: r.backs["target"], lose: key(8, 3)}}
	mv, err := zenmove.New(backs, r.maps, zenmove.Options{State: r.state, Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mv.Move(t.Context(), zenmove.Plan{From: 8, To: 8, Target: "target"}, nil)
	if !errors.Is(err, zenmove.ErrMismatch) {
		t.Fatalf("move onto a target that loses a row: err %v, want ErrMismatch", err)
	}
	if !r.router.Shards().Equal(before) {
		t.Errorf("map after a failed verification = %+v, want the original", r.router.Shards().Ranges())
	}
	if err := r.tables[zen.TableObjects].Apply(t.Context(), []zen.Mutation{{Key: key(8, 99), Value: []byte("v")}}); err != nil {
		t.Errorf("write after the fence was lifted: %v", err)
	}
}

// TestResumeAfterCrashWhileFenced starts from what a crash during the fence leaves: a progress
// row in phase "fenced" and a published map with the shards fenced. The rerun finishes the move.
func TestResumeAfterCrashWhileFenced(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.fill(t, []uint16{8, 9}, 30)
	mv := r.mover(t, zenmove.Options{})
	plan := zenmove.Plan{From: 8, To: 9, Target: "target"}
	// The crashed run had copied part of the rows and fenced.
	src, _ := r.backs["default"].Table(t.Context(), zen.TableObjects)
	dst, _ := r.backs["target"].Table(t.Context(), zen.TableObjects)
	part, _ := src.Scan(t.Context(), zen.ScanOptions{Start: key(8, 0), Limit: 10})
	var muts []zen.Mutation
	for _, kv := range part {
		muts = append(muts, zen.Mutation{Key: kv.Key, Value: kv.Value})
	}
	muts = append(muts, zen.Mutation{Key: key(9, 12345), Value: []byte("stale on the target")})
	if err := dst.Apply(t.Context(), muts); err != nil {
		t.Fatal(err)
	}
	fenced, _ := r.router.Shards().With(8, 9, func(x *zen.ShardRange) { x.Fenced = true })
	if err := r.maps.Publish(t.Context(), fenced); err != nil {
		t.Fatal(err)
	}
	if err := r.state.Apply(t.Context(), []zen.Mutation{{Key: []byte("shardmove"),
		Value: []byte(`{"plan":{"From":8,"To":9,"Target":"target"},"source":"default","phase":"fenced","pass":2}`)}}); err != nil {
		t.Fatal(err)
	}
	// Another plan is refused while this one is unfinished.
	if _, err := mv.Move(t.Context(), zenmove.Plan{From: 20, To: 21, Target: "target"}, nil); err == nil {
		t.Error("a second move while one is unfinished: no error")
	}
	res, err := mv.Move(t.Context(), plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Resumed || res.Passes != 0 {
		t.Errorf("resumed move: %+v", res)
	}
	for _, name := range zenroute.ShardedTables() {
		if diff := cmp.Diff(r.rows(t, "default", name, 8, 9), r.rows(t, "target", name, 8, 9)); diff != "" {
			t.Errorf("%s after the resumed move (-source +target):\n%s", name, diff)
		}
	}
	if sm, _ := r.router.Shards().RangeFor(8); sm.Store != "target" || sm.Fenced {
		t.Errorf("range after the resumed move: %+v", sm)
	}
	if _, err := r.state.Get(t.Context(), []byte("shardmove")); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("progress row after the move: %v", err)
	}
}

// TestCounterUnderMove checks that increments to a moving shard, acknowledged before, during
// (they wait on the fence) and after the move, are all counted on the target.
func TestCounterUnderMove(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.fill(t, []uint16{8}, 10)
	mv := r.mover(t, zenmove.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var acked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := r.tables[zen.TableCounters].Increment(ctx, key(8, 5000), 1); err != nil {
				return
			}
			acked.Add(1)
		}
	}()
	testenv.WaitFor(t, testenv.WaitTimeout, "an increment acknowledged before the move", func() bool { return acked.Load() > 0 })
	if _, err := mv.Move(t.Context(), zenmove.Plan{From: 8, To: 8, Target: "target"}, nil); err != nil {
		t.Fatal(err)
	}
	// The second increment acknowledged from here was sent after the move (the first may have
	// been on its way already).
	atMove := acked.Load()
	testenv.WaitFor(t, testenv.WaitTimeout, "an increment acknowledged after the move", func() bool { return acked.Load() >= atMove+2 })
	cancel()
	<-done
	dst, _ := r.backs["target"].Table(t.Context(), zen.TableCounters)
	n, err := dst.Increment(t.Context(), key(8, 5000), 0)
	if err != nil {
		t.Fatal(err)
	}
	if a := acked.Load(); n < a || n > a+1 { // the one in flight at the cancel may land unacknowledged
		t.Errorf("counter on the target = %d, %d increments acknowledged", n, a)
	}
}

// TestRecoverLiftsAStaleFence: a process that restarts after a crash while fenced lifts the fence
// (the shards stay on the source and take writes again), and the rerun of the move finishes it.
func TestRecoverLiftsAStaleFence(t *testing.T) {
	r := newRig(t, 200*time.Millisecond)
	r.fill(t, []uint16{8}, 10)
	mv := r.mover(t, zenmove.Options{})
	if p, lifted, err := mv.Recover(t.Context()); p != nil || lifted || err != nil {
		t.Fatalf("Recover with no move under way = %v, %v, %v", p, lifted, err)
	}
	fenced, _ := r.router.Shards().With(8, 8, func(x *zen.ShardRange) { x.Fenced = true })
	if err := r.maps.Publish(t.Context(), fenced); err != nil {
		t.Fatal(err)
	}
	if err := r.state.Apply(t.Context(), []zen.Mutation{{Key: []byte("shardmove"),
		Value: []byte(`{"plan":{"From":8,"To":8,"Target":"target"},"source":"default","phase":"fenced","pass":1}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.tables[zen.TableObjects].Apply(t.Context(), []zen.Mutation{{Key: key(8, 1), Value: []byte("x")}}); !errors.Is(err, zenroute.ErrFenced) {
		t.Fatalf("write under the stale fence: %v, want ErrFenced", err)
	}
	p, lifted, err := mv.Recover(t.Context())
	if err != nil || !lifted || p == nil || *p != (zenmove.Plan{From: 8, To: 8, Target: "target"}) {
		t.Fatalf("Recover = %v, %v, %v", p, lifted, err)
	}
	if rg, _ := r.router.Shards().RangeFor(8); rg.Fenced || rg.Store != "default" {
		t.Fatalf("range after Recover: %+v", rg)
	}
	if err := r.tables[zen.TableObjects].Apply(t.Context(), []zen.Mutation{{Key: key(8, 1), Value: []byte("x")}}); err != nil {
		t.Fatalf("write after Recover: %v", err)
	}
	res, err := mv.Move(t.Context(), *p, nil)
	if err != nil || !res.Resumed {
		t.Fatalf("rerun after Recover: %+v, %v", res, err)
	}
	if rg, _ := r.router.Shards().RangeFor(8); rg.Store != "target" {
		t.Errorf("range after the rerun: %+v", rg)
	}
}

// slowScanTable makes every scan take a while, so a pass is slow.
type slowScanTable struct{ zen.Table }

func (s slowScanTable) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	// sleep: a slow scan makes a pass take longer than the plan's MaxFence.
	time.Sleep(5 * time.Millisecond)
	return s.Table.Scan(ctx, o)
}

type slowScanStore struct{ zen.Store }

func (s slowScanStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return slowScanTable{t}, nil
}

// TestFenceTooLongRefused: a range whose passes take longer than MaxFence is not fenced (the map
// and the shards' writes are untouched, no move is left unfinished); without the limit it moves.
func TestFenceTooLongRefused(t *testing.T) {
	r := newRig(t, time.Second)
	r.fill(t, []uint16{8}, 100)
	before := r.router.Shards()
	backs := map[string]zen.Store{"default": r.backs["default"], "target": slowScanStore{r.backs["target"]}}
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.InfoLevel)
	mv, err := zenmove.New(backs, r.maps, zenmove.Options{State: r.state, Batch: 16, Registerer: reg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	plan := zenmove.Plan{From: 8, To: 8, Target: "target", MaxFence: 10 * time.Millisecond}
	if _, err := mv.Move(t.Context(), plan, nil); !errors.Is(err, zenmove.ErrFenceTooLong) {
		t.Fatalf("move with a fence over its limit: %v, want ErrFenceTooLong", err)
	}
	// A refusal is the caller's to act on, not a failure of the system: a warning, counted apart.
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error logs for a refused fence: %v", n, logs.FilterLevelExact(zap.ErrorLevel).All()[0].Message)
	}
	if n := logs.FilterMessage("shard move refused").Len(); n != 1 {
		t.Errorf("%d \"shard move refused\" warnings, want 1", n)
	}
	if got := testutilCounter(t, reg, "smartfeed_shardmove_moves_total", "result", "refused"); got != 1 {
		t.Errorf("moves_total{result=refused} = %v, want 1", got)
	}
	if !r.router.Shards().Equal(before) {
		t.Errorf("map after a refused fence: %v", r.router.Shards().Ranges())
	}
	if _, err := r.state.Get(t.Context(), []byte("shardmove")); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("progress row after a refused fence: %v", err)
	}
	plan.MaxFence = -1
	res, err := mv.Move(t.Context(), plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without a limit: fence %v", res.Fence)
}

// failingTable fails every Apply while fails is above zero, counting it down, as a target that
// stops answering for a while does.
type failingTable struct {
	zen.Table
	fails, applies *atomic.Int64
}

func (f failingTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	f.applies.Add(1)
	if f.fails.Add(-1) >= 0 {
		return context.DeadlineExceeded
	}
	return f.Table.Apply(ctx, muts)
}

type failingStore struct {
	zen.Store
	fails, applies *atomic.Int64
}

func (f failingStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := f.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return failingTable{Table: t, fails: f.fails, applies: f.applies}, nil
}

// TestPassRetried: a catch-up pass whose writes to the target fail is run again after
// RetryBackoff (the move then completes, every row on the target, and the retries' waits,
// longer than the plan's MaxFence, do not count as the pass's duration); one that fails more
// often than PassRetries allows fails the move with the target's error, after 1 + PassRetries
// tries.
func TestPassRetried(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fails   int64
		retries int
		wantErr bool
	}{
		{"recovers", 2, 3, false},
		{"gives up", 100, 2, true},
		{"no retries", 1, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, time.Second)
			r.fill(t, []uint16{8}, 20)
			fails, applies := &atomic.Int64{}, &atomic.Int64{}
			fails.Store(tc.fails)
			backs := map[string]zen.Store{"default": r.backs["default"],
				"target": failingStore{Store: r.backs["target"], fails: fails, applies: applies}}
			var phases []string
			mv, err := zenmove.New(backs, r.maps, zenmove.Options{State: r.state, Batch: 8, Tables: []string{zen.TableObjects},
				PassRetries: tc.retries, RetryBackoff: 30 * time.Millisecond, MaxPasses: 1}) // the retried pass is the one the fence is judged on
			if err != nil {
				t.Fatal(err)
			}
			_, err = mv.Move(t.Context(), zenmove.Plan{From: 8, To: 8, Target: "target", MaxFence: 20 * time.Millisecond},
				func(p zenmove.Progress) { phases = append(phases, p.Phase) })
			retried := 0
			for _, ph := range phases {
				if ph == "retry" {
					retried++
				}
			}
			if tc.wantErr {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("move: err %v, want the target's DeadlineExceeded", err)
				}
				if want := max(tc.retries, 0); retried != want {
					t.Errorf("%d retries reported, want %d", retried, want)
				}
				if want := int64(max(tc.retries, 0) + 1); applies.Load() != want {
					t.Errorf("%d writes tried, want %d (one per pass: the first write of each fails)", applies.Load(), want)
				}
				return
			}
			if err != nil {
				t.Fatalf("move: %v", err)
			}
			if retried != int(tc.fails) {
				t.Errorf("%d retries reported, want %d", retried, tc.fails)
			}
			if got := len(r.rows(t, "target", zen.TableObjects, 8, 8)); got != 20 {
				t.Errorf("%d rows of shard 8 on the target, want 20", got)
			}
		})
	}
}

// TestWhatAnUnfinishedMoveBlocks: a move that started and failed (here its verification, so it
// lifted its fence) is unfinished, and no other range moves until it is rerun, its own sub-ranges
// included; a move refused before it fenced anything (its fence would be too long) leaves
// nothing unfinished, and a smaller range moves at once.
func TestWhatAnUnfinishedMoveBlocks(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		r := newRig(t, time.Second)
		r.fill(t, []uint16{8, 9}, 20)
		backs := map[string]zen.Store{"default": r.backs["default"], "target": lossyStore{Store: r.backs["target"], lose: key(8, 3)}}
		mv, err := zenmove.New(backs, r.maps, zenmove.Options{State: r.state, Batch: 8})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mv.Move(t.Context(), zenmove.Plan{From: 8, To: 9, Target: "target"}, nil); !errors.Is(err, zenmove.ErrMismatch) {
			t.Fatalf("move onto a target that loses a row: err %v, want ErrMismatch", err)
		}
		for _, p := range []zenmove.Plan{{From: 8, To: 8, Target: "target"}, {From: 9, To: 9, Target: "target"},
			{From: 8, To: 9, Target: "default"}, {From: 20, To: 21, Target: "target"}} {
			if _, err := mv.Move(t.Context(), p, nil); !errors.Is(err, zenmove.ErrUnfinished) {
				t.Errorf("%v after an unfinished move of shards 8–9: err %v, want ErrUnfinished", p, err)
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := newRig(t, time.Second)
		r.fill(t, []uint16{8, 9}, 50)
		backs := map[string]zen.Store{"default": r.backs["default"], "target": slowScanStore{r.backs["target"]}}
		mv, err := zenmove.New(backs, r.maps, zenmove.Options{State: r.state, Batch: 16})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mv.Move(t.Context(), zenmove.Plan{From: 8, To: 9, Target: "target", MaxFence: time.Millisecond}, nil); !errors.Is(err, zenmove.ErrFenceTooLong) {
			t.Fatalf("move with a fence over its limit: %v, want ErrFenceTooLong", err)
		}
		if _, err := mv.Move(t.Context(), zenmove.Plan{From: 8, To: 8, Target: "target", MaxFence: -1}, nil); err != nil {
			t.Fatalf("a smaller range after a refused move: %v", err)
		}
		for _, name := range zenroute.ShardedTables() {
			if diff := cmp.Diff(r.rows(t, "default", name, 8, 8), r.rows(t, "target", name, 8, 8)); diff != "" {
				t.Errorf("%s after the smaller move (-source +target):\n%s", name, diff)
			}
		}
	})
}
