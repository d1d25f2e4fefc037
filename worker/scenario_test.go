package worker

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/smartfeed/smartfeed/zen"
)

var update = flag.Bool("update", false, "alias of datadriven's -rewrite")

// TestScenarios runs every testdata/scenarios/*.txt on each backend, in datadriven's format: each
// command is a directive with its arguments, followed by "----" and its expected output. The
// commands build a graph and publish events (processed by the worker's handlers through an
// inline queue) and print nothing; the last, dump, prints the exact pool contents expected.
// `go test -run TestScenarios -rewrite` (or -update) rewrites the expected output from the
// in-memory backend.
//
// Commands (names stand for IDs):
//
//	config key=value...             worker Config (first command only): chunk_size, hot_followers,
//	                                pool_cap, trim_every, ttl, inactive_after, backfill_limit
//	clock +DUR                      advance the clock (DUR: Go duration or Nd)
//	user NAME [active=-DUR]         a user, optionally last active DUR ago
//	board NAME OWNER                a board of OWNER
//	interest NAME
//	pin NAME AUTHOR BOARD [interests=A,B] [age=DUR]   a pin in the graph (no event)
//	edge-follow USER TARGET         a follow in the graph only (no event)
//	like USER PIN                   a like (edges + engagement)
//	save PIN                        event: the pin's author saved it (fanout)
//	repin USER PIN BOARD            event: USER saved PIN to BOARD (edges + engagement + fanout)
//	follow USER TARGET              event: follow (edge + backfill)
//	unfollow USER TARGET            event: unfollow (edge removed + cleanup)
//	delete-pin PIN                  event: pin deleted
//	delete-user USER                event: user deleted
//	related USER PIN...             event: recommender's related pins for USER
//	touch USER                      the feed service saw USER (may start a rebuild)
//	hold / run                      stop draining the queue after each event / drain it now
//	dump                            drain the queue (unless held), print the pools (last command)
func TestScenarios(t *testing.T) {
	if *update {
		if err := flag.Set("rewrite", "true"); err != nil {
			t.Fatal(err)
		}
	}
	rewrite := flag.Lookup("rewrite").Value.String() == "true"
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		for _, b := range backends {
			t.Run(b, func(t *testing.T) {
				if rewrite && b != "mem" {
					t.Skip("-rewrite writes from the mem backend")
				}
				sc := newScenario(t, openStore(t, b))
				datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
					if d.Cmd == "dump" {
						if err := sc.drain(); err != nil {
							d.Fatalf(t, "%v", err)
						}
						return sc.dump()
					}
					f := []string{d.Cmd}
					for _, a := range d.CmdArgs {
						f = append(f, a.String())
					}
					if err := sc.do(f); err != nil {
						d.Fatalf(t, "%v", err)
					}
					return ""
				})
			})
		}
	})
}

type scenario struct {
	t     *testing.T
	ctx   context.Context
	cfg   Config
	e     *env
	store zen.Store
	ids   map[string]zen.ID
	names map[zen.ID]string
	users []string
	pins  []string
	hold  bool
}

func parseDur(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		return time.Duration(n) * 24 * time.Hour, err
	}
	return time.ParseDuration(s)
}

func newScenario(t *testing.T, store zen.Store) *scenario {
	sc := &scenario{t: t, ctx: context.Background(), store: store, ids: map[string]zen.ID{}, names: map[zen.ID]string{}}
	sc.cfg = Config{TrimEvery: 1}
	return sc
}

func (sc *scenario) env() *env {
	if sc.e == nil {
		sc.e = newEnv(sc.t, sc.store, sc.cfg)
	}
	return sc.e
}

func (sc *scenario) id(name string) (zen.ID, error) {
	id, ok := sc.ids[name]
	if !ok {
		return 0, fmt.Errorf("unknown name %q", name)
	}
	return id, nil
}

func (sc *scenario) create(name string, tp zen.Type, near zen.ID, data map[string]any) (zen.ID, error) {
	if _, dup := sc.ids[name]; dup {
		return 0, fmt.Errorf("name %q defined twice", name)
	}
	o, err := sc.env().g.Create(sc.ctx, tp, near, data)
	if err != nil {
		return 0, err
	}
	sc.ids[name], sc.names[o.ID] = o.ID, name
	return o.ID, nil
}

