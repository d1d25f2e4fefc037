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
	redisAddr, ns := testenv.RedisNamespace(t, "pincrash")
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
	cs := pebblecrash.Store{Store: s, Before: func() {
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

// TestFollowMachineCrash follows and then unfollows through the GraphService on a real Pebble
// store whose outbox shares the graph's log, taking a crash image before every write and after
// the last call. Each call's edge writes are lazy and its event's row is its one durable write:
// an image taken inside Follow is the store as it was before Follow, one taken inside Unfollow is
// the store as Follow left it (both edges there), and the last one has both edges gone and both
// events recorded. Retrying the calls from any image ends with no edge, counted zero.
func TestFollowMachineCrash(t *testing.T) {
	redisAddr, ns := testenv.RedisNamespace(t, "followcrash")
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := zenpebble.Open("db", zenpebble.WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	const (
		inFollow   = iota // Follow under way
		inUnfollow        // Follow returned, Unfollow under way
		done              // both returned
	)
	type crash struct {
		fs    *vfs.MemFS
		phase int
	}
	var crashes []crash
	recording, phase := false, inFollow
	cs := pebblecrash.Store{Store: s, Before: func() {
		if recording {
			crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), phase})
		}
	}}
	svc, _, _ := machineCrashService(t, cs, redisAddr, ns)
	var users []*graphv1.User
	for _, n := range []string{"alice", "bob"} {
		u, err := svc.CreateUser(ctx, &graphv1.CreateUserRequest{Username: n, Email: n + "@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	alice, bob := users[0].GetId(), users[1].GetId()
	tables := []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard, zen.OutboxTable}
	before := storeRows(t, s, tables) // the set-up's calls each ended with a durable write
	recording = true
	if _, err := svc.Follow(ctx, &graphv1.FollowRequest{UserId: alice, TargetId: bob}); err != nil {
		t.Fatal(err)
	}
	followWrites := len(crashes)
	phase = inUnfollow
	afterFollow := storeRows(t, s, tables)
	if _, err := svc.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: alice, TargetId: bob}); err != nil {
		t.Fatal(err)
	}
	phase = done
	recording = false
	crashes = append(crashes, crash{fs.CrashClone(vfs.CrashCloneCfg{}), phase})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if followWrites < 3 || len(crashes)-followWrites < 3 {
		t.Fatalf("%d writes in Follow, %d in Unfollow: want their edge steps and the event", followWrites, len(crashes)-1-followWrites)
	}
	same := func(a, b map[string]string) string {
		for k, v := range a {
			if w, ok := b[k]; !ok || w != v {
				return fmt.Sprintf("row %q differs", k)
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				return fmt.Sprintf("row %q differs", k)
			}
		}
		return ""
	}
	a, b := zen.ID(alice), zen.ID(bob)
	edges := []zen.EdgeKey{{From: a, Type: zen.EdgeFollowsUser, To: b}, {From: b, Type: zen.EdgeFollowedByUser, To: a}}
	for i, c := range crashes {
		st, err := zenpebble.Open("db", zenpebble.WithFS(c.fs))
		if err != nil {
			t.Fatalf("crash %d: reopen: %v", i, err)
		}
		rows := storeRows(t, st, tables)
		svc, g, ot := machineCrashService(t, st, redisAddr, ns)
		has, err := g.HasEdges(ctx, edges)
		if err != nil {
			t.Fatal(err)
		}
		events, err := ot.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		switch c.phase {
		case inFollow:
			if d := same(rows, before); d != "" {
				t.Errorf("crash %d, inside Follow: a write of the call is durable before its event's row: %s", i, d)
			}
		case inUnfollow:
			if d := same(rows, afterFollow); d != "" {
				t.Errorf("crash %d, inside Unfollow: not the store Follow left: %s", i, d)
			}
			if !has[0] || !has[1] || len(events) < 1 {
				t.Errorf("crash %d: Follow returned, but edges %v, %d event rows", i, has, len(events))
			}
		case done:
			if has[0] || has[1] || len(events) < 2 {
				t.Errorf("crash %d: Unfollow returned, but edges %v, %d event rows", i, has, len(events))
			}
		}
		// The client retries what had not returned.
		if c.phase == inFollow {
			if _, err := svc.Follow(ctx, &graphv1.FollowRequest{UserId: alice, TargetId: bob}); err != nil {
				t.Fatalf("crash %d: retry Follow: %v", i, err)
			}
		}
		if _, err := svc.Unfollow(ctx, &graphv1.UnfollowRequest{UserId: alice, TargetId: bob}); err != nil {
			t.Fatalf("crash %d: retry Unfollow: %v", i, err)
		}
		has, err = g.HasEdges(ctx, edges)
		if err != nil {
			t.Fatal(err)
		}
		n1, err1 := g.CountEdges(ctx, a, zen.EdgeFollowsUser)
		n2, err2 := g.CountEdges(ctx, b, zen.EdgeFollowedByUser)
		if has[0] || has[1] || n1 != 0 || n2 != 0 || err1 != nil || err2 != nil {
			t.Errorf("crash %d: after the retries edges %v, counts %d (%v) and %d (%v), want none", i, has, n1, err1, n2, err2)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d crash images: %d inside Follow, %d inside Unfollow", len(crashes), followWrites, len(crashes)-1-followWrites)
}
