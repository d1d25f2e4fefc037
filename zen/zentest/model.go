package zentest

import (
	"context"
	"encoding/json"
	"errors"
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
