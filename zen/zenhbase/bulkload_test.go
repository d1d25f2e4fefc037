package zenhbase

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zentest"
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

// TestBulkLoadMatchesApply runs zen's bulk-sink acceptance test with HBase's own bulk load
// (the project's script, on the test HBase): a small stage, so every table has many runs, and
// small cell files, so every table has several.
func TestBulkLoadMatchesApply(t *testing.T) {
	load := bulkLoadScript(t)
	defer func(n int64) { cellChunk = n }(cellChunk)
	cellChunk = 2 << 10
	script, files := load, 0
	load = func(ctx context.Context, dir string, to LoadTarget) (LoadStats, error) {
		rows, _ := filepath.Glob(filepath.Join(dir, "*.rows"))
		files = max(files, len(rows))
		st, err := script(ctx, dir, to)
		if left, _ := filepath.Glob(filepath.Join(dir, "*.rows")); err == nil && len(left) > 0 {
			t.Errorf("the bulk load left its input: %v", left)
		}
		return st, err
	}
	var stage *Stage
	zentest.RunBulkSink(t, func(t *testing.T) zen.Store { return openStore(t, Options{}) },
		func(t *testing.T, s zen.Store) zen.BulkSink {
			st, err := s.(*Store).NewStage(t.TempDir(), load, 4<<10)
			if err != nil {
				t.Fatal(err)
			}
			stage = st
			return st
		},
		func(t *testing.T) {
			if st := stage.Stats(); st.Rows == 0 || st.HFiles < st.Tables {
				t.Errorf("bulk load stats %+v: want rows, and an HFile per table at least", st)
			}
			if left, _ := os.ReadDir(stage.Dir()); len(left) != 1 || left[0].Name() != ".lock" {
				t.Errorf("files left in the stage directory after Commit: %v (want only its lock)", left)
			}
		})
	if files <= 4 {
		t.Errorf("a commit's most cell files was %d: want several per table", files)
	}
	if err := stage.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stage.Dir()); !os.IsNotExist(err) {
		t.Errorf("stage directory %s still there after Close (%v)", stage.Dir(), err)
	}
}

// TestStageRefusesDeletes: a bulk load only puts; a delete is refused before anything is written.
func TestStageRefusesDeletes(t *testing.T) {
	var s *Store
	noLoad := func(context.Context, string, LoadTarget) (LoadStats, error) { return LoadStats{}, nil }
	st, err := s.NewStage(t.TempDir(), noLoad, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Stage(context.Background(), zen.TableEdges, []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}, {Key: []byte("b"), Delete: true}})
	if err == nil {
		t.Fatal("a staged delete was taken")
	}
}

// TestCommitChecksTheRowsLoaded: a load command that reports fewer rows than were staged (one
// that skipped files it did not recognise) fails the commit instead of passing for a load.
func TestCommitChecksTheRowsLoaded(t *testing.T) {
	testenv.HBase(t)
	s := openStore(t, Options{})
	skip := func(context.Context, string, LoadTarget) (LoadStats, error) { return LoadStats{Tables: 1}, nil }
	st, err := s.NewStage(t.TempDir(), skip, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Stage(ctx, zen.TableEdges, []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx); err == nil {
		t.Fatal("a commit whose load command loaded 0 of 1 rows succeeded")
	}
}
