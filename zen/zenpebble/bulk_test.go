package zenpebble

import (
	"context"
	"os"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// TestStageIngestMatchesApply runs zen's bulk-sink acceptance test with the sstables ingested,
// on a database on disk and on one in memory: a small stage, so every table has many runs. The
// edges, which nothing wrote before the load, land in the bottom level, and the stage's
// directory holds only its lock between commits and nothing after Close.
func TestStageIngestMatchesApply(t *testing.T) {
	for _, disk := range []bool{true, false} {
		name := map[bool]string{true: "disk", false: "memory"}[disk]
		t.Run(name, func(t *testing.T) {
			var stage *Stage
			var store *Store
			zentest.RunBulkSink(t, func(t *testing.T) zen.Store {
				dir := ""
				if disk {
					dir = t.TempDir()
				}
				return openStore(t, dir)
			}, func(t *testing.T, s zen.Store) zen.BulkSink {
				store = s.(*Store)
				st, err := store.NewStage(t.TempDir(), 4<<10)
				if err != nil {
					t.Fatal(err)
				}
				stage = st
				return st
			}, func(t *testing.T) {
				st := stage.Stats()
				if st.Rows == 0 || st.Files < st.Tables || st.Tables != 4 {
					t.Errorf("ingest stats %+v: want rows of 4 tables, a file each at least", st)
				}
				if n := store.db.Metrics().Levels[6].TablesCount; n == 0 {
					t.Errorf("no sstable in the bottom level after the load (stats %+v)", st)
				}
				if left, _ := os.ReadDir(stage.Dir()); len(left) != 1 || left[0].Name() != ".lock" {
					t.Errorf("files left in the stage directory after Commit: %v (want only its lock)", left)
				}
			})
			if err := stage.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(stage.Dir()); !os.IsNotExist(err) {
				t.Errorf("stage directory %s still there after Close (%v)", stage.Dir(), err)
			}
		})
	}
}

// TestStageRefusesBadRows: a delete, an empty key or a bad table name is refused before
// anything is staged.
func TestStageRefusesBadRows(t *testing.T) {
	s := openStore(t, "")
	st, err := s.NewStage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for name, c := range map[string]struct {
		table string
		muts  []zen.Mutation
	}{
		"delete":     {zen.TableEdges, []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}, {Key: []byte("b"), Delete: true}}},
		"empty key":  {zen.TableEdges, []zen.Mutation{{Key: nil, Value: []byte("v")}}},
		"table name": {"Bad-Name", []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}}},
	} {
		if err := st.Stage(ctx, c.table, c.muts); err == nil {
			t.Errorf("%s: staged", name)
		}
	}
	if err := st.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := st.Stats(); got.Rows != 0 {
		t.Errorf("rows committed after refused batches: %+v", got)
	}
}