func (sc *scenario) edge(from zen.ID, et zen.EdgeType, to zen.ID) error {
	e := zen.Edge{From: from, Type: et, To: to}
	if err := sc.e.g.AddEdge(sc.ctx, e); err != nil {
		return err
	}
	if _, ok := et.Inverse(); ok {
		h, err := sc.e.g.HasEdge(sc.ctx, from, et, to)
		if err != nil {
			return err
		}
		return sc.e.g.AddInverse(sc.ctx, h)
	}
	return nil
}

func (sc *scenario) unedge(from zen.ID, et zen.EdgeType, to zen.ID) error {
	if err := sc.e.g.RemoveEdge(sc.ctx, from, et, to); err != nil {
		return err
	}
	if _, ok := et.Inverse(); ok {
		return sc.e.g.RemoveInverse(sc.ctx, from, et, to)
	}
	return nil
}

func followType(target zen.ID) zen.EdgeType {
	switch target.Type() {
	case zen.TypeBoard:
		return zen.EdgeFollowsBoard
	case zen.TypeInterest:
		return zen.EdgeFollowsInterest
	}
	return zen.EdgeFollowsUser
}

func (sc *scenario) drain() error {
	if sc.e == nil || sc.hold {
		return nil
	}
	return sc.e.q.run(sc.ctx)
}

func kv(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			m[k] = v
		}
	}
	return m
}

