package zenhbase

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// bulkLoadScript is HBase's own bulk load run by the project's script, against the test HBase.
func bulkLoadScript(t *testing.T) LoadFunc {
	t.Helper()
	testenv.HBase(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "hbase-bulkload.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return CommandLoad(testWriter{t}, script)
}

// testWriter logs what the script prints on stderr.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

// TestBulkLoadMatchesApply loads a graph through HBase's bulk load and another through the
// store's write path from the same records: every table holds the same rows in both, the
// rows a key got last in the load included, and the graph API reads the loaded objects,
// edges and counts.
func TestBulkLoadMatchesApply(t *testing.T) {
	load := bulkLoadScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	viaApply, viaBulk := openStore(t, Options{}), openStore(t, Options{})
	build := func(s *Store, opts ...zen.BulkOption) *zen.Graph {
		g, err := zen.NewGraph(ctx, s, nil, func() time.Time { return time.UnixMilli(1_700_000_000_000) })
		if err != nil {
			t.Fatal(err)
		}
		g.SeedShards(7)
		// A small batch and a small stage: many runs per table, a key in several of them.
		b := g.NewBulk(50, opts...)
		users := make([]zen.ID, 300)
		for i := range users {
			id, err := zen.NewID(uint16(i%40), zen.TypeUser, uint64(1000+i))
			if err != nil {
				t.Fatal(err)
			}
			users[i] = id
			if err := b.PutObject(ctx, id, map[string]any{"username": fmt.Sprintf("u%d", i)}); err != nil {
				t.Fatal(err)
			}
			if err := b.MapKey(ctx, "username", fmt.Sprintf("u%d", i), id); err != nil {
				t.Fatal(err)
			}
		}
		// The first user's object again, later: the last row of its key wins.
		if err := b.PutObject(ctx, users[0], map[string]any{"username": "u0", "bio": "again"}); err != nil {
			t.Fatal(err)
		}
		for i, from := range users {
			n := int64(0)
			for j := 1; j <= 5; j++ {
				to := users[(i+j*7)%len(users)]
				if err := b.AddEdge(ctx, zen.Edge{From: from, Type: zen.EdgeFollowsUser, To: to, Seq: seq.FromMillis(int64(i*10 + j))}); err != nil {
					t.Fatal(err)
				}
				n++
			}
			if err := b.SetCount(ctx, from, zen.EdgeFollowsUser, n); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return g
	}
	build(viaApply)
	stage, err := viaBulk.NewStage(t.TempDir(), load, 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	g := build(viaBulk, zen.WithBulkSink(stage))
	if st := stage.Stats(); st.Rows == 0 || st.HFiles < st.Tables {
		t.Errorf("bulk load stats %+v: want rows, and an HFile per table at least", st)
	}
	if _, err := os.Stat(stage.Dir()); !os.IsNotExist(err) {
		t.Errorf("stage directory %s still there after Commit (%v)", stage.Dir(), err)
	}
	for _, name := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard} {
		want, got := scanAll(ctx, t, viaApply, name), scanAll(ctx, t, viaBulk, name)
		if name == zen.TableEdges {
			// An edge's point row holds a random nonce (bytes 1 to 8), drawn anew by each load.
			maskNonces(want)
			maskNonces(got)
		}
		if len(want) == 0 {
			t.Fatalf("%s: nothing written through Apply", name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: bulk-loaded rows differ from applied ones (-apply +bulk):\n%s", name, diff)
		}
	}
	obj, err := g.Get(ctx, mustID(t, 0, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if obj.Data["bio"] != "again" {
		t.Errorf("user 0 after the load: %v, want the last row written (bio again)", obj.Data)
	}
	if n, err := g.CountEdges(ctx, mustID(t, 0, 1000), zen.EdgeFollowsUser); err != nil || n != 5 {
		t.Errorf("CountEdges = %d, %v; want 5", n, err)
	}
}

// maskNonces zeroes bytes 1 to 8 of every value long enough to hold a point row's nonce.
func maskNonces(rows []zen.KV) {
	for _, r := range rows {
		if len(r.Value) >= 9 {
			clear(r.Value[1:9])
		}
	}
}

func mustID(t *testing.T, shard uint16, local uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(shard, zen.TypeUser, local)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// scanAll reads every row of the store's table name.
func scanAll(ctx context.Context, t *testing.T, s *Store, name string) []zen.KV {
	t.Helper()
	tb, err := s.Table(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Scan(ctx, zen.ScanOptions{Start: []byte{0}, Stop: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestStageRefusesDeletes: a bulk load only puts; a delete is refused before anything is written.
func TestStageRefusesDeletes(t *testing.T) {
	st := &Stage{dir: t.TempDir(), limit: DefaultStageBytes, tables: map[string]*stagedTable{}}
	err := st.Stage(context.Background(), zen.TableEdges, []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}, {Key: []byte("b"), Delete: true}})
	if err == nil {
		t.Fatal("a staged delete was taken")
	}
}

// TestMergeRunsKeepsTheLatest merges runs holding the same keys: each key once, with the value
// of the latest run, in key order, encoded as cells.
func TestMergeRunsKeepsTheLatest(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, kvs ...string) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriter(f)
		for i := 0; i < len(kvs); i += 2 {
			writeRecord(w, []byte(kvs[i]), []byte(kvs[i+1]))
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return path
	}
	runs := []string{
		write("r0", "a", "1", "c", "1", "e", "1"),
		write("r1"),
		write("r2", "b", "2", "c", "2"),
		write("r3", "c", "3", "f", "3"),
	}
	out := filepath.Join(dir, "out")
	if err := mergeRuns(runs, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rr := &runReader{r: bufio.NewReader(f), f: f}
	var got []string
	for rr.next() == nil {
		v, err := decodeValue(rr.v)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(rr.k)+"="+string(v))
	}
	want := []string{"a=1", "b=2", "c=3", "e=1", "f=3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}
