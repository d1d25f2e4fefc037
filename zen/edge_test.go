package zen_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func sq(n uint64) seq.Seq { return seq.Seq{Lo: n} }

type pos struct {
	Seq uint64
	To  uint64
}

func positions(es []zen.Edge) []pos {
	out := make([]pos, len(es))
	for i, e := range es {
		out[i] = pos{e.Seq.Lo, e.To.Local()}
	}
	return out
}

func count(t *testing.T, g *zen.Graph, from zen.ID, et zen.EdgeType) int64 {
	t.Helper()
	n, err := g.CountEdges(context.Background(), from, et)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listAll pages through a list with the given page size.
func listAll(t *testing.T, g *zen.Graph, from zen.ID, et zen.EdgeType, page int, newest bool) []zen.Edge {
	t.Helper()
	var all []zen.Edge
	cur := ""
	for range 10000 {
		es, next, err := g.ListEdges(context.Background(), from, et, cur, page, newest)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, es...)
		if next == "" {
			return all
		}
		cur = next
	}
	t.Fatal("paging never ended")
	return nil
}

// TestEdgeS2Idempotent: Add x3 => one row, count 1; a re-add with another seq or data keeps the
// first.
func TestEdgeS2Idempotent(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u, v := mustID(t, 1, zen.TypeUser, 1), mustID(t, 2, zen.TypeUser, 2)
	for i := range 3 {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(5 + uint64(i)), Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	es := listAll(t, g, u, zen.EdgeFollowsUser, 10, true)
	want := []zen.Edge{{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(5), Data: []byte{0}}}
	if diff := cmp.Diff(want, es); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if n := count(t, g, u, zen.EdgeFollowsUser); n != 1 {
		t.Errorf("count = %d, want 1", n)
	}
	e, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v)
	if err != nil || e.Seq != sq(5) {
		t.Errorf("HasEdge = %+v, %v", e, err)
	}
}

// TestEdgeS3Remove: Add, Remove => list excludes it, count 0, HasEdge not found; remove again is
// fine; re-add counts again.
func TestEdgeS3Remove(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u, v := mustID(t, 1, zen.TypeUser, 1), mustID(t, 2, zen.TypeUser, 2)
	e := zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(1)}
	if err := g.AddEdge(ctx, e); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v); err != nil {
			t.Fatal(err)
		}
	}
	if es := listAll(t, g, u, zen.EdgeFollowsUser, 10, false); len(es) != 0 {
		t.Errorf("list after remove: %v", es)
	}
	if n := count(t, g, u, zen.EdgeFollowsUser); n != 0 {
		t.Errorf("count after remove = %d", n)
	}
	if _, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("HasEdge after remove: %v", err)
	}
	e.Seq = sq(2)
	if err := g.AddEdge(ctx, e); err != nil {
		t.Fatal(err)
	}
	if n := count(t, g, u, zen.EdgeFollowsUser); n != 1 {
		t.Errorf("count after re-add = %d", n)
	}
	if got, _ := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v); got.Seq != sq(2) {
		t.Errorf("re-added seq = %v, want the new 2", got.Seq)
	}
}

// TestEdgeS5CursorStability: rows 50..10; page 1 = [50 40]; insert 45; page 2 = [30 20].
func TestEdgeS5CursorStability(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	b := mustID(t, 1, zen.TypeBoard, 1)
	for i, s := range []uint64{50, 40, 30, 20, 10} {
		if err := g.AddEdge(ctx, zen.Edge{From: b, Type: zen.EdgeBoardPins, To: mustID(t, 1, zen.TypePin, uint64(i+1)), Seq: sq(s)}); err != nil {
			t.Fatal(err)
		}
	}
	p1, next, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, "", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pos{{50, 1}, {40, 2}}, positions(p1)); diff != "" {
		t.Errorf("page 1 (-want +got):\n%s", diff)
	}
	if err := g.AddEdge(ctx, zen.Edge{From: b, Type: zen.EdgeBoardPins, To: mustID(t, 1, zen.TypePin, 9), Seq: sq(45)}); err != nil {
		t.Fatal(err)
	}
	p2, next, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, next, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pos{{30, 3}, {20, 4}}, positions(p2)); diff != "" {
		t.Errorf("page 2 (-want +got):\n%s", diff)
	}
	p3, next, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, next, 2, true)
	if err != nil || next != "" {
		t.Fatalf("page 3: next %q, %v", next, err)
	}
	if diff := cmp.Diff([]pos{{10, 5}}, positions(p3)); diff != "" {
		t.Errorf("page 3 (-want +got):\n%s", diff)
	}
	// Ascending over everything, in pages of 4.
	if diff := cmp.Diff([]pos{{10, 5}, {20, 4}, {30, 3}, {40, 2}, {45, 9}, {50, 1}}, positions(listAll(t, g, b, zen.EdgeBoardPins, 4, false))); diff != "" {
		t.Errorf("ascending (-want +got):\n%s", diff)
	}
}

