package zentest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// modelClock is the settable clock the model suites give to Graph and Pools.
type modelClock struct {
	mu sync.Mutex
	t  time.Time
}

func newModelClock() *modelClock { return &modelClock{t: time.UnixMilli(1700000000000)} }

func (c *modelClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *modelClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func modelCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func modelID(t *testing.T, shard uint16, typ zen.Type, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(shard, typ, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func modelGraph(t *testing.T, s zen.Store, c *modelClock) *zen.Graph {
	t.Helper()
	g, err := zen.NewGraph(modelCtx(t), s, nil, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(0)
	return g
}

func modelPools(t *testing.T, s zen.Store, c *modelClock) (*zen.Pools, zen.Table) {
	t.Helper()
	tb, err := s.Table(modelCtx(t), "pools")
	if err != nil {
		t.Fatal(err)
	}
	return zen.NewPools(tb, c.Now), tb
}

// RunModel runs the acceptance suite of the zen model API (objects, IDs, the mod-shard map,
// edges, cursors, counts, pools, the deletion log and its compaction) on a backend. open must return a fresh, empty store for each
// call (each subtest calls it once).
func RunModel(t *testing.T, open func(t *testing.T) zen.Store) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, zen.Store)
	}{
		{"Objects", modelObjects}, {"IDAllocation", modelIDAllocation}, {"MapKey", modelMapKey},
		{"EdgesIdempotent", modelEdgesIdempotent}, {"EdgesCursor", modelEdgesCursor}, {"EdgesDuplicateSeq", modelEdgesDuplicateSeq},
		{"EdgesConcurrent", modelEdgesConcurrent}, {"EdgesMembers", modelEdgesMembers}, {"EdgesCountMany", modelEdgesCountMany},
		{"Pools", modelPoolsBasic}, {"PoolsConcurrentTake", modelPoolsConcurrentTake}, {"PoolsTombstones", modelPoolsTombstones},
		{"DeletionsCompacted", modelDeletionsCompacted}, {"DeletionsCompactRace", modelDeletionsCompactRace},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, open(t)) })
	}
}

