package zentest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

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
	var sides [2]modelSide
	for i, s := range []zen.Store{a, b} {
		g, err := zen.NewGraph(ctx, s, shards, c.Now)
		if err != nil {
			t.Fatal(err)
		}
		g.SeedShards(seed)
		p, _ := modelPools(t, s, c)
		sides[i] = modelSide{g, p}
	}
	w := newModelWorld(ctx, t, seed)
	for step := range n {
		c.Add(time.Duration(w.r.IntN(3)) * time.Millisecond)
		op := w.r.IntN(20)
		// Arguments are drawn once, outside the per-side closure.
		var (
			what string
			run  func(s modelSide) modelOutcome
			post func(modelOutcome)
		)
		if op < 15 {
			what, run, post = w.graphOp(op)
		} else {
			what, run = w.poolOp(op, step)
		}
		if run == nil {
			continue
		}
		ra, rb := run(sides[0]), run(sides[1])
		if diff := cmp.Diff(ra, rb); diff != "" {
			t.Fatalf("seed %d step %d %s: stores differ (-a +b):\n%s", seed, step, what, diff)
		}
		if o, ok := ra.Val.(zen.Object); ok && ra.Err == "" && op <= 1 {
			w.objects = append(w.objects, o.ID)
		}
		if post != nil {
			post(ra)
		}
	}
}

// modelSide is one store's graph and pools in RunModelRandomized.
type modelSide struct {
	g *zen.Graph
	p *zen.Pools
}

// modelOutcome normalises a result for comparison: errors by kind, values as they are.
type modelOutcome struct {
	Val any
	Err string
}