// TestEdgeS6DuplicateSeq: (30,7) and (30,9) => DESC 9 then 7; cursor (30,9) resumes at (30,7).
func TestEdgeS6DuplicateSeq(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	for _, to := range []uint64{7, 9} {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserLikes, To: mustID(t, 1, zen.TypePin, to), Seq: sq(30)}); err != nil {
			t.Fatal(err)
		}
	}
	p1, next, err := g.ListEdges(ctx, u, zen.EdgeUserLikes, "", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	p2, next2, err := g.ListEdges(ctx, u, zen.EdgeUserLikes, next, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pos{{30, 9}, {30, 7}}, positions(append(p1, p2...))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if next2 != "" {
		t.Errorf("next after the last row = %q, want end", next2)
	}
	if next != zen.EncodeCursorForTest(u, zen.EdgeUserLikes, true, sq(30), mustID(t, 1, zen.TypePin, 9)) {
		t.Error("cursor after page 1 is not (30, 9)")
	}
}

func TestListEdgesBadCursor(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u, u2 := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeUser, 2)
	for i := range 3 {
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: mustID(t, 2, zen.TypeUser, uint64(i+1)), Seq: sq(uint64(i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	_, next, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 1, true)
	if err != nil || next == "" {
		t.Fatalf("page 1: %q %v", next, err)
	}
	tampered := []byte(next)
	tampered[5] ^= 1
	for name, tc := range map[string]struct {
		from   zen.ID
		et     zen.EdgeType
		cur    string
		newest bool
	}{
		"other list":      {u2, zen.EdgeFollowsUser, next, true},
		"other type":      {u, zen.EdgeFollowedByUser, next, true},
		"other direction": {u, zen.EdgeFollowsUser, next, false},
		"tampered":        {u, zen.EdgeFollowsUser, string(tampered), true},
		"garbage":         {u, zen.EdgeFollowsUser, "!!!", true},
		"an offset":       {u, zen.EdgeFollowsUser, "10", true},
		"truncated":       {u, zen.EdgeFollowsUser, next[:len(next)-2], true},
	} {
		if _, _, err := g.ListEdges(ctx, tc.from, tc.et, tc.cur, 1, tc.newest); !errors.Is(err, zen.ErrBadCursor) {
			t.Errorf("%s: err = %v, want ErrBadCursor", name, err)
		}
	}
	for _, limit := range []int{0, -1, zen.MaxEdgePage + 1} {
		if _, _, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", limit, true); err == nil {
			t.Errorf("limit %d: no error", limit)
		}
	}
}

func TestEdgeRejects(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u, p, b := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypePin, 1), mustID(t, 1, zen.TypeBoard, 1)
	for name, e := range map[string]zen.Edge{
		"unknown type":   {From: u, Type: 99, To: p},
		"wrong from":     {From: p, Type: zen.EdgeFollowsUser, To: u},
		"wrong to":       {From: u, Type: zen.EdgeFollowsBoard, To: p},
		"zero to":        {From: b, Type: zen.EdgeBoardPins, To: 0},
		"reserved bits":  {From: u | 1<<63, Type: zen.EdgeFollowsUser, To: u},
		"seq over max":   {From: u, Type: zen.EdgeFollowsUser, To: u, Seq: seq.Max.Add(sq(1))},
		"data too large": {From: u, Type: zen.EdgeFollowsUser, To: u, Data: make([]byte, zen.MaxEdgeData+1)},
	} {
		if err := g.AddEdge(ctx, e); err == nil {
			t.Errorf("%s: AddEdge accepted", name)
		}
	}
	if err := g.AddInverse(ctx, zen.Edge{From: u, Type: zen.EdgeUserPins, To: p}); err == nil {
		t.Error("AddInverse of a type without inverse: no error")
	}
	if _, err := g.CountEdges(ctx, p, zen.EdgeFollowsUser); err == nil {
		t.Error("CountEdges with a wrong from type: no error")
	}
}