func modelObjects(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	g := modelGraph(t, s, c)
	board := modelID(t, 3429, zen.TypeBoard, 1337)
	o, err := g.Create(ctx, zen.TypePin, board, map[string]any{"title": "t", "board": board.String(), "x": map[string]any{"y": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID.Shard() != 3429 || o.ID.Type() != zen.TypePin || o.Version != 1 {
		t.Fatalf("Create = %d (shard %d) v%d", o.ID, o.ID.Shard(), o.Version)
	}
	got, err := g.Get(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := zen.Object{ID: o.ID, Version: 1, Data: map[string]any{"title": "t", "board": board.String(), "x": map[string]any{"y": json.Number("1")}, "active": true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	up, err := g.Update(ctx, o.ID, func(d map[string]any) error { d["title"] = "u"; return nil })
	if err != nil || up.Version != 2 {
		t.Fatalf("Update = v%d, %v", up.Version, err)
	}
	many, err := g.GetMany(ctx, []zen.ID{o.ID, modelID(t, 1, zen.TypePin, 12345)})
	if err != nil || len(many) != 1 || many[o.ID].Data["title"] != "u" {
		t.Errorf("GetMany = %v, %v", many, err)
	}
	if err := g.Delete(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(ctx, o.ID); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if many, _ := g.GetMany(ctx, []zen.ID{o.ID}); len(many) != 0 {
		t.Errorf("GetMany after Delete: %v", many)
	}
	// Concurrent read-modify-writes all land.
	b, err := g.Create(ctx, zen.TypeBoard, 0, map[string]any{"n": 0})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if _, err := g.Update(ctx, b.ID, func(d map[string]any) error {
					n, err := d["n"].(json.Number).Int64()
					d["n"] = n + 1
					return err
				}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, _ := g.Get(ctx, b.ID); got.Data["n"] != json.Number("40") {
		t.Errorf("after 40 concurrent updates n = %v", got.Data["n"])
	}
}

func modelIDAllocation(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g1, g2 := modelGraph(t, s, newModelClock()), modelGraph(t, s, newModelClock())
	var (
		mu   sync.Mutex
		seen = map[zen.ID]bool{}
		wg   sync.WaitGroup
	)
	for w := range 8 {
		g := g1
		if w%2 == 1 {
			g = g2
		}
		wg.Go(func() {
			for range 50 {
				id, err := g.NewLocalID(ctx, 7, zen.TypeUser)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id := range seen {
		if id.Shard() != 7 || id.Type() != zen.TypeUser || id.Local() < 1 || id.Local() > 400 {
			t.Errorf("id %d outside shard 7 / user / 1..400", id)
		}
	}
	if len(seen) != 400 {
		t.Errorf("%d ids, want 400", len(seen))
	}
}

func modelMapKey(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	a, b := modelID(t, 1, zen.TypeUser, 1), modelID(t, 2, zen.TypeUser, 1)
	steps := []struct {
		key  string
		id   zen.ID
		want bool
	}{{"alice", a, true}, {"alice", a, true}, {"alice", b, false}, {"bob", b, true}}
	for _, st := range steps {
		if got, err := g.MapKey(ctx, "username", st.key, st.id); err != nil || got != st.want {
			t.Errorf("MapKey(%s, %d) = %v, %v; want %v", st.key, st.id, got, err, st.want)
		}
	}
	if id, err := g.LookupKey(ctx, "username", "alice"); err != nil || id != a {
		t.Errorf("LookupKey(alice) = %d, %v", id, err)
	}
	if _, err := g.LookupKey(ctx, "email", "alice"); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("LookupKey(email alice) = %v, want ErrNotFound", err)
	}
	var wins sync.Map
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := modelID(t, uint16(i+10), zen.TypeUser, 1)
			if ok, err := g.MapKey(ctx, "email", "x@example.com", id); err != nil {
				t.Error(err)
			} else if ok {
				wins.Store(id, true)
			}
		})
	}
	wg.Wait()
	n := 0
	wins.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d winners of one email, want 1", n)
	}
}

type modelPos struct {
	Seq uint64
	To  uint64
}

func modelPositions(es []zen.Edge) []modelPos {
	out := make([]modelPos, len(es))
	for i, e := range es {
		out[i] = modelPos{e.Seq.Lo, e.To.Local()}
	}
	return out
}

func modelCount(t *testing.T, g *zen.Graph, from zen.ID, et zen.EdgeType) int64 {
	t.Helper()
	n, err := g.CountEdges(modelCtx(t), from, et)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// modelEdgesIdempotent covers docs/data-model.md §3 S2 and S3 and inverse edges.
func modelEdgesIdempotent(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	u, v := modelID(t, 1, zen.TypeUser, 1), modelID(t, 2, zen.TypeUser, 2)
	for i := range 3 {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: seq.Seq{Lo: 5 + uint64(i)}, Data: []byte("d")}); err != nil {
			t.Fatal(err)
		}
	}
	es, next, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 10, true)
	if err != nil || next != "" {
		t.Fatalf("ListEdges: next %q, %v", next, err)
	}
	want := []zen.Edge{{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: seq.Seq{Lo: 5}, Data: []byte("d")}}
	if diff := cmp.Diff(want, es); diff != "" {
		t.Errorf("S2 list (-want +got):\n%s", diff)
	}
	if n := modelCount(t, g, u, zen.EdgeFollowsUser); n != 1 {
		t.Errorf("S2 count = %d, want 1", n)
	}
	if err := g.AddInverse(ctx, want[0]); err != nil {
		t.Fatal(err)
	}
	if e, err := g.HasEdge(ctx, v, zen.EdgeFollowedByUser, u); err != nil || e.Seq != want[0].Seq {
		t.Errorf("inverse HasEdge = %+v, %v", e, err)
	}
	for range 2 {
		if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v); err != nil {
			t.Fatal(err)
		}
	}
	if es, _, _ := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 10, true); len(es) != 0 {
		t.Errorf("S3 list after remove: %v", es)
	}
	if n := modelCount(t, g, u, zen.EdgeFollowsUser); n != 0 {
		t.Errorf("S3 count = %d, want 0", n)
	}
	if _, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("S3 HasEdge = %v, want ErrNotFound", err)
	}
}

// modelEdgesCountMany: CountEdgesMany answers what CountEdges answers for each list, in the
// keys' order (a list twice, a list never written, a list emptied again), and refuses a key
// whose From is not of the list type's kind.
func modelEdgesCountMany(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	u, v, w := modelID(t, 1, zen.TypeUser, 1), modelID(t, 2, zen.TypeUser, 2), modelID(t, 3, zen.TypeUser, 3)
	for i, e := range []zen.Edge{{From: u, Type: zen.EdgeFollowsUser, To: v}, {From: u, Type: zen.EdgeFollowsUser, To: w},
		{From: v, Type: zen.EdgeFollowsUser, To: w}, {From: w, Type: zen.EdgeFollowsUser, To: u}} {
		e.Seq = seq.Seq{Lo: 10 + uint64(i)}
		if err := g.AddEdge(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RemoveEdge(ctx, w, zen.EdgeFollowsUser, u); err != nil {
		t.Fatal(err)
	}
	keys := []zen.ListKey{{From: u, Type: zen.EdgeFollowsUser}, {From: v, Type: zen.EdgeFollowsUser}, {From: w, Type: zen.EdgeFollowsUser},
		{From: u, Type: zen.EdgeFollowedByUser}, {From: u, Type: zen.EdgeFollowsUser}}
	got, err := g.CountEdgesMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(keys))
	for i, k := range keys {
		want[i] = modelCount(t, g, k.From, k.Type)
	}
	if diff := cmp.Diff([]int64{2, 1, 0, 0, 2}, want); diff != "" {
		t.Errorf("CountEdges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CountEdgesMany against CountEdges (-want +got):\n%s", diff)
	}
	if got, err := g.CountEdgesMany(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("CountEdgesMany(nil) = %v, %v", got, err)
	}
	board := modelID(t, 4, zen.TypeBoard, 4)
	if _, err := g.CountEdgesMany(ctx, []zen.ListKey{keys[0], {From: board, Type: zen.EdgeFollowsUser}}); err == nil {
		t.Error("CountEdgesMany with a board as a user's list: no error")
	}
}

// modelEdgesCursor covers docs/data-model.md §3 S5 and cursor refusal.
func modelEdgesCursor(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	b := modelID(t, 1, zen.TypeBoard, 1)
	for i, sq := range []uint64{50, 40, 30, 20, 10} {
		if err := g.AddEdge(ctx, zen.Edge{From: b, Type: zen.EdgeBoardPins, To: modelID(t, 1, zen.TypePin, uint64(i+1)), Seq: seq.Seq{Lo: sq}}); err != nil {
			t.Fatal(err)
		}
	}
	p1, next, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, "", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]modelPos{{50, 1}, {40, 2}}, modelPositions(p1)); diff != "" {
		t.Errorf("S5 page 1 (-want +got):\n%s", diff)
	}
	if err := g.AddEdge(ctx, zen.Edge{From: b, Type: zen.EdgeBoardPins, To: modelID(t, 1, zen.TypePin, 9), Seq: seq.Seq{Lo: 45}}); err != nil {
		t.Fatal(err)
	}
	p2, _, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, next, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]modelPos{{30, 3}, {20, 4}}, modelPositions(p2)); diff != "" {
		t.Errorf("S5 page 2 (-want +got):\n%s", diff)
	}
	if n := modelCount(t, g, b, zen.EdgeBoardPins); n != 6 {
		t.Errorf("count = %d, want 6", n)
	}
	other := modelID(t, 1, zen.TypeBoard, 2)
	for name, call := range map[string]func() error{
		"other list":      func() error { _, _, err := g.ListEdges(ctx, other, zen.EdgeBoardPins, next, 2, true); return err },
		"other direction": func() error { _, _, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, next, 2, false); return err },
		"garbage":         func() error { _, _, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, "xyz", 2, true); return err },
	} {
		if err := call(); !errors.Is(err, zen.ErrBadCursor) {
			t.Errorf("%s: %v, want ErrBadCursor", name, err)
		}
	}
	// Ascending, page by page, sees every row once.
	var all []zen.Edge
	cur := ""
	for {
		es, n, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, cur, 4, false)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, es...)
		if n == "" {
			break
		}
		cur = n
	}
	if diff := cmp.Diff([]modelPos{{10, 5}, {20, 4}, {30, 3}, {40, 2}, {45, 9}, {50, 1}}, modelPositions(all)); diff != "" {
		t.Errorf("ascending (-want +got):\n%s", diff)
	}
}

