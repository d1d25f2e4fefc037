package graphsvc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
	"github.com/smartfeed/smartfeed/zen/zenpebble/pebblecrash"
)

// crashImageStore hands out tables that call before ahead of each write.
type crashImageStore struct {
	*zenpebble.Store
	before func()
}

func (s crashImageStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return pebblecrash.Table{Table: t.(*zenpebble.Table), Before: s.before}, nil
}

// machineCrashService is a GraphService over st whose events go through the real DurableClient
// (its outbox in st's outbox table, then a real Redis), with WithEventTable as the app wires it.
func machineCrashService(t *testing.T, st zen.Store, redisAddr, ns string) (*graphsvc.GraphService, *zen.Graph, zen.Table) {
	t.Helper()
	ctx := context.Background()
	g, err := zen.NewGraph(ctx, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ot, err := st.Table(ctx, zen.OutboxTable)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pinlater.NewClient(pinlater.RedisAddr(redisAddr), nil, nil, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d, err := pinlater.NewDurableClient(c, zen.NewOutbox(ot), pinlater.DurableOptions{EnqueueTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return graphsvc.NewGraphService(g, d, nil, nil, graphsvc.WithEventTable(ot)), g, ot
}

// storeRows returns every row of the named tables of st, as table|key → value.
func storeRows(t *testing.T, st zen.Store, names []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, n := range names {
		tb, err := st.Table(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		kvs, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			out[n+"|"+string(kv.Key)] = string(kv.Value)
		}
	}
	return out
}

// TestCreatePinMachineCrash creates pins through the GraphService on a real Pebble store whose
// outbox shares the graph's log, and simulates a machine crash (what was fsynced, nothing more)
// before every write and after the last call. With WithEventTable the pin's object, request
// record and edges are written lazily and the event's outbox row alone waits for an fsync: no
// image taken inside the first call holds any of its writes; in every image each call that had
// returned is there whole (object, edges both ways, its event's row); and retrying every call
// with its request_id from any image gives each pin once, listed and counted right.
func TestCreatePinMachineCrash(t *testing.T) {
	redisAddr := testenv.Redis(t)
	ns := fmt.Sprintf("pincrash%d", time.Now().UnixNano())
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	type crash struct {
		fs    *vfs.MemFS
		acked int // CreatePin calls that had returned
	}
	var crashes []crash
	recording, acked := false, 0
	cs := crashImageStore{Store: s, before: func() {
		if recording {
			crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), acked})
		}
	}}
	svc, g, _ := machineCrashService(t, cs, redisAddr, ns)
	if !g.SharesLog(mustTable(t, cs, zen.OutboxTable)) {
		t.Fatal("graph and outbox on one Pebble store do not share a log")
	}
	user, err := svc.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "crashy", Email: "crashy@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	board, err := svc.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: user.GetId(), Name: "crash board"})
	if err != nil {
		t.Fatal(err)
	}
	interest, err := svc.CreateInterest(ctx, &graphv1.CreateInterestRequest{Name: "crashes"})
	if err != nil {
		t.Fatal(err)
	}
	req := func(i int) *graphv1.CreatePinRequest {
		return &graphv1.CreatePinRequest{AuthorId: user.GetId(), BoardId: board.GetId(), Details: fmt.Sprintf("pin %d", i), ImageUrl: fmt.Sprintf("https://img.example.com/%d.jpg", i),
			InterestIds: []uint64{interest.GetId()}, RequestId: fmt.Sprintf("req-%d", i)}
	}
	tables := []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard, zen.OutboxTable}
	before := storeRows(t, s, tables) // the set-up's calls each ended with a durable write

	const calls = 3
	var pins []zen.ID
	firstCall := 0
	recording = true
	for i := range calls {
		p, err := svc.CreatePin(ctx, req(i))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstCall = len(crashes)
		}
		pins = append(pins, zen.ID(p.GetId()))
		acked++
	}
	recording = false
	crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), acked})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if firstCall < 4 {
		t.Fatalf("%d writes in the first CreatePin, want its object, request record, edges and event", firstCall)
	}

	b, in, u := zen.ID(board.GetId()), zen.ID(interest.GetId()), zen.ID(user.GetId())
	for i, c := range crashes {
		st, err := zenpebble.Open("db", zenpebble.WithFS(c.fs))
		if err != nil {
			t.Fatalf("crash %d: reopen: %v", i, err)
		}
		if i < firstCall {
			rows := storeRows(t, st, tables)
			for k := range rows {
				if _, ok := before[k]; !ok {
					t.Errorf("crash %d, inside the first CreatePin before its event's row: a row of the call is durable: %q", i, k)
					break
				}
			}
		}
		svc, g, ot := machineCrashService(t, st, redisAddr, ns)
		events, err := ot.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) < c.acked {
			t.Errorf("crash %d: %d calls returned, %d event rows", i, c.acked, len(events))
		}
		for j := range c.acked { // every call that returned is there whole
			p := pins[j]
			if _, err := g.Get(ctx, p); err != nil {
				t.Errorf("crash %d: pin %d returned but its object: %v", i, j, err)
			}
			has, err := g.HasEdges(ctx, []zen.EdgeKey{{From: u, Type: zen.EdgeUserPins, To: p}, {From: b, Type: zen.EdgeBoardPins, To: p},
				{From: p, Type: zen.EdgePinBoards, To: b}, {From: p, Type: zen.EdgePinInterests, To: in}, {From: in, Type: zen.EdgeInterestPins, To: p}})
			if err != nil {
				t.Fatal(err)
			}
			for k, ok := range has {
				if !ok {
					t.Errorf("crash %d: pin %d returned but edge %d of its 5 is missing", i, j, k)
				}
			}
		}
		// The client retries every call: a returned one replays its pin, and each pin is there once.
		for j := range calls {
			p, err := svc.CreatePin(ctx, req(j))
			if err != nil {
				t.Fatalf("crash %d: retry %d: %v", i, j, err)
			}
			if j < c.acked && zen.ID(p.GetId()) != pins[j] {
				t.Errorf("crash %d: retry of returned call %d gave pin %d, not %d", i, j, p.GetId(), pins[j])
			}
		}
		es, _, err := g.ListEdges(ctx, b, zen.EdgeBoardPins, "", 100, false)
		if err != nil {
			t.Fatal(err)
		}
		n, err := g.CountEdges(ctx, b, zen.EdgeBoardPins)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != calls || n != calls {
			t.Errorf("crash %d: after the retries the board lists %d pins and counts %d, want %d", i, len(es), n, calls)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash images, %d inside the first call", len(crashes), firstCall)
}

func mustTable(t *testing.T, s zen.Store, name string) zen.Table {
	t.Helper()
	tb, err := s.Table(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}