func (sc *scenario) do(f []string) error {
	ctx := sc.ctx
	need := func(n int) error {
		if len(f) < n {
			return fmt.Errorf("%s needs %d arguments", f[0], n-1)
		}
		return nil
	}
	ids := func(names ...string) ([]zen.ID, error) {
		out := make([]zen.ID, len(names))
		for i, n := range names {
			id, err := sc.id(n)
			if err != nil {
				return nil, err
			}
			out[i] = id
		}
		return out, nil
	}
	switch f[0] {
	case "config":
		if sc.e != nil {
			return fmt.Errorf("config must come first")
		}
		for k, v := range kv(f[1:]) {
			var err error
			var n int
			var d time.Duration
			switch k {
			case "ttl", "inactive_after":
				d, err = parseDur(v)
			default:
				n, err = strconv.Atoi(v)
			}
			if err != nil {
				return err
			}
			switch k {
			case "chunk_size":
				sc.cfg.ChunkSize = n
			case "hot_followers":
				sc.cfg.HotFollowers = int64(n)
			case "pool_cap":
				sc.cfg.PoolCap = n
			case "trim_every":
				sc.cfg.TrimEvery = n
			case "backfill_limit":
				sc.cfg.BackfillLimit = n
			case "ttl":
				sc.cfg.TTL = d
			case "inactive_after":
				sc.cfg.InactiveAfter = d
			default:
				return fmt.Errorf("unknown config %q", k)
			}
		}
		return nil
	case "clock":
		if err := need(2); err != nil {
			return err
		}
		d, err := parseDur(strings.TrimPrefix(f[1], "+"))
		if err != nil {
			return err
		}
		sc.env().clk.add(d)
		return nil
	case "user":
		if err := need(2); err != nil {
			return err
		}
		id, err := sc.create(f[1], zen.TypeUser, 0, map[string]any{"name": f[1]})
		if err != nil {
			return err
		}
		sc.users = append(sc.users, f[1])
		if a, ok := kv(f[2:])["active"]; ok {
			d, err := parseDur(strings.TrimPrefix(a, "-"))
			if err != nil {
				return err
			}
			return sc.e.w.SetLastActive(ctx, id, sc.e.clk.now().Add(-d).UnixMilli())
		}
		return nil
	case "board":
		if err := need(3); err != nil {
			return err
		}
		owner, err := sc.id(f[2])
		if err != nil {
			return err
		}
		b, err := sc.create(f[1], zen.TypeBoard, owner, map[string]any{"name": f[1], "owner": owner.String()})
		if err != nil {
			return err
		}
		return sc.e.g.AddEdge(ctx, zen.Edge{From: owner, Type: zen.EdgeUserBoards, To: b})
	case "interest":
		if err := need(2); err != nil {
			return err
		}
		_, err := sc.create(f[1], zen.TypeInterest, 0, map[string]any{"name": f[1]})
		return err
	case "pin":
		if err := need(4); err != nil {
			return err
		}
		ab, err := ids(f[2], f[3])
		if err != nil {
			return err
		}
		opt := kv(f[4:])
		created := sc.env().clk.now()
		if a, ok := opt["age"]; ok {
			d, err := parseDur(a)
			if err != nil {
				return err
			}
			created = created.Add(-d)
		}
		p, err := sc.create(f[1], zen.TypePin, ab[1], map[string]any{"author": ab[0].String(), "board": ab[1].String(), "created_ms": created.UnixMilli()})
		if err != nil {
			return err
		}
		sc.pins = append(sc.pins, f[1])
		s := zen.Edge{Seq: seqOf(created)}
		for _, e := range []zen.Edge{{From: ab[0], Type: zen.EdgeUserPins, To: p}, {From: ab[1], Type: zen.EdgeBoardPins, To: p}} {
			e.Seq = s.Seq
			if err := sc.e.g.AddEdge(ctx, e); err != nil {
				return err
			}
			if _, ok := e.Type.Inverse(); ok {
				if err := sc.e.g.AddInverse(ctx, e); err != nil {
					return err
				}
			}
		}
		if in, ok := opt["interests"]; ok {
			for _, n := range strings.Split(in, ",") {
				i, err := sc.id(n)
				if err != nil {
					return err
				}
				if err := sc.edge(p, zen.EdgePinInterests, i); err != nil {
					return err
				}
			}
		}
		return nil
	case "edge-follow", "follow":
		if err := need(3); err != nil {
			return err
		}
		ut, err := ids(f[1], f[2])
		if err != nil {
			return err
		}
		if err := sc.edge(ut[0], followType(ut[1]), ut[1]); err != nil {
			return err
		}
		if f[0] == "edge-follow" {
			return nil
		}
		if _, err := sc.e.pub.Followed(ctx, ut[0], ut[1]); err != nil {
			return err
		}
		return sc.drain()
	case "unfollow":
		if err := need(3); err != nil {
			return err
		}
		ut, err := ids(f[1], f[2])
		if err != nil {
			return err
		}
		if err := sc.unedge(ut[0], followType(ut[1]), ut[1]); err != nil {
			return err
		}
		if _, err := sc.e.pub.Unfollowed(ctx, ut[0], ut[1]); err != nil {
			return err
		}
		return sc.drain()
	case "like":
		if err := need(3); err != nil {
			return err
		}
		up, err := ids(f[1], f[2])
		if err != nil {
			return err
		}
		if err := sc.edge(up[0], zen.EdgeUserLikes, up[1]); err != nil {
			return err
		}
		o, err := sc.e.g.Get(ctx, up[1])
		if err != nil {
			return err
		}
		a, _ := zen.DataID(o.Data, "author")
		return sc.e.w.RecordEngagement(ctx, up[0], up[1], a)
	case "save":
		if err := need(2); err != nil {
			return err
		}
		p, err := sc.id(f[1])
		if err != nil {
			return err
		}
		o, err := sc.e.g.Get(ctx, p)
		if err != nil {
			return err
		}
		pi := pinFromObject(o, 0)
		ins, _, err := sc.e.g.ListEdges(ctx, p, zen.EdgePinInterests, "", 64, false)
		if err != nil {
			return err
		}
		ev := PinSaved{Pin: p, User: pi.author, Board: pi.board, CreatedMs: pi.createdMs}
		for _, e := range ins {
			ev.Interests = append(ev.Interests, e.To)
		}
		if _, err := sc.e.pub.PinSaved(ctx, ev); err != nil {
			return err
		}
		return sc.drain()
	case "repin":
		if err := need(4); err != nil {
			return err
		}
		upb, err := ids(f[1], f[2], f[3])
		if err != nil {
			return err
		}
		u, p, b := upb[0], upb[1], upb[2]
		if err := sc.edge(b, zen.EdgeBoardPins, p); err != nil {
			return err
		}
		if err := sc.e.g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserPins, To: p}); err != nil {
			return err
		}
		o, err := sc.e.g.Get(ctx, p)
		if err != nil {
			return err
		}
		a, _ := zen.DataID(o.Data, "author")
		if err := sc.e.w.RecordEngagement(ctx, u, p, a); err != nil {
			return err
		}
		ins, _, err := sc.e.g.ListEdges(ctx, p, zen.EdgePinInterests, "", 64, false)
		if err != nil {
			return err
		}
		ev := PinSaved{Pin: p, User: u, Board: b, CreatedMs: sc.e.clk.now().UnixMilli(), Repin: true}
		for _, e := range ins {
			ev.Interests = append(ev.Interests, e.To)
		}
		if _, err := sc.e.pub.PinSaved(ctx, ev); err != nil {
			return err
		}
		return sc.drain()
	case "delete-pin":
		if err := need(2); err != nil {
			return err
		}
		p, err := sc.id(f[1])
		if err != nil {
			return err
		}
		o, err := sc.e.g.Get(ctx, p)
		if err != nil {
			return err
		}
		a, _ := zen.DataID(o.Data, "author")
		if _, err := sc.e.pub.PinDeleted(ctx, p, a); err != nil {
			return err
		}
		return sc.drain()
	case "delete-user":
		if err := need(2); err != nil {
			return err
		}
		u, err := sc.id(f[1])
		if err != nil {
			return err
		}
		if _, err := sc.e.pub.UserDeleted(ctx, u); err != nil {
			return err
		}
		return sc.drain()
	case "related":
		if err := need(3); err != nil {
			return err
		}
		all, err := ids(f[1:]...)
		if err != nil {
			return err
		}
		var rps []RelatedPin
		for _, p := range all[1:] {
			o, err := sc.e.g.Get(ctx, p)
			if err != nil {
				return err
			}
			pi := pinFromObject(o, 0)
			rps = append(rps, RelatedPin{Pin: p, Author: pi.author, Board: pi.board, CreatedMs: pi.createdMs})
		}
		if _, err := sc.e.pub.RelatedPins(ctx, all[0], rps); err != nil {
			return err
		}
		return sc.drain()
	case "touch":
		if err := need(2); err != nil {
			return err
		}
		u, err := sc.id(f[1])
		if err != nil {
			return err
		}
		if _, err := sc.e.w.Touch(ctx, u); err != nil {
			return err
		}
		return nil // the rebuild runs at the next drain, so "rebuilding" can be observed
	case "hold":
		sc.hold = true
		return nil
	case "run":
		sc.hold = false
		return sc.drain()
	}
	return fmt.Errorf("unknown command %q", f[0])
}