func TestInverse(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	pairs := map[zen.EdgeType]zen.EdgeType{
		zen.EdgeBoardPins: zen.EdgePinBoards, zen.EdgeFollowsUser: zen.EdgeFollowedByUser,
		zen.EdgeFollowsBoard: zen.EdgeBoardFollowers, zen.EdgeFollowsInterest: zen.EdgeInterestFollowers,
		zen.EdgePinInterests: zen.EdgeInterestPins, zen.EdgeUserLikes: zen.EdgePinLikers,
	}
	for a, b := range pairs {
		if inv, ok := a.Inverse(); !ok || inv != b {
			t.Errorf("%d.Inverse() = %d %v, want %d", a, inv, ok, b)
		}
		if inv, ok := b.Inverse(); !ok || inv != a {
			t.Errorf("%d.Inverse() = %d %v, want %d", b, inv, ok, a)
		}
	}
	for _, none := range []zen.EdgeType{zen.EdgeUserPins, zen.EdgeUserBoards, 0, 99} {
		if _, ok := none.Inverse(); ok {
			t.Errorf("%d has an inverse", none)
		}
	}
	u, board := mustID(t, 1, zen.TypeUser, 1), mustID(t, 2, zen.TypeBoard, 1)
	e := zen.Edge{From: u, Type: zen.EdgeFollowsBoard, To: board, Seq: sq(77), Data: []byte("x")}
	if err := g.AddEdge(ctx, e); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := g.AddInverse(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := g.HasEdge(ctx, board, zen.EdgeBoardFollowers, u)
	want := zen.Edge{From: board, Type: zen.EdgeBoardFollowers, To: u, Seq: sq(77), Data: []byte("x")}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("inverse (-want +got):\n%s", diff)
	}
	if n := count(t, g, board, zen.EdgeBoardFollowers); n != 1 {
		t.Errorf("inverse count = %d", n)
	}
	if err := g.RemoveInverse(ctx, u, zen.EdgeFollowsBoard, board); err != nil {
		t.Fatal(err)
	}
	if _, err := g.HasEdge(ctx, board, zen.EdgeBoardFollowers, u); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("after RemoveInverse: %v", err)
	}
}

func TestEdgeZeroSeqIsNow(t *testing.T) {
	ctx := context.Background()
	g, c := memGraph(t)
	u, v := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeUser, 2)
	if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v}); err != nil {
		t.Fatal(err)
	}
	e, _ := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v)
	if want := seq.FromMillis(c.Now().UnixMilli()); e.Seq != want {
		t.Errorf("seq = %s, want %s", e.Seq, want)
	}
}

