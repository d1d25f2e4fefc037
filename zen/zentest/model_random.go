package zentest

import (
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