// dump prints every user's pools (best first), the users being rebuilt, the deleted pins and the
// tasks enqueued.
func (sc *scenario) dump() string {
	var b strings.Builder
	users := append([]string(nil), sc.users...)
	sort.Strings(users)
	for _, u := range users {
		id := sc.ids[u]
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
			es, err := sc.e.w.Pools().Top(sc.ctx, id, src, 1000)
			if err != nil {
				sc.t.Fatal(err)
			}
			for _, e := range es {
				fmt.Fprintf(&b, "%s %s %s %.6f %q\n", u, src.String(), sc.name(e.Pin), e.Score, e.Reason)
			}
		}
		if sc.e.w.Rebuilding(sc.ctx, id) {
			fmt.Fprintf(&b, "rebuilding %s\n", u)
		}
	}
	var pins []zen.ID
	for _, p := range sc.pins {
		pins = append(pins, sc.ids[p])
	}
	del, err := deletedPins(sc.ctx, sc.e.g, pins)
	if err != nil {
		sc.t.Fatal(err)
	}
	for _, p := range sc.pins {
		if del[sc.ids[p]] {
			fmt.Fprintf(&b, "deleted %s\n", p)
		}
	}
	var types []string
	for k := range sc.e.q.counts {
		types = append(types, k)
	}
	sort.Strings(types)
	for _, k := range types {
		fmt.Fprintf(&b, "enqueued %s %d\n", k, sc.e.q.counts[k])
	}
	return b.String()
}

func (sc *scenario) name(id zen.ID) string {
	if n, ok := sc.names[id]; ok {
		return n
	}
	return id.String()
}

// deletedPins returns which of pins are deleted (absent or soft-deleted objects), with one
// batched object read (Graph.GetMany): the scenario's view of what a reader filters out.
func deletedPins(ctx context.Context, g *zen.Graph, pins []zen.ID) (map[zen.ID]bool, error) {
	live, err := g.GetMany(ctx, pins)
	if err != nil {
		return nil, fmt.Errorf("deleted pins: %w", err)
	}
	out := make(map[zen.ID]bool)
	for _, p := range pins {
		if _, ok := live[p]; !ok {
			out[p] = true
		}
	}
	return out, nil
}