// TestEdgeCrashRetry fails each write of AddEdge and RemoveEdge in turn (before and after it
// lands), retries, and checks that the list, HasEdge and the count agree and count once, and
// what Members says of the half-done calls.
func TestEdgeCrashRetry(t *testing.T) {
	ctx := context.Background()
	u, v := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeUser, 2)
	e := zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(9)}
	for _, after := range []bool{false, true} {
		for k := 1; k <= 4; k++ {
			fs := &faultStore{Store: zenmem.New()}
			g := newGraph(t, fs, newClock())
			fs.arm(k, after)
			if err := g.AddEdge(ctx, e); err != nil && !errors.Is(err, errInjected) {
				t.Fatal(err)
			}
			fs.arm(0, false)
			// Members counts an add from its first write landing (the point row, pending).
			var want []zen.ID
			if k > 1 || after {
				want = []zen.ID{v}
			}
			if diff := cmp.Diff(want, members(t, g, u, zen.EdgeFollowsUser), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("half-done add, fault at write %d after=%v: members (-want +got):\n%s", k, after, diff)
			}
			if err := g.AddEdge(ctx, e); err != nil {
				t.Fatalf("add retry (fault at write %d, after=%v): %v", k, after, err)
			}
			if diff := cmp.Diff([]zen.ID{v}, members(t, g, u, zen.EdgeFollowsUser)); diff != "" {
				t.Errorf("retried add, fault at write %d after=%v: members (-want +got):\n%s", k, after, diff)
			}
			// The one window a retry cannot close: the increment itself fails before landing
			// (write 4). RecountEdges repairs it.
			wantN := int64(1)
			if k == 4 && !after {
				wantN = 0
			}
			if n, l := count(t, g, u, zen.EdgeFollowsUser), len(listAll(t, g, u, zen.EdgeFollowsUser, 5, true)); n != wantN || l != 1 {
				t.Errorf("add, fault at write %d after=%v: count %d, list %d; want %d, 1", k, after, n, l, wantN)
			}
			if n, err := g.RecountEdges(ctx, u, zen.EdgeFollowsUser); err != nil || n != 1 || count(t, g, u, zen.EdgeFollowsUser) != 1 {
				t.Errorf("add, fault at write %d after=%v: recount %d %v, count %d; want 1", k, after, n, err, count(t, g, u, zen.EdgeFollowsUser))
			}
			fs.arm(k, after)
			if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v); err != nil && !errors.Is(err, errInjected) {
				t.Fatal(err)
			}
			fs.arm(0, false)
			// Before any retry, a removal that got past its first write is invisible to readers,
			// Members included: a fanout never delivers to a follower whose unfollow has begun.
			if k > 1 || after {
				_, herr := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v)
				if l := len(listAll(t, g, u, zen.EdgeFollowsUser, 5, true)); l != 0 || !errors.Is(herr, zen.ErrNotFound) {
					t.Errorf("half-done remove, fault at write %d after=%v: list %d, has %v; want 0, not found", k, after, l, herr)
				}
				if m := members(t, g, u, zen.EdgeFollowsUser); len(m) != 0 {
					t.Errorf("half-done remove, fault at write %d after=%v: members %v", k, after, m)
				}
			} else if diff := cmp.Diff([]zen.ID{v}, members(t, g, u, zen.EdgeFollowsUser)); diff != "" {
				t.Errorf("remove failed before its first write: members (-want +got):\n%s", diff)
			}
			if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v); err != nil {
				t.Fatal(err)
			}
			n, l := count(t, g, u, zen.EdgeFollowsUser), len(listAll(t, g, u, zen.EdgeFollowsUser, 5, true))
			_, herr := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v)
			if m := members(t, g, u, zen.EdgeFollowsUser); len(m) != 0 {
				t.Errorf("retried remove, fault at write %d after=%v: members %v", k, after, m)
			}
			// Likewise the decrement failing before it lands (write 2 of a remove) leaves the
			// count one high until RecountEdges.
			wantN = 0
			if k == 2 && !after {
				wantN = 1
			}
			if n != wantN || l != 0 || !errors.Is(herr, zen.ErrNotFound) {
				t.Errorf("remove, fault at write %d after=%v: count %d list %d has %v; want %d 0 not-found", k, after, n, l, herr, wantN)
			}
			if n, err := g.RecountEdges(ctx, u, zen.EdgeFollowsUser); err != nil || n != 0 || count(t, g, u, zen.EdgeFollowsUser) != 0 {
				t.Errorf("remove, fault at write %d after=%v: recount %d %v; want 0", k, after, n, err)
			}
		}
	}
}

// TestEdgeConcurrentAddRemove: racing adders and removers of one edge end consistent: HasEdge,
// the list and the count agree.
func TestEdgeConcurrentAddRemove(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u := mustID(t, 1, zen.TypeUser, 1)
	for round := range 20 {
		v := mustID(t, 2, zen.TypeUser, uint64(round+1))
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				for range 20 {
					var err error
					if w%2 == 0 {
						err = g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(uint64(w + 1))})
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
		_ = g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(1)}) // settle
	}
	es := listAll(t, g, u, zen.EdgeFollowsUser, 7, false)
	if n := count(t, g, u, zen.EdgeFollowsUser); n != 20 || len(es) != 20 {
		t.Errorf("count %d, list %d; want 20, 20", n, len(es))
	}
	for _, e := range es {
		h, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, e.To)
		if err != nil || h.Seq != e.Seq {
			t.Errorf("list row %v disagrees with HasEdge %v %v", e, h, err)
		}
	}
}