// modelEdgesDuplicateSeq covers docs/data-model.md §3 S6.
func modelEdgesDuplicateSeq(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	u := modelID(t, 1, zen.TypeUser, 1)
	for _, to := range []uint64{7, 9} {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserLikes, To: modelID(t, 1, zen.TypePin, to), Seq: seq.Seq{Lo: 30}}); err != nil {
			t.Fatal(err)
		}
	}
	p1, next, err := g.ListEdges(ctx, u, zen.EdgeUserLikes, "", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	p2, end, err := g.ListEdges(ctx, u, zen.EdgeUserLikes, next, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]modelPos{{30, 9}, {30, 7}}, modelPositions(append(p1, p2...))); diff != "" || end != "" {
		t.Errorf("S6 (-want +got):\n%s (end %q)", diff, end)
	}
}

// modelEdgesConcurrent races adders and removers and checks list, HasEdge and count agree.
func modelEdgesConcurrent(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	u := modelID(t, 1, zen.TypeUser, 1)
	const targets = 10
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 60 {
				v := modelID(t, 2, zen.TypeUser, 1+r.Uint64N(targets))
				var err error
				if r.IntN(2) == 0 {
					err = g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: seq.Seq{Lo: 1 + r.Uint64N(5)}})
				} else {
					err = g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	es, _, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 100, false)
	if err != nil {
		t.Fatal(err)
	}
	has := 0
	for i := range targets {
		if _, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, modelID(t, 2, zen.TypeUser, uint64(i+1))); err == nil {
			has++
		}
	}
	if n := modelCount(t, g, u, zen.EdgeFollowsUser); n != int64(len(es)) || has != len(es) {
		t.Errorf("count %d, list %d, HasEdge %d: want all equal", n, len(es), has)
	}
	want := make([]zen.ID, 0, len(es))
	for _, e := range es {
		want = append(want, e.To)
	}
	slices.Sort(want)
	got, more, err := g.Members(ctx, u, zen.EdgeFollowsUser, 100)
	if err != nil || more {
		t.Fatalf("Members: more %v, %v", more, err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Members disagrees with ListEdges (-want +got):\n%s", diff)
	}
}

