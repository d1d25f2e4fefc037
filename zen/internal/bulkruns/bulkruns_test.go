package bulkruns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// merged returns what Merge emits for table name, as "key=value".
func merged(t *testing.T, r *Runs, name string) []string {
	t.Helper()
	var got []string
	err := r.Merge(context.Background(), name, func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func puts(kvs ...string) []zen.Mutation {
	var muts []zen.Mutation
	for i := 0; i < len(kvs); i += 2 {
		muts = append(muts, zen.Mutation{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])})
	}
	return muts
}

// TestMergeKeepsTheLatest stages rows of one table in several batches, with a bound so small
// that each batch becomes a run of its own (a key in several runs, and twice in one batch):
// Merge gives each key once, in key order, with the row staged last, and removes the runs.
func TestMergeKeepsTheLatest(t *testing.T) {
	ctx := context.Background()
	r, err := Open(t.TempDir(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, batch := range [][]zen.Mutation{
		puts("e", "1", "a", "1", "c", "1"),
		nil,
		puts("c", "2", "b", "2", "c", "2b"),
		puts("f", "3", "c", "3"),
	} {
		if err := r.Add(ctx, "edges", batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add(ctx, "objects", puts("x", "9")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"edges", "objects"}, r.Tables()); diff != "" {
		t.Errorf("tables (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a=1", "b=2", "c=3", "e=1", "f=3"}, merged(t, r, "edges")); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if runs, _ := filepath.Glob(filepath.Join(r.Dir(), "edges.run*")); len(runs) != 0 {
		t.Errorf("runs left after Merge: %v", runs)
	}
	if diff := cmp.Diff([]string{"objects"}, r.Tables()); diff != "" {
		t.Errorf("tables after merging edges (-want +got):\n%s", diff)
	}
	// Rows kept in memory (under the bound) merge with the runs, the latest winning.
	r.limit = 1 << 20
	if err := r.Add(ctx, "objects", puts("x", "10", "w", "1")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"w=1", "x=10"}, merged(t, r, "objects")); diff != "" {
		t.Errorf("objects merged (-want +got):\n%s", diff)
	}
}

// TestMergeInMemoryBatches: batches held in memory (under the bound) merge with each other in
// key order, a key's last row winning within a batch and across batches, and a batch that came
// unsorted is sorted first.
func TestMergeInMemoryBatches(t *testing.T) {
	ctx := context.Background()
	r, err := Open(t.TempDir(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, batch := range [][]zen.Mutation{
		puts("a", "1", "c", "1", "c", "1b"),
		puts("b", "2", "c", "2"),
		puts("c", "3", "c", "3b", "d", "3"),
		puts("z", "4", "y", "4", "z", "4b", "a", "4"),
	} {
		if err := r.Add(ctx, "edges", batch); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a=4", "b=2", "c=3b", "d=3", "y=4", "z=4b"}
	if diff := cmp.Diff(want, merged(t, r, "edges")); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}

// TestAddRefusesDeletes: a bulk load only puts; a delete is refused before anything is kept.
func TestAddRefusesDeletes(t *testing.T) {
	r, err := Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Add(context.Background(), "edges", []zen.Mutation{{Key: []byte("a"), Value: []byte("v")}, {Key: []byte("b"), Delete: true}})
	if err == nil {
		t.Fatal("a staged delete was taken")
	}
	if len(r.Tables()) != 0 {
		t.Errorf("tables %v staged by a refused batch", r.Tables())
	}
}

// TestAddRefusesBadKeysAndTables: a key the backend's check refuses, or a bad table name, stages
// nothing of the batch.
func TestAddRefusesBadKeysAndTables(t *testing.T) {
	noEmpty := func(k []byte) error {
		if len(k) == 0 {
			return errors.New("empty key")
		}
		return nil
	}
	r, err := Open(t.TempDir(), 0, noEmpty)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if err := r.Add(ctx, "edges", puts("a", "1", "", "2")); err == nil {
		t.Error("an empty key was staged")
	}
	if err := r.Add(ctx, "Bad-Name", puts("a", "1")); err == nil {
		t.Error("a bad table name was staged")
	}
	if len(r.Tables()) != 0 {
		t.Errorf("tables %v staged by refused batches", r.Tables())
	}
}

// TestDropRemovesTheRuns: a failed commit's Drop leaves nothing staged and no run on disk.
func TestDropRemovesTheRuns(t *testing.T) {
	r, err := Open(t.TempDir(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 3 {
		if err := r.Add(context.Background(), "edges", puts(fmt.Sprint(i), "v")); err != nil {
			t.Fatal(err)
		}
	}
	r.Drop()
	left, _ := filepath.Glob(filepath.Join(r.Dir(), "*.run*"))
	if len(left) != 0 || len(r.Tables()) != 0 {
		t.Errorf("after Drop: files %v, tables %v", left, r.Tables())
	}
}

// TestOpenRemovesAbandonedDirs: a directory whose lock nobody holds (its load was killed) is
// removed by the next Open in the same directory; open Runs' directory, and a directory
// without a lock file, are not.
func TestOpenRemovesAbandonedDirs(t *testing.T) {
	dir := t.TempDir()
	open, err := Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	killed, lock, err := lockedTempDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lock.Close() // what the kernel does when the process dies
	if err := os.WriteFile(filepath.Join(killed, "edges.run000000"), []byte("rows"), 0o644); err != nil {
		t.Fatal(err)
	}
	unlocked := filepath.Join(dir, "smartfeed-bulk-making")
	if err := os.Mkdir(unlocked, 0o755); err != nil {
		t.Fatal(err)
	}
	next, err := Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	for d, want := range map[string]bool{open.Dir(): true, killed: false, unlocked: true, next.Dir(): true} {
		_, err := os.Stat(d)
		if got := err == nil; got != want {
			t.Errorf("%s exists: %v, want %v (%v)", d, got, want, err)
		}
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(next.Dir()); !os.IsNotExist(err) {
		t.Errorf("%s still there after Close (%v)", next.Dir(), err)
	}
}

// TestWriteRecordReadBack: a record written is read back whole.
func TestWriteRecordReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	WriteRecord(w, []byte("key"), []byte(""))
	WriteRecord(w, []byte("k2"), []byte("value"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var got []string
	if err := mergeRuns([]string{path}, func(k, v []byte) error { got = append(got, string(k)+"="+string(v)); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"key=", "k2=value"}, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}