// TestListEdgesSkipsStaleRows: an edge row whose point row names another seq is skipped and
// deleted; one without a point row is skipped (it may belong to an add in flight).
func TestListEdgesSkipsStaleRows(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	g := newGraph(t, s, newClock())
	u := mustID(t, 1, zen.TypeUser, 1)
	v, w := mustID(t, 1, zen.TypePin, 2), mustID(t, 1, zen.TypePin, 3)
	if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserLikes, To: v, Seq: sq(5)}); err != nil {
		t.Fatal(err)
	}
	edgeRow := func(s uint64, to zen.ID) []byte {
		k := binary.BigEndian.AppendUint64(nil, uint64(u))
		k = binary.BigEndian.AppendUint16(k, uint16(zen.EdgeUserLikes))
		k = append(k, 1)
		k = binary.BigEndian.AppendUint64(k, 0)
		k = binary.BigEndian.AppendUint64(k, s)
		return binary.BigEndian.AppendUint64(k, uint64(to))
	}
	tb, _ := s.Table(ctx, zen.TableEdges)
	if err := tb.Apply(ctx, []zen.Mutation{{Key: edgeRow(3, v), Value: []byte{}}, {Key: edgeRow(4, w), Value: []byte{}}}); err != nil {
		t.Fatal(err)
	}
	for _, newest := range []bool{true, false} {
		if diff := cmp.Diff([]pos{{5, 2}}, positions(listAll(t, g, u, zen.EdgeUserLikes, 1, newest))); diff != "" {
			t.Errorf("newest=%v (-want +got):\n%s", newest, diff)
		}
	}
	if _, err := tb.Get(ctx, edgeRow(3, v)); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("row with a superseded seq kept: %v", err)
	}
	if _, err := tb.Get(ctx, edgeRow(4, w)); err != nil {
		t.Errorf("row without a point row deleted: %v", err)
	}
}

// gateStore wraps a store and holds the first write to an edge row (tag 1, a 35-byte key) that
// deletes it, once armed, until released: a call that is late with its delete.
type gateStore struct {
	zen.Store
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

func newGateStore(s zen.Store) *gateStore {
	return &gateStore{Store: s, reached: make(chan struct{}), release: make(chan struct{})}
}

func (s *gateStore) arm() { s.mu.Lock(); s.armed = true; s.mu.Unlock() }

// hold blocks the calling write if it deletes an edge row and the gate is armed (then disarms).
func (s *gateStore) hold(key []byte, del bool) {
	if !del || len(key) != 35 || key[10] != 1 {
		return
	}
	s.mu.Lock()
	armed := s.armed
	s.armed = false
	s.mu.Unlock()
	if armed {
		close(s.reached)
		<-s.release
	}
}

func (s *gateStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &gateTable{Table: t, s: s}, nil
}

type gateTable struct {
	zen.Table
	s *gateStore
}

func (t *gateTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	for _, m := range muts {
		t.s.hold(m.Key, m.Delete)
	}
	return t.Table.Apply(ctx, muts)
}

func (t *gateTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	t.s.hold(key, value == nil)
	return t.Table.CheckAndSet(ctx, key, expected, value)
}

// TestEdgeLateDeleteKeepsReAdd: a delete of an edge row that lands late (a remover held between
// its two last writes while an add finished its removal and put the edge back at the same seq;
// a reader's cleanup of a row it read as stale while the edge came back at that seq) must not
// take the row of the edge now there: the list, HasEdge and the count agree.
func TestEdgeLateDeleteKeepsReAdd(t *testing.T) {
	ctx := context.Background()
	u := mustID(t, 1, zen.TypeUser, 1)
	v := mustID(t, 2, zen.TypeUser, 7)
	add := func(g *zen.Graph, s uint64) {
		t.Helper()
		if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(s)}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, g *zen.Graph, wantSeq uint64) {
		t.Helper()
		h, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v)
		if err != nil {
			t.Fatalf("%s: HasEdge: %v", name, err)
		}
		if diff := cmp.Diff([]pos{{wantSeq, 7}}, positions(listAll(t, g, u, zen.EdgeFollowsUser, 5, true))); diff != "" || h.Seq != sq(wantSeq) {
			t.Errorf("%s: HasEdge seq %s, list (-want +got):\n%s", name, h.Seq, diff)
		}
		if n := count(t, g, u, zen.EdgeFollowsUser); n != 1 {
			t.Errorf("%s: count %d, want 1", name, n)
		}
	}

	t.Run("late remover", func(t *testing.T) {
		gs := newGateStore(zenmem.New())
		g := newGraph(t, gs, newClock())
		add(g, 3)
		gs.arm()
		done := make(chan error, 1)
		go func() { done <- g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v) }()
		<-gs.reached // the remover set removing and is about to delete the edge row
		add(g, 3)    // finishes the removal itself, then adds afresh at the same seq
		close(gs.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		check("late remover", g, 3)
	})

	t.Run("late stale cleanup", func(t *testing.T) {
		gs := newGateStore(zenmem.New())
		g := newGraph(t, gs, newClock())
		add(g, 3)
		// A leftover row at seq 5 (an add that lost a race), with the value an add writes.
		tb, err := gs.Store.Table(ctx, zen.TableEdges)
		if err != nil {
			t.Fatal(err)
		}
		k := binary.BigEndian.AppendUint64(nil, uint64(u))
		k = binary.BigEndian.AppendUint16(k, uint16(zen.EdgeFollowsUser))
		k = append(k, 1)
		k = binary.BigEndian.AppendUint64(k, 0)
		k = binary.BigEndian.AppendUint64(k, 5)
		k = binary.BigEndian.AppendUint64(k, uint64(v))
		if err := tb.Apply(ctx, []zen.Mutation{{Key: k, Value: []byte{}}}); err != nil {
			t.Fatal(err)
		}
		gs.arm()
		done := make(chan error, 1)
		go func() {
			_, _, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 5, true)
			done <- err
		}()
		<-gs.reached // the reader saw the row at 5 as stale (the point says 3)
		if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v); err != nil {
			t.Fatal(err)
		}
		add(g, 5) // the edge comes back at seq 5, writing the same bytes the reader read
		close(gs.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		check("late stale cleanup", g, 5)
	})
}