// modelEdgesMembers: Members lists a list's members in ID order whatever their seqs, pages at
// limit and says when there are more.
func modelEdgesMembers(t *testing.T, s zen.Store) {
	ctx := modelCtx(t)
	g := modelGraph(t, s, newModelClock())
	u := modelID(t, 1, zen.TypeUser, 1)
	var all []zen.ID
	for i := range 6 {
		v := modelID(t, uint16(1+i%3), zen.TypeUser, uint64(10+i))
		all = append(all, v)
		// Seqs run against ID order, so list order is the reverse of ID order.
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: seq.Seq{Lo: uint64(100 - i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, all[2]); err != nil {
		t.Fatal(err)
	}
	all = slices.Delete(all, 2, 3)
	slices.Sort(all)
	for _, tc := range []struct {
		limit int
		want  []zen.ID
		more  bool
	}{
		{limit: 1, want: all[:1], more: true},
		{limit: 4, want: all[:4], more: true},
		{limit: 5, want: all, more: false},
		{limit: 100, want: all, more: false},
	} {
		got, more, err := g.Members(ctx, u, zen.EdgeFollowsUser, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" || more != tc.more {
			t.Errorf("limit %d: more %v, want %v (-want +got):\n%s", tc.limit, more, tc.more, diff)
		}
	}
	if got, more, err := g.Members(ctx, modelID(t, 1, zen.TypeUser, 2), zen.EdgeFollowsUser, 10); err != nil || more || len(got) != 0 {
		t.Errorf("empty list: %v, more %v, %v", got, more, err)
	}
}

type modelSP struct {
	Score float64
	Pin   uint64
	Src   zen.Source
}

func modelScorePins(es []zen.PoolEntry) []modelSP {
	out := make([]modelSP, len(es))
	for i, e := range es {
		out[i] = modelSP{e.Score, e.Pin.Local(), e.Source}
	}
	return out
}

func modelPoolsBasic(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, tb := modelPools(t, s, c)
	u := modelID(t, 3429, zen.TypeUser, 733)
	pin := func(l uint64) zen.ID { return modelID(t, 3429, zen.TypePin, l) }
	in := []zen.PoolEntry{
		{User: u, Source: zen.SourceFollowing, Score: 0.5, Pin: pin(3), Reason: "r"},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(2)},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(1)},
		{User: u, Source: zen.SourceFollowing, Score: -0.1, Pin: pin(4)},
		{User: u, Source: zen.SourceFollowing, Score: 1.0, Pin: pin(5)},
		{User: u, Source: zen.SourceRelated, Score: 0.2, Pin: pin(5)}, // worse: dropped
		{User: u, Source: zen.SourceRelated, Score: 0.7, Pin: pin(6), CreatedMs: 5},
	}
	// Append-only: one row per (user, source, pin); the same batch again writes the same rows.
	if n, err := p.Insert(ctx, in); err != nil || n != 7 {
		t.Fatalf("Insert = %d, %v; want 7", n, err)
	}
	rows := func() int {
		kvs, err := tb.Scan(ctx, userRange(u))
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}
	if n, err := p.Insert(ctx, in); err != nil || n != 7 || rows() != 7 {
		t.Fatalf("re-Insert = %d, %v, %d rows; want 7 rows written, 7 stored", n, err, rows())
	}
	top := func(src zen.Source) []modelSP {
		es, err := p.Top(ctx, u, src, 100)
		if err != nil {
			t.Fatal(err)
		}
		return modelScorePins(es)
	}
	if diff := cmp.Diff([]modelSP{{1, 5, 1}, {0.93, 1, 1}, {0.93, 2, 1}, {0.5, 3, 1}, {-0.1, 4, 1}}, top(zen.SourceFollowing)); diff != "" {
		t.Errorf("Top (-want +got):\n%s", diff)
	}
	// Pin 3 moves to related with a better score.
	if n, _ := p.Insert(ctx, []zen.PoolEntry{{User: u, Source: zen.SourceRelated, Score: 0.8, Pin: pin(3)}}); n != 1 {
		t.Errorf("improving insert = %d", n)
	}
	if diff := cmp.Diff([]modelSP{{0.8, 3, 3}, {0.7, 6, 3}, {0.2, 5, 3}}, top(zen.SourceRelated)); diff != "" {
		t.Errorf("Top related (-want +got):\n%s", diff)
	}
	// Across sources a pin's best row wins: 5 stays in following, 3 moved to related.
	tops := func() [][]modelSP {
		var lists [][]zen.PoolEntry
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceRelated} {
			es, err := p.Top(ctx, u, src, 100)
			if err != nil {
				t.Fatal(err)
			}
			lists = append(lists, es)
		}
		var out [][]modelSP
		for _, l := range zen.BestAcrossSources(lists) {
			out = append(out, modelScorePins(l))
		}
		return out
	}
	if diff := cmp.Diff([][]modelSP{{{1, 5, 1}, {0.93, 1, 1}, {0.93, 2, 1}, {-0.1, 4, 1}}, {{0.8, 3, 3}, {0.7, 6, 3}}}, tops()); diff != "" {
		t.Errorf("best across sources (-want +got):\n%s", diff)
	}
	if n, err := p.Size(ctx, u, zen.SourceRelated); err != nil || n != 2 {
		t.Errorf("Size related = %d, %v; want 2", n, err)
	}
	got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(5)}, {Pin: pin(3)}, {Pin: pin(5)}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]modelSP{{1, 5, 1}, {0.8, 3, 3}}, modelScorePins(got)); diff != "" {
		t.Errorf("Take (-want +got):\n%s", diff)
	}
	if n, _ := p.Size(ctx, u, zen.SourceFollowing); n != 3 {
		t.Errorf("Size = %d, want 3", n)
	}
	if n, err := p.Trim(ctx, u, zen.SourceFollowing, 2); err != nil || n != 1 {
		t.Errorf("Trim = %d, %v", n, err)
	}
	if n, err := p.Expire(ctx, u, 6); err != nil || n != 1 {
		t.Errorf("Expire = %d, %v", n, err)
	}
	if n, err := p.Remove(ctx, u, []zen.ID{pin(1)}); err != nil || n != 1 {
		t.Errorf("Remove = %d, %v", n, err)
	}
	if n, err := p.RemoveWhere(ctx, u, 0, func(e zen.PoolEntry) bool { return e.Pin == pin(2) }); err != nil || n != 1 {
		t.Errorf("RemoveWhere = %d, %v", n, err)
	}
	if n, _ := p.Size(ctx, u, 0); n != 0 {
		t.Errorf("Size after removing all = %d", n)
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got := top(zen.SourceFollowing); len(got) != 0 {
		t.Errorf("Top after DeleteUser = %v", got)
	}
	if _, err := p.Insert(ctx, []zen.PoolEntry{{User: u, Source: 1, Score: math.NaN(), Pin: pin(1)}}); err == nil {
		t.Error("NaN score accepted")
	}
}

