package graphsvc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/internal/testenv"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// loadAt is the fixed clock of the load tests: the API and the loader stamp the same
// created_ms and follow seqs, so their rows can be compared byte for byte.
func loadAt() time.Time { return time.UnixMilli(1_777_000_000_000) }

// loadInput is the population of the load tests, as JSON Lines: users (one with capitals in its
// name), boards, follows of users and of boards, and an explicit follow time.
const loadInput = `
{"user": {"username": "Ada", "email": "Ada@Example.com", "display_name": "Ada L"}}
{"user": {"username": "bob", "email": "bob@example.com"}}
{"user": {"username": "cy", "email": "cy@example.com", "display_name": "Cy"}}
{"user": {"username": "dee", "email": "dee@example.com"}}
{"user": {"username": "eve", "email": "eve@example.com"}}
{"board": {"key": "ada-1", "owner": "ada", "name": "Recipes", "description": "good food"}}
{"board": {"key": "ada-2", "owner": "Ada", "name": "Trips"}}
{"board": {"key": "bob-1", "owner": "bob", "name": "Tools"}}
{"follow": {"user": "bob", "target": "ada"}}
{"follow": {"user": "cy", "target": "ada"}}
{"follow": {"user": "dee", "target": "ada"}}
{"follow": {"user": "ada", "target": "bob"}}
{"follow": {"user": "eve", "target": "bob", "created_ms": 1776000000000}}
{"follow": {"user": "cy", "board": "ada-1"}}
{"follow": {"user": "eve", "board": "ada-1"}}
{"follow": {"user": "ada", "board": "bob-1"}}
{"follow": {"user": "eve", "target": "dee"}}
`