// TestStoreErrors: every call reports a failing store as a wrapped error, never a panic.
func TestStoreErrors(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	g := newGraph(t, s, newClock())
	pt, _ := s.Table(ctx, "pools")
	p := zen.NewPools(pt, newClock().Now)
	u, v := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeUser, 2)
	pin := mustID(t, 1, zen.TypePin, 1)
	if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v}); err != nil {
		t.Fatal(err)
	}
	o, err := g.Create(ctx, zen.TypeUser, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Insert(ctx, []zen.PoolEntry{{User: u, Pin: pin, Source: 1, Score: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard, "pools"} {
		tb, _ := s.Table(ctx, name)
		tb.(*zenmem.Table).Fail = errInjected
	}
	calls := map[string]func() error{
		"Create":       func() error { _, err := g.Create(ctx, zen.TypePin, 0, nil); return err },
		"Get":          func() error { _, err := g.Get(ctx, o.ID); return err },
		"GetMany":      func() error { _, err := g.GetMany(ctx, []zen.ID{o.ID, u}); return err },
		"Update":       func() error { _, err := g.Update(ctx, o.ID, func(map[string]any) error { return nil }); return err },
		"Delete":       func() error { return g.Delete(ctx, o.ID) },
		"MapKey":       func() error { _, err := g.MapKey(ctx, "k", "v", u); return err },
		"LookupKey":    func() error { _, err := g.LookupKey(ctx, "k", "v"); return err },
		"UnmapKey":     func() error { _, err := g.UnmapKey(ctx, "k", "v", u); return err },
		"AddEdge":      func() error { return g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: v}) },
		"RemoveEdge":   func() error { return g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, v) },
		"HasEdge":      func() error { _, err := g.HasEdge(ctx, u, zen.EdgeFollowsUser, v); return err },
		"ListEdges":    func() error { _, _, err := g.ListEdges(ctx, u, zen.EdgeFollowsUser, "", 10, true); return err },
		"CountEdges":   func() error { _, err := g.CountEdges(ctx, u, zen.EdgeFollowsUser); return err },
		"RecountEdges": func() error { _, err := g.RecountEdges(ctx, u, zen.EdgeFollowsUser); return err },
		"Insert": func() error {
			_, err := p.Insert(ctx, []zen.PoolEntry{{User: u, Pin: pin, Source: 1, Score: 2}})
			return err
		},
		"Top":         func() error { _, err := p.Top(ctx, u, 1, 10); return err },
		"Take":        func() error { _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin}}); return err },
		"Remove":      func() error { _, err := p.Remove(ctx, u, []zen.ID{pin}); return err },
		"RemoveWhere": func() error { _, err := p.RemoveWhere(ctx, u, 1, func(zen.PoolEntry) bool { return true }); return err },
		"Size":        func() error { _, err := p.Size(ctx, u, 1); return err },
		"Trim":        func() error { _, err := p.Trim(ctx, u, 1, 0); return err },
		"Expire":      func() error { _, err := p.Expire(ctx, u, 1<<62); return err },
		"DeleteUser":  func() error { return p.DeleteUser(ctx, u) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, errInjected) {
			t.Errorf("%s: err = %v, want the store's error", name, err)
		}
	}
}