func modelPoolsConcurrentTake(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, _ := modelPools(t, s, c)
	u := modelID(t, 1, zen.TypeUser, 1)
	const pins = 60
	var in []zen.PoolEntry
	for i := range pins {
		in = append(in, zen.PoolEntry{User: u, Pin: modelID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.SourceFollowing, Score: float64(i % 7)})
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		won = map[zen.ID]int{}
		wg  sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for {
				es, err := p.Top(ctx, u, zen.SourceFollowing, 8)
				if err != nil {
					t.Error(err)
					return
				}
				if len(es) == 0 {
					return
				}
				got, err := p.Take(ctx, u, es)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range got {
					won[e.Pin]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(won) != pins {
		t.Errorf("%d pins taken, want %d", len(won), pins)
	}
	for pin, n := range won {
		if n != 1 {
			t.Errorf("pin %d taken %d times", pin, n)
		}
	}
}

// modelPoolsTombstones: a pin taken or forgotten stays out of the pools for later Inserts (a
// late fanout), Restore gives back only a taken pin, and Expire and DeleteUser drop tombstones.
func modelPoolsTombstones(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, tb := modelPools(t, s, c)
	u := modelID(t, 7, zen.TypeUser, 77)
	pin := func(l uint64) zen.ID { return modelID(t, 7, zen.TypePin, l) }
	nowMs := c.Now().UnixMilli()
	e := func(l uint64, score float64) zen.PoolEntry {
		return zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: score, Pin: pin(l), CreatedMs: nowMs}
	}
	pins := func() []uint64 {
		es, err := p.Top(ctx, u, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, e := range es {
			out = append(out, e.Pin.Local())
		}
		return out
	}
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(1, 0.9), e(2, 0.8)}); err != nil || n != 2 {
		t.Fatalf("Insert = %d, %v", n, err)
	}
	if got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	if n, err := p.Forget(ctx, u, []zen.ID{pin(3)}); err != nil || n != 1 {
		t.Errorf("Forget(absent) = %d, %v; want 1 (an absent pin is remembered too)", n, err)
	}
	// Inserts are blind: the rows are written, and readers leave the pins out.
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(1, 5), e(3, 5)}); err != nil || n != 2 {
		t.Errorf("Insert of taken and forgotten pins = %d, %v; want 2 rows written", n, err)
	}
	if n, err := p.Size(ctx, u, 0); err != nil || n != 1 {
		t.Errorf("Size after late inserts = %d, %v; want 1", n, err)
	}
	if diff := cmp.Diff([]uint64{2}, pins()); diff != "" {
		t.Errorf("after late inserts (-want +got):\n%s", diff)
	}
	if n, err := p.Restore(ctx, []zen.PoolEntry{e(1, 0.9), e(3, 0.9)}); err != nil || n != 1 {
		t.Errorf("Restore = %d, %v; want 1 (the taken pin only)", n, err)
	}
	if diff := cmp.Diff([]uint64{1, 2}, pins()); diff != "" {
		t.Errorf("after Restore (-want +got):\n%s", diff)
	}
	if n, err := p.Size(ctx, u, 0); err != nil || n != 2 {
		t.Errorf("Size = %d, %v; want 2", n, err)
	}
	// Tombstones older than Expire's cut-off go (uncounted); then the pin may come again.
	c.Add(time.Hour)
	if n, err := p.Expire(ctx, u, c.Now().UnixMilli()); err != nil || n != 2 {
		t.Errorf("Expire = %d, %v; want 2", n, err)
	}
	if rows, err := tb.Scan(ctx, userRange(u)); err != nil || len(rows) != 0 {
		t.Errorf("rows after Expire: %d, %v; want none", len(rows), err)
	}
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(3, 0.5)}); err != nil || n != 1 {
		t.Errorf("Insert after expiry = %d, %v; want 1", n, err)
	}
	if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(3)}}); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if rows, err := tb.Scan(ctx, userRange(u)); err != nil || len(rows) != 0 {
		t.Errorf("rows after DeleteUser: %d, %v; want none", len(rows), err)
	}
}