// loadViaAPI builds loadInput's population through the gRPC API on s.
func loadViaAPI(t *testing.T, s zen.Store) {
	t.Helper()
	ctx := context.Background()
	g, err := zen.NewGraph(ctx, s, nil, loadAt)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	graphsvc.NewGraphService(g, &graphFakeEnqueuer{}, nil, loadAt).Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///graph",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := graphv1.NewGraphServiceClient(conn)
	users, boards := map[string]uint64{}, map[string]uint64{}
	src := graphsvc.NewJSONLSource(strings.NewReader(loadInput))
	for {
		rec, err := src.Next()
		if err != nil {
			break
		}
		switch {
		case rec.User != nil:
			u, err := c.CreateUser(ctx, &graphv1.CreateUserRequest{Username: rec.User.Username, Email: rec.User.Email, DisplayName: rec.User.DisplayName})
			if err != nil {
				t.Fatal(err)
			}
			users[strings.ToLower(rec.User.Username)] = u.GetId()
		case rec.Board != nil:
			b, err := c.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: users[strings.ToLower(rec.Board.Owner)],
				Name: rec.Board.Name, Description: rec.Board.Description, RequestId: rec.Board.Key})
			if err != nil {
				t.Fatal(err)
			}
			boards[rec.Board.Key] = b.GetId()
		case rec.Follow != nil:
			target := users[rec.Follow.Target]
			if rec.Follow.Board != "" {
				target = boards[rec.Follow.Board]
			}
			if rec.Follow.CreatedMs != 0 { // the API has no follow time: add the edges as Follow does
				fe := zen.Edge{From: zen.ID(users[rec.Follow.User]), Type: zen.EdgeFollowsUser, To: zen.ID(target), Seq: seq.FromMillis(rec.Follow.CreatedMs)}
				if err := g.AddEdge(ctx, fe); err != nil {
					t.Fatal(err)
				}
				if err := g.AddInverse(ctx, fe); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := c.Follow(ctx, &graphv1.FollowRequest{UserId: users[rec.Follow.User], TargetId: target}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// loadWithLoader loads loadInput with the Loader on s.
func loadWithLoader(t *testing.T, s zen.Store, opts ...graphsvc.LoaderOption) (graphsvc.LoadStats, error) {
	t.Helper()
	g, err := zen.NewGraph(context.Background(), s, nil, loadAt)
	if err != nil {
		t.Fatal(err)
	}
	return graphsvc.NewLoader(g, loadAt, opts...).Load(context.Background(), graphsvc.NewJSONLSource(strings.NewReader(loadInput)))
}

// graphRows returns every row of the graph tables of s with each ID replaced by a name that does
// not depend on allocation (users by username, boards by owner and name), the random nonce of
// point rows masked, and the ID allocators left out: two graphs of the same population built by
// any means compare equal.
func graphRows(t *testing.T, s zen.Store) map[string][]string {
	t.Helper()
	ctx := context.Background()
	scan := func(name string) []zen.KV {
		tb, err := s.Table(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tb.Scan(ctx, zen.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	objs := scan(zen.TableObjects)
	names := map[zen.ID]string{}
	data := map[zen.ID]map[string]any{}
	for _, r := range objs {
		id := zen.ID(binary.BigEndian.Uint64(r.Key))
		var d map[string]any
		if err := json.Unmarshal(r.Value[8:], &d); err != nil {
			t.Fatal(err)
		}
		data[id] = d
		if id.Type() == zen.TypeUser {
			names[id] = "user:" + strings.ToLower(fmt.Sprint(d["username"]))
		}
	}
	for id, d := range data {
		if id.Type() == zen.TypeBoard {
			owner, _ := zen.ParseID(fmt.Sprint(d["owner"]))
			names[id] = "board:" + names[owner] + "/" + fmt.Sprint(d["name"])
		}
	}
	name := func(b []byte) string {
		id := zen.ID(binary.BigEndian.Uint64(b))
		if n, ok := names[id]; ok {
			return n
		}
		return fmt.Sprintf("unknown:%d", id)
	}
	out := map[string][]string{}
	for _, r := range objs {
		id := zen.ID(binary.BigEndian.Uint64(r.Key))
		d := data[id]
		if o, ok := d["owner"]; ok {
			owner, _ := zen.ParseID(fmt.Sprint(o))
			d["owner"] = names[owner]
		}
		j, _ := json.Marshal(d)
		out["objects"] = append(out["objects"], fmt.Sprintf("%s v%d %s", names[id], binary.BigEndian.Uint64(r.Value[:8]), j))
	}
	for _, r := range scan(zen.TableModShard) {
		kind, key, _ := bytes.Cut(r.Key[8:], []byte{0})
		k := string(key)
		if string(kind) == "request" { // kind:owner-id:request-id
			parts := strings.SplitN(k, ":", 3)
			owner, _ := zen.ParseID(parts[1])
			k = parts[0] + ":" + names[owner] + ":" + parts[2]
		}
		out["modshard"] = append(out["modshard"], fmt.Sprintf("%s %s -> %s", kind, k, name(r.Value)))
	}
	for _, r := range scan(zen.TableEdges) {
		from, typ, tag := name(r.Key), binary.BigEndian.Uint16(r.Key[8:10]), r.Key[10]
		if tag == 1 {
			out["edges"] = append(out["edges"], fmt.Sprintf("edge %s %d seq=%x to=%s data=%x", from, typ, r.Key[11:27], name(r.Key[27:]), r.Value))
			continue
		}
		v := r.Value
		out["edges"] = append(out["edges"], fmt.Sprintf("point %s %d to=%s state=%d seq=%x data=%x", from, typ, name(r.Key[11:]), v[0], v[9:25], v[25:]))
	}
	for _, r := range scan(zen.TableCounters) {
		if r.Key[len(r.Key)-1] == 'a' && len(r.Key) == 9 {
			continue // ID allocators: blocks differ by design
		}
		out["counters"] = append(out["counters"], fmt.Sprintf("count %s %d = %d", name(r.Key), binary.BigEndian.Uint16(r.Key[9:]), int64(binary.BigEndian.Uint64(r.Value))))
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

func pebbleStore(t *testing.T) zen.Store {
	s, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestLoaderRowsEqualAPI loads one population through the gRPC API and another with the
// Loader, and compares every row of the graph tables: the loaded graph is the API's.
func TestLoaderRowsEqualAPI(t *testing.T) {
	for _, batch := range []int{1, 7, 50000} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			api, loaded := pebbleStore(t), pebbleStore(t)
			loadViaAPI(t, api)
			st, err := loadWithLoader(t, loaded, graphsvc.WithLoadBatch(batch), graphsvc.WithLoadChunk(2))
			if err != nil {
				t.Fatal(err)
			}
			if st.Users != 5 || st.Boards != 3 || st.Follows != 9 || st.UsersRefused+st.BoardsRefused+st.FollowsRefused != 0 {
				t.Errorf("stats: %+v", st)
			}
			want := graphRows(t, api)
			if diff := cmp.Diff(want, graphRows(t, loaded)); diff != "" {
				t.Errorf("loaded rows differ from the API's (-api +loader):\n%s", diff)
			}
			if len(want["edges"]) != 4*9+2*3 {
				t.Errorf("API wrote %d edge rows, want %d", len(want["edges"]), 4*9+2*3)
			}
		})
	}
}

// TestLoaderRerunAndResume reruns a load (nothing is created again, the rows stay the API's)
// and resumes one that the store failed part-way through.
func TestLoaderRerunAndResume(t *testing.T) {
	api := pebbleStore(t)
	loadViaAPI(t, api)
	want := graphRows(t, api)

	t.Run("rerun", func(t *testing.T) {
		s := pebbleStore(t)
		if _, err := loadWithLoader(t, s); err != nil {
			t.Fatal(err)
		}
		st, err := loadWithLoader(t, s)
		if err != nil {
			t.Fatal(err)
		}
		if st.Users != 0 || st.UsersExisting != 5 || st.Boards != 0 || st.BoardsExisting != 3 || st.Follows != 0 || st.FollowsExisting != 9 {
			t.Errorf("second run's stats: %+v", st)
		}
		if diff := cmp.Diff(want, graphRows(t, s)); diff != "" {
			t.Errorf("rows after a rerun differ from the API's (-api +loader):\n%s", diff)
		}
	})
	for _, tc := range []struct {
		table string
		after int64
	}{{zen.TableEdges, 0}, {zen.TableEdges, 3}, {zen.TableCounters, 0}, {zen.TableModShard, 2}} {
		t.Run(fmt.Sprintf("fail %s write %d", tc.table, tc.after+1), func(t *testing.T) {
			s := pebbleStore(t)
			f := &failingStore{Store: s, table: tc.table, after: tc.after}
			if _, err := loadWithLoader(t, f, graphsvc.WithLoadBatch(4), graphsvc.WithLoadChunk(2)); !errors.Is(err, errInjected) {
				t.Fatalf("load on the failing store: %v, want the injected failure", err)
			}
			st, err := loadWithLoader(t, s, graphsvc.WithLoadBatch(4), graphsvc.WithLoadChunk(2))
			if err != nil {
				t.Fatal(err)
			}
			if st.Users+st.UsersExisting != 5 || st.UsersRefused != 0 {
				t.Errorf("resumed run's stats: %+v", st)
			}
			if diff := cmp.Diff(want, graphRows(t, s)); diff != "" {
				t.Errorf("rows after a resumed load differ from the API's (-api +loader):\n%s", diff)
			}
		})
	}
}

// TestLoaderRefuses counts and explains invalid records instead of writing them.
func TestLoaderRefuses(t *testing.T) {
	in := `{"user": {"username": "ok", "email": "ok@example.com"}}
{"user": {"username": "bad name", "email": "x@example.com"}}
{"user": {"username": "OK", "email": "ok2@example.com"}}
{"user": {"username": "other", "email": "ok@example.com"}}
{"board": {"key": "", "owner": "ok", "name": "n"}}
{"board": {"key": "b", "owner": "nobody", "name": "n"}}
{"follow": {"user": "ok", "target": "ok"}}
{"follow": {"user": "ok", "target": "ghost"}}
{"user": {"username": "x", "email": "x@example.com"}, "follow": {"user": "ok", "target": "x"}}
`
	s := pebbleStore(t)
	g, err := zen.NewGraph(context.Background(), s, nil, loadAt)
	if err != nil {
		t.Fatal(err)
	}
	st, err := graphsvc.NewLoader(g, loadAt).Load(context.Background(), graphsvc.NewJSONLSource(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	got := []int64{st.Users, st.UsersRefused, st.BoardsRefused, st.FollowsRefused, st.Malformed}
	if diff := cmp.Diff([]int64{1, 3, 2, 2, 1}, got); diff != "" {
		t.Errorf("users, users refused, boards refused, follows refused, malformed (-want +got):\n%s\nreasons: %q", diff, st.Reasons)
	}
	// The email "ok@example.com" is refused within the chunk; a second load sees it taken.
	st, err = graphsvc.NewLoader(g, loadAt).Load(context.Background(), graphsvc.NewJSONLSource(strings.NewReader(
		`{"user": {"username": "third", "email": "OK@example.com"}}`)))
	if err != nil || st.UsersRefused != 1 || !strings.Contains(strings.Join(st.Reasons, ";"), "email is taken") {
		t.Errorf("taken email: %+v, %v", st, err)
	}
	_, err = graphsvc.NewLoader(g, loadAt).Load(context.Background(), graphsvc.NewJSONLSource(strings.NewReader("{\"user\": {}}\n{\"usr\": {}}\n")))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("unknown field: %v, want an error naming line 2", err)
	}
}

// TestLoaderRowsEqualAPIHBase is TestLoaderRowsEqualAPI on HBase.
func TestLoaderRowsEqualAPIHBase(t *testing.T) {
	zk := testenv.HBase(t)
	open := func(t *testing.T) zen.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := zenhbase.Open(ctx, zk, zenhbase.Options{
			TablePrefix: fmt.Sprintf("ld%d_", time.Now().UnixNano()), FlushInterval: 2 * time.Millisecond, SplitEvery: 1024,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, n := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard} {
				if err := s.Drop(ctx, n); err != nil {
					t.Logf("drop %s: %v", n, err)
				}
			}
			s.Close()
		})
		return s
	}
	api, loaded := open(t), open(t)
	loadViaAPI(t, api)
	if _, err := loadWithLoader(t, loaded); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(graphRows(t, api), graphRows(t, loaded)); diff != "" {
		t.Errorf("loaded rows differ from the API's (-api +loader):\n%s", diff)
	}
}

var errInjected = errors.New("injected write failure")

// failingStore fails every Apply to one table after the first `after` ones succeeded.
type failingStore struct {
	zen.Store
	table string
	after int64
	n     atomic.Int64
}

func (f *failingStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := f.Store.Table(ctx, name)
	if err != nil || name != f.table {
		return t, err
	}
	return &failingTable{Table: t, f: f}, nil
}

type failingTable struct {
	zen.Table
	f *failingStore
}

func (t *failingTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	if t.f.n.Add(1) > t.f.after {
		return errInjected
	}
	return t.Table.Apply(ctx, muts)
}