// TestHasEdgesMatchesHasEdge: HasEdges answers, key by key, what HasEdge does (present, never
// added, removed, an interest follow), and a key naming no valid edge fails the whole call.
func TestHasEdgesMatchesHasEdge(t *testing.T) {
	ctx := context.Background()
	g, _ := memGraph(t)
	u, v, w := mustID(t, 1, zen.TypeUser, 1), mustID(t, 2, zen.TypeUser, 2), mustID(t, 3, zen.TypeUser, 3)
	in := mustID(t, 4, zen.TypeInterest, 4)
	for _, e := range []zen.Edge{
		{From: u, Type: zen.EdgeFollowsUser, To: v, Seq: sq(1)},
		{From: u, Type: zen.EdgeFollowsUser, To: w, Seq: sq(2)},
		{From: v, Type: zen.EdgeFollowsInterest, To: in, Seq: sq(3)},
	} {
		if err := g.AddEdge(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RemoveEdge(ctx, u, zen.EdgeFollowsUser, w); err != nil {
		t.Fatal(err)
	}
	keys := []zen.EdgeKey{
		{From: u, Type: zen.EdgeFollowsUser, To: v},
		{From: u, Type: zen.EdgeFollowsUser, To: w},
		{From: v, Type: zen.EdgeFollowsUser, To: u},
		{From: v, Type: zen.EdgeFollowsInterest, To: in},
		{From: u, Type: zen.EdgeFollowsInterest, To: in},
	}
	got, err := g.HasEdges(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	var want []bool
	for _, k := range keys {
		_, err := g.HasEdge(ctx, k.From, k.Type, k.To)
		want = append(want, err == nil)
	}
	if diff := cmp.Diff([]bool{true, false, false, true, false}, want); diff != "" {
		t.Fatalf("HasEdge (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("HasEdges (-HasEdge +HasEdges):\n%s", diff)
	}
	if _, err := g.HasEdges(ctx, []zen.EdgeKey{{From: u, Type: zen.EdgeFollowsUser, To: in}}); err == nil {
		t.Error("HasEdges with a user -> interest follows-user key: no error")
	}
}

// TestListEdgesPointScan: a whole list read in one page looks its point rows up in one scan of
// (from, t)'s points; the answer is the one point-by-point reads give, with stale rows, rows
// without a point, points being removed, and points without a row (few enough for the scan to
// reach the end of the range, and too many, where it falls back to point reads).
func TestListEdgesPointScan(t *testing.T) {
	ctx := context.Background()
	for _, inFlight := range []int{3, 60} {
		s := zenmem.New()
		g := newGraph(t, s, newClock())
		u := mustID(t, 1, zen.TypeUser, 1)
		pin := func(n uint64) zen.ID { return mustID(t, 1, zen.TypePin, n) }
		for i := uint64(101); i <= 140; i++ {
			if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeUserLikes, To: pin(i), Seq: sq(i)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, i := range []uint64{104, 117, 133} {
			if err := g.RemoveEdge(ctx, u, zen.EdgeUserLikes, pin(i)); err != nil {
				t.Fatal(err)
			}
		}
		prefix := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint64(nil, uint64(u)), uint16(zen.EdgeUserLikes))
		edgeRow := func(s uint64, to zen.ID) []byte {
			k := append(slices.Clone(prefix), 1)
			k = binary.BigEndian.AppendUint64(k, 0)
			k = binary.BigEndian.AppendUint64(k, s)
			return binary.BigEndian.AppendUint64(k, uint64(to))
		}
		pointRow := func(to zen.ID) []byte {
			return binary.BigEndian.AppendUint64(append(slices.Clone(prefix), 0), uint64(to))
		}
		tb, _ := s.Table(ctx, zen.TableEdges)
		valid, err := tb.Get(ctx, pointRow(pin(109)))
		if err != nil {
			t.Fatal(err)
		}
		removing := append([]byte{2}, valid[1:]...)
		muts := []zen.Mutation{
			{Key: edgeRow(50, pin(105)), Value: []byte{}},  // a superseded seq: stale
			{Key: edgeRow(51, pin(9999)), Value: []byte{}}, // no point row
			{Key: pointRow(pin(112)), Value: removing},     // its remover has not finished
		}
		for i := range inFlight { // adds whose edge row is not written yet, ahead of the list's
			muts = append(muts, zen.Mutation{Key: pointRow(pin(uint64(1 + i))), Value: valid})
		}
		list := func(page int, newest bool) []pos { // planted afresh: a listing deletes stale rows
			t.Helper()
			if err := tb.Apply(ctx, muts); err != nil {
				t.Fatal(err)
			}
			return positions(listAll(t, g, u, zen.EdgeUserLikes, page, newest))
		}
		for _, newest := range []bool{true, false} {
			restore := zen.SetPointScanMin(1 << 30)
			want := list(7, newest)
			restore()
			if len(want) != 36 {
				t.Fatalf("reference listing has %d edges, want 36", len(want))
			}
			for _, from := range []int{1, 1 << 30} {
				restore := zen.SetPointScanMin(from)
				for _, page := range []int{1000, 7} {
					if diff := cmp.Diff(want, list(page, newest)); diff != "" {
						t.Errorf("in flight %d, newest %v, scan from %d, page %d (-want +got):\n%s", inFlight, newest, from, page, diff)
					}
				}
				restore()
			}
		}
	}
}

// members lists all of (from, et)'s members with zen.Graph.Members.
func members(t *testing.T, g *zen.Graph, from zen.ID, et zen.EdgeType) []zen.ID {
	t.Helper()
	ids, more, err := g.Members(context.Background(), from, et, zen.MaxEdgePage)
	if err != nil || more {
		t.Fatalf("Members: more %v, %v", more, err)
	}
	return ids
}

// TestMembersRejects: bad arguments and malformed point rows are errors, never a partial answer.
func TestMembersRejects(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	g := newGraph(t, s, newClock())
	u, b := mustID(t, 1, zen.TypeUser, 1), mustID(t, 1, zen.TypeBoard, 2)
	for name, call := range map[string]func() error{
		"unknown type": func() error { _, _, err := g.Members(ctx, u, zen.EdgeType(99), 10); return err },
		"from of another type": func() error {
			_, _, err := g.Members(ctx, b, zen.EdgeFollowsUser, 10)
			return err
		},
		"zero limit":     func() error { _, _, err := g.Members(ctx, u, zen.EdgeFollowsUser, 0); return err },
		"limit too high": func() error { _, _, err := g.Members(ctx, u, zen.EdgeFollowsUser, zen.MaxEdgePage+1); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := g.AddEdge(ctx, zen.Edge{From: u, Type: zen.EdgeFollowsUser, To: mustID(t, 1, zen.TypeUser, 3), Seq: sq(1)}); err != nil {
		t.Fatal(err)
	}
	point := binary.BigEndian.AppendUint64(nil, uint64(u))
	point = binary.BigEndian.AppendUint16(point, uint16(zen.EdgeFollowsUser))
	point = append(point, 0)
	tb, _ := s.Table(ctx, zen.TableEdges)
	for name, row := range map[string]zen.Mutation{
		"short key":   {Key: append(slices.Clone(point), 1, 2), Value: make([]byte, 25)},
		"short value": {Key: binary.BigEndian.AppendUint64(slices.Clone(point), uint64(mustID(t, 1, zen.TypeUser, 4))), Value: []byte{1}},
		"bad state":   {Key: binary.BigEndian.AppendUint64(slices.Clone(point), uint64(mustID(t, 1, zen.TypeUser, 4))), Value: append([]byte{7}, make([]byte, 24)...)},
	} {
		if err := tb.Apply(ctx, []zen.Mutation{row}); err != nil {
			t.Fatal(err)
		}
		if ids, _, err := g.Members(ctx, u, zen.EdgeFollowsUser, 10); err == nil {
			t.Errorf("%s: Members = %v, want an error", name, ids)
		}
		if err := tb.Apply(ctx, []zen.Mutation{{Key: row.Key, Delete: true}}); err != nil {
			t.Fatal(err)
		}
	}
}