// userRange is the scan range of every pools row of user (all are led by the user ID).
func userRange(u zen.ID) zen.ScanOptions {
	return zen.ScanOptions{Start: binary.BigEndian.AppendUint64(nil, uint64(u)), Stop: binary.BigEndian.AppendUint64(nil, uint64(u)+1)}
}

// RunModelRandomized applies the same n random zen operations (objects, IDs, the mod-shard map,
// edges with cursors and counts, pools) to stores a and b, which must start empty, and fails at
// the first result that differs. Use zenmem as a (the reference model) and a real backend as b.
func RunModelRandomized(t *testing.T, a, b zen.Store, seed uint64, n int) {
	ctx := modelCtx(t)
	c := newModelClock()
	shards, err := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 3, Store: "a", Open: true}, {From: 4, To: 7, Store: "b", Open: false}})
	if err != nil {
		t.Fatal(err)
	}
	type side struct {
		g *zen.Graph
		p *zen.Pools
	}
	var sides [2]side
	for i, s := range []zen.Store{a, b} {
		g, err := zen.NewGraph(ctx, s, shards, c.Now)
		if err != nil {
			t.Fatal(err)
		}
		g.SeedShards(seed)
		p, _ := modelPools(t, s, c)
		sides[i] = side{g, p}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	var objects []zen.ID
	users := make([]zen.ID, 4)
	pins := make([]zen.ID, 12)
	boards := make([]zen.ID, 3)
	for i := range users {
		users[i] = modelID(t, uint16(i%8), zen.TypeUser, uint64(100+i))
	}
	for i := range pins {
		pins[i] = modelID(t, uint16(i%8), zen.TypePin, uint64(100+i))
	}
	for i := range boards {
		boards[i] = modelID(t, uint16(i%8), zen.TypeBoard, uint64(100+i))
	}
	pick := func(ids []zen.ID) zen.ID { return ids[r.IntN(len(ids))] }
	cursors := map[string]string{} // list key -> last next cursor
	edgeTypes := []struct {
		et       zen.EdgeType
		from, to []zen.ID
	}{
		{zen.EdgeFollowsUser, users, users}, {zen.EdgeBoardPins, boards, pins}, {zen.EdgeUserLikes, users, pins}, {zen.EdgeFollowsBoard, users, boards},
	}
	// outcome normalises a result for comparison: errors by kind, values as they are.
	type outcome struct {
		Val any
		Err string
	}
	errKind := func(err error) string {
		switch {
		case err == nil:
			return ""
		case errors.Is(err, zen.ErrNotFound):
			return "not found"
		case errors.Is(err, zen.ErrBadCursor):
			return "bad cursor"
		}
		return "error"
	}
	for step := range n {
		c.Add(time.Duration(r.IntN(3)) * time.Millisecond)
		op := r.IntN(20)
		// Arguments are drawn once, outside the per-side closure.
		var (
			what string
			run  func(s side) outcome
			post func(outcome)
		)
		switch op {
		case 0, 1:
			typ := zen.Type(1 + r.IntN(4))
			near := zen.ID(0)
			if r.IntN(2) == 0 {
				near = pick(boards)
			}
			data := map[string]any{"k": r.IntN(5)}
			what = fmt.Sprintf("Create(%d, near %d)", typ, near)
			run = func(s side) outcome {
				o, err := s.g.Create(ctx, typ, near, data)
				return outcome{o, errKind(err)}
			}
		case 2:
			if len(objects) == 0 {
				continue
			}
			id := objects[r.IntN(len(objects))]
			what = fmt.Sprintf("Get(%d)", id)
			run = func(s side) outcome { o, err := s.g.Get(ctx, id); return outcome{o, errKind(err)} }
		case 3:
			if len(objects) == 0 {
				continue
			}
			id, v := objects[r.IntN(len(objects))], r.IntN(100)
			what = fmt.Sprintf("Update(%d)", id)
			run = func(s side) outcome {
				o, err := s.g.Update(ctx, id, func(d map[string]any) error { d["v"] = v; return nil })
				return outcome{o, errKind(err)}
			}
		case 4:
			if len(objects) == 0 {
				continue
			}
			id := objects[r.IntN(len(objects))]
			what = fmt.Sprintf("Delete(%d)", id)
			run = func(s side) outcome { return outcome{nil, errKind(s.g.Delete(ctx, id))} }
		case 5:
			ids := append([]zen.ID(nil), objects...)
			what = "GetMany"
			run = func(s side) outcome { m, err := s.g.GetMany(ctx, ids); return outcome{m, errKind(err)} }
		case 6, 7, 8:
			et := edgeTypes[r.IntN(len(edgeTypes))]
			e := zen.Edge{From: pick(et.from), Type: et.et, To: pick(et.to), Data: []byte{byte(r.IntN(3))}}
			if r.IntN(2) == 0 {
				e.Seq = seq.Seq{Lo: uint64(r.IntN(5))}
			}
			what = fmt.Sprintf("AddEdge(%+v)", e)
			run = func(s side) outcome { return outcome{nil, errKind(s.g.AddEdge(ctx, e))} }
		case 9:
			et := edgeTypes[r.IntN(len(edgeTypes))]
			from, to := pick(et.from), pick(et.to)
			what = fmt.Sprintf("RemoveEdge(%d %d %d)", from, et.et, to)
			run = func(s side) outcome { return outcome{nil, errKind(s.g.RemoveEdge(ctx, from, et.et, to))} }
		case 10:
			et := edgeTypes[r.IntN(len(edgeTypes))]
			from, to := pick(et.from), pick(et.to)
			what = fmt.Sprintf("HasEdge(%d %d %d)", from, et.et, to)
			run = func(s side) outcome { e, err := s.g.HasEdge(ctx, from, et.et, to); return outcome{e, errKind(err)} }
		case 11, 12:
			et := edgeTypes[r.IntN(len(edgeTypes))]
			from, limit, newest := pick(et.from), 1+r.IntN(4), r.IntN(2) == 0
			key := fmt.Sprint(from, et.et, newest)
			cur := ""
			if r.IntN(3) > 0 {
				cur = cursors[key]
			}
			what = fmt.Sprintf("ListEdges(%d %d %q %d %v)", from, et.et, cur, limit, newest)
			run = func(s side) outcome {
				es, next, err := s.g.ListEdges(ctx, from, et.et, cur, limit, newest)
				return outcome{[]any{es, next}, errKind(err)}
			}
			post = func(o outcome) {
				if v, ok := o.Val.([]any); ok && o.Err == "" {
					cursors[key] = v[1].(string)
				}
			}
		case 13:
			et := edgeTypes[r.IntN(len(edgeTypes))]
			from := pick(et.from)
			what = fmt.Sprintf("CountEdges(%d %d)", from, et.et)
			run = func(s side) outcome { n, err := s.g.CountEdges(ctx, from, et.et); return outcome{n, errKind(err)} }
		case 14:
			key, id := fmt.Sprint("k", r.IntN(6)), pick(users)
			what = fmt.Sprintf("MapKey(%s, %d)", key, id)
			run = func(s side) outcome {
				ok, err := s.g.MapKey(ctx, "username", key, id)
				got, lerr := s.g.LookupKey(ctx, "username", key)
				return outcome{[]any{ok, got, errKind(lerr)}, errKind(err)}
			}
		case 15, 16:
			var es []zen.PoolEntry
			for range 1 + r.IntN(5) {
				es = append(es, zen.PoolEntry{User: pick(users), Source: zen.Source(1 + r.IntN(3)), Score: float64(r.IntN(8)) / 4, Pin: pick(pins), CreatedMs: int64(r.IntN(10))})
			}
			what = fmt.Sprintf("Insert(%d entries)", len(es))
			run = func(s side) outcome { n, err := s.p.Insert(ctx, es); return outcome{n, errKind(err)} }
		case 17:
			u, src, k := pick(users), zen.Source(1+r.IntN(3)), 1+r.IntN(6)
			what = fmt.Sprintf("Top(%d %d %d)", u, src, k)
			run = func(s side) outcome { es, err := s.p.Top(ctx, u, src, k); return outcome{es, errKind(err)} }
			if r.IntN(2) == 0 {
				// TopMany of every source reads what Top of each does.
				srcs := []zen.Source{1, 2, 3}
				what = fmt.Sprintf("TopMany(%d %v %d)", u, srcs, k)
				run = func(s side) outcome {
					lists, err := s.p.TopMany(ctx, u, srcs, k)
					if err != nil {
						return outcome{nil, errKind(err)}
					}
					for i, src := range srcs {
						one, err := s.p.Top(ctx, u, src, k)
						if err != nil {
							t.Fatalf("seed %d step %d Top(%d %d %d) after %s: %v", seed, step, u, src, k, what, err)
						}
						if diff := cmp.Diff(one, lists[i]); diff != "" {
							t.Fatalf("seed %d step %d %s: source %d differs from Top (-Top +TopMany):\n%s", seed, step, what, src, diff)
						}
					}
					return outcome{lists, ""}
				}
			}
		case 18:
			u := pick(users)
			es := []zen.PoolEntry{{Pin: pick(pins)}, {Pin: pick(pins)}}
			what = fmt.Sprintf("Take(%d)", u)
			run = func(s side) outcome { got, err := s.p.Take(ctx, u, es); return outcome{got, errKind(err)} }
		case 19:
			u, src, sub := pick(users), zen.Source(1+r.IntN(3)), r.IntN(5)
			k, cut := r.IntN(3), int64(r.IntN(10))
			what = fmt.Sprintf("pool upkeep %d (%d %d)", sub, u, src)
			run = func(s side) outcome {
				var n int
				var err error
				switch sub {
				case 0:
					n, err = s.p.Trim(ctx, u, src, k)
				case 1:
					n, err = s.p.Expire(ctx, u, cut)
				case 2:
					n, err = s.p.RemoveWhere(ctx, u, src, func(e zen.PoolEntry) bool { return e.Score < 0.5 })
				case 3:
					n, err = s.p.Size(ctx, u, src)
				case 4:
					var m int
					n, m, err = s.p.Upkeep(ctx, u, k, cut)
					n = 100*n + m
				}
				return outcome{n, errKind(err)}
			}
		}
		if run == nil {
			continue
		}
		ra, rb := run(sides[0]), run(sides[1])
		if diff := cmp.Diff(ra, rb); diff != "" {
			t.Fatalf("seed %d step %d %s: stores differ (-a +b):\n%s", seed, step, what, diff)
		}
		if o, ok := ra.Val.(zen.Object); ok && ra.Err == "" && op <= 1 {
			objects = append(objects, o.ID)
		}
		if post != nil {
			post(ra)
		}
	}
}