// errKind is how the randomized runs compare errors: by kind, not by text.
func errKind(err error) string {
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

// modelEdgeType is an edge type RunModelRandomized writes, with the IDs its ends are drawn from.
type modelEdgeType struct {
	et       zen.EdgeType
	from, to []zen.ID
}

// modelWorld is what RunModelRandomized's operations are drawn from: the random source, the IDs,
// the objects created so far and the last cursor of each list.
type modelWorld struct {
	ctx                 context.Context
	t                   *testing.T
	seed                uint64
	r                   *rand.Rand
	objects             []zen.ID
	users, pins, boards []zen.ID
	cursors             map[string]string // list key -> last next cursor
	edgeTypes           []modelEdgeType
}

func newModelWorld(ctx context.Context, t *testing.T, seed uint64) *modelWorld {
	w := &modelWorld{ctx: ctx, t: t, seed: seed, r: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		users: make([]zen.ID, 4), pins: make([]zen.ID, 12), boards: make([]zen.ID, 3), cursors: map[string]string{}}
	for i := range w.users {
		w.users[i] = modelID(t, uint16(i%8), zen.TypeUser, uint64(100+i))
	}
	for i := range w.pins {
		w.pins[i] = modelID(t, uint16(i%8), zen.TypePin, uint64(100+i))
	}
	for i := range w.boards {
		w.boards[i] = modelID(t, uint16(i%8), zen.TypeBoard, uint64(100+i))
	}
	w.edgeTypes = []modelEdgeType{
		{zen.EdgeFollowsUser, w.users, w.users}, {zen.EdgeBoardPins, w.boards, w.pins}, {zen.EdgeUserLikes, w.users, w.pins}, {zen.EdgeFollowsBoard, w.users, w.boards},
	}
	return w
}

func (w *modelWorld) pick(ids []zen.ID) zen.ID { return ids[w.r.IntN(len(ids))] }

// graphOp draws the arguments of graph operation op (0–14) and returns the call to make on each
// side (nil: nothing to do) and what to do with its outcome.
func (w *modelWorld) graphOp(op int) (what string, run func(s modelSide) modelOutcome, post func(modelOutcome)) {
	if op >= 6 && op <= 13 {
		return w.edgeOp(op)
	}
	return w.objectOp(op)
}

// objectOp is graphOp's object and key operations (0–5 and 14).
func (w *modelWorld) objectOp(op int) (what string, run func(s modelSide) modelOutcome, post func(modelOutcome)) {
	switch op {
	case 0, 1:
		typ := zen.Type(1 + w.r.IntN(4))
		near := zen.ID(0)
		if w.r.IntN(2) == 0 {
			near = w.pick(w.boards)
		}
		data := map[string]any{"k": w.r.IntN(5)}
		what = fmt.Sprintf("Create(%d, near %d)", typ, near)
		run = func(s modelSide) modelOutcome {
			o, err := s.g.Create(w.ctx, typ, near, data)
			return modelOutcome{o, errKind(err)}
		}
	case 2:
		if len(w.objects) == 0 {
			return "", nil, nil
		}
		id := w.objects[w.r.IntN(len(w.objects))]
		what = fmt.Sprintf("Get(%d)", id)
		run = func(s modelSide) modelOutcome {
			o, err := s.g.Get(w.ctx, id)
			return modelOutcome{o, errKind(err)}
		}
	case 3:
		if len(w.objects) == 0 {
			return "", nil, nil
		}
		id, v := w.objects[w.r.IntN(len(w.objects))], w.r.IntN(100)
		what = fmt.Sprintf("Update(%d)", id)
		run = func(s modelSide) modelOutcome {
			o, err := s.g.Update(w.ctx, id, func(d map[string]any) error { d["v"] = v; return nil })
			return modelOutcome{o, errKind(err)}
		}
	case 4:
		if len(w.objects) == 0 {
			return "", nil, nil
		}
		id := w.objects[w.r.IntN(len(w.objects))]
		what = fmt.Sprintf("Delete(%d)", id)
		run = func(s modelSide) modelOutcome { return modelOutcome{nil, errKind(s.g.Delete(w.ctx, id))} }
	case 5:
		ids := append([]zen.ID(nil), w.objects...)
		what = "GetMany"
		run = func(s modelSide) modelOutcome {
			m, err := s.g.GetMany(w.ctx, ids)
			return modelOutcome{m, errKind(err)}
		}
	case 14:
		key, id := fmt.Sprint("k", w.r.IntN(6)), w.pick(w.users)
		what = fmt.Sprintf("MapKey(%s, %d)", key, id)
		run = func(s modelSide) modelOutcome {
			ok, err := s.g.MapKey(w.ctx, "username", key, id)
			got, lerr := s.g.LookupKey(w.ctx, "username", key)
			return modelOutcome{[]any{ok, got, errKind(lerr)}, errKind(err)}
		}
	}
	return what, run, nil
}

// edgeOp is graphOp's edge operations (6–13).
func (w *modelWorld) edgeOp(op int) (what string, run func(s modelSide) modelOutcome, post func(modelOutcome)) {
	switch op {
	case 6, 7, 8:
		et := w.edgeTypes[w.r.IntN(len(w.edgeTypes))]
		e := zen.Edge{From: w.pick(et.from), Type: et.et, To: w.pick(et.to), Data: []byte{byte(w.r.IntN(3))}}
		if w.r.IntN(2) == 0 {
			e.Seq = seq.Seq{Lo: uint64(w.r.IntN(5))}
		}
		what = fmt.Sprintf("AddEdge(%+v)", e)
		run = func(s modelSide) modelOutcome { return modelOutcome{nil, errKind(s.g.AddEdge(w.ctx, e))} }
	case 9:
		et := w.edgeTypes[w.r.IntN(len(w.edgeTypes))]
		from, to := w.pick(et.from), w.pick(et.to)
		what = fmt.Sprintf("RemoveEdge(%d %d %d)", from, et.et, to)
		run = func(s modelSide) modelOutcome {
			return modelOutcome{nil, errKind(s.g.RemoveEdge(w.ctx, from, et.et, to))}
		}
	case 10:
		et := w.edgeTypes[w.r.IntN(len(w.edgeTypes))]
		from, to := w.pick(et.from), w.pick(et.to)
		what = fmt.Sprintf("HasEdge(%d %d %d)", from, et.et, to)
		run = func(s modelSide) modelOutcome {
			e, err := s.g.HasEdge(w.ctx, from, et.et, to)
			return modelOutcome{e, errKind(err)}
		}
	case 11, 12:
		et := w.edgeTypes[w.r.IntN(len(w.edgeTypes))]
		from, limit, newest := w.pick(et.from), 1+w.r.IntN(4), w.r.IntN(2) == 0
		key := fmt.Sprint(from, et.et, newest)
		cur := ""
		if w.r.IntN(3) > 0 {
			cur = w.cursors[key]
		}
		what = fmt.Sprintf("ListEdges(%d %d %q %d %v)", from, et.et, cur, limit, newest)
		run = func(s modelSide) modelOutcome {
			es, next, err := s.g.ListEdges(w.ctx, from, et.et, cur, limit, newest)
			return modelOutcome{[]any{es, next}, errKind(err)}
		}
		post = func(o modelOutcome) {
			if v, ok := o.Val.([]any); ok && o.Err == "" {
				w.cursors[key] = v[1].(string)
			}
		}
	case 13:
		et := w.edgeTypes[w.r.IntN(len(w.edgeTypes))]
		from := w.pick(et.from)
		what = fmt.Sprintf("CountEdges(%d %d)", from, et.et)
		run = func(s modelSide) modelOutcome {
			n, err := s.g.CountEdges(w.ctx, from, et.et)
			return modelOutcome{n, errKind(err)}
		}
	}
	return what, run, post
}

// poolOp draws the arguments of pool operation op (15–19) and returns the call to make on each
// side.
func (w *modelWorld) poolOp(op, step int) (what string, run func(s modelSide) modelOutcome) {
	switch op {
	case 15, 16:
		var es []zen.PoolEntry
		for range 1 + w.r.IntN(5) {
			es = append(es, zen.PoolEntry{User: w.pick(w.users), Source: zen.Source(1 + w.r.IntN(3)), Score: float64(w.r.IntN(8)) / 4, Pin: w.pick(w.pins), CreatedMs: int64(w.r.IntN(10))})
		}
		what = fmt.Sprintf("Insert(%d entries)", len(es))
		run = func(s modelSide) modelOutcome {
			n, err := s.p.Insert(w.ctx, es)
			return modelOutcome{n, errKind(err)}
		}
	case 17:
		u, src, k := w.pick(w.users), zen.Source(1+w.r.IntN(3)), 1+w.r.IntN(6)
		what = fmt.Sprintf("Top(%d %d %d)", u, src, k)
		run = func(s modelSide) modelOutcome {
			es, err := s.p.Top(w.ctx, u, src, k)
			return modelOutcome{es, errKind(err)}
		}
		if w.r.IntN(2) == 0 {
			// TopMany of every source reads what Top of each does.
			srcs := []zen.Source{1, 2, 3}
			what = fmt.Sprintf("TopMany(%d %v %d)", u, srcs, k)
			run = func(s modelSide) modelOutcome {
				lists, err := s.p.TopMany(w.ctx, u, srcs, k)
				if err != nil {
					return modelOutcome{nil, errKind(err)}
				}
				for i, src := range srcs {
					one, err := s.p.Top(w.ctx, u, src, k)
					if err != nil {
						w.t.Fatalf("seed %d step %d Top(%d %d %d) after %s: %v", w.seed, step, u, src, k, what, err)
					}
					if diff := cmp.Diff(one, lists[i]); diff != "" {
						w.t.Fatalf("seed %d step %d %s: source %d differs from Top (-Top +TopMany):\n%s", w.seed, step, what, src, diff)
					}
				}
				return modelOutcome{lists, ""}
			}
		}
	case 18:
		u := w.pick(w.users)
		es := []zen.PoolEntry{{Pin: w.pick(w.pins)}, {Pin: w.pick(w.pins)}}
		what = fmt.Sprintf("Take(%d)", u)
		run = func(s modelSide) modelOutcome {
			got, err := s.p.Take(w.ctx, u, es)
			return modelOutcome{got, errKind(err)}
		}
	case 19:
		u, src, sub := w.pick(w.users), zen.Source(1+w.r.IntN(3)), w.r.IntN(5)
		k, cut := w.r.IntN(3), int64(w.r.IntN(10))
		what = fmt.Sprintf("pool upkeep %d (%d %d)", sub, u, src)
		run = func(s modelSide) modelOutcome {
			var n int
			var err error
			switch sub {
			case 0:
				n, err = s.p.Trim(w.ctx, u, src, k)
			case 1:
				n, err = s.p.Expire(w.ctx, u, cut)
			case 2:
				n, err = s.p.RemoveWhere(w.ctx, u, src, func(e zen.PoolEntry) bool { return e.Score < 0.5 })
			case 3:
				n, err = s.p.Size(w.ctx, u, src)
			case 4:
				var m int
				n, m, err = s.p.Upkeep(w.ctx, u, k, cut)
				n = 100*n + m
			}
			return modelOutcome{n, errKind(err)}
		}
	}
	return what, run
}
