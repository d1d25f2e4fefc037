package zenpebble

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/internal/bulkruns"
)

// DefaultStageBytes is the keys' and values' bytes Stage holds per table before it writes them
// to disk as a sorted run.
const DefaultStageBytes = bulkruns.DefaultBytes

// sstTarget is the bytes of rows (keys and values, before compression) a bulk load writes to
// one sstable before it starts the next: files of the size Pebble's compactions handle well.
const sstTarget = 256 << 20

// Stage is a zen.BulkSink for s, Pebble's counterpart of HBase's bulk load: give it to
// zen.Graph.NewBulk (zen.WithBulkSink). It sorts the rows it is given into runs on local disk,
// bounded in memory, and at Commit merges each table's runs (the row of a key staged last wins)
// into sstables that the database ingests: the rows skip the write-ahead log and the memtable,
// and land in the lowest level holding none of their keys (the bottom one for tables that were
// empty), so the load leaves nothing to compact. The files are synced before they are ingested,
// and the ingestion is atomic and durable when Commit returns.
//
// Its directory, made in dir, is locked while the Stage is open, and removed by Close (or by a
// later NewStage in the same dir, after a kill). Not safe for concurrent use.
type Stage struct {
	s     *Store
	runs  *bulkruns.Runs
	stats IngestStats
}

// IngestStats is what a Stage's commits did.
type IngestStats struct {
	Tables  int     `json:"tables"`
	Rows    int64   `json:"rows"`
	Files   int     `json:"files"`
	Bytes   int64   `json:"bytes"`    // of the sstables
	L0Bytes int64   `json:"l0_bytes"` // ingested into L0: they overlapped rows already there
	WriteS  float64 `json:"write_s"`  // merging the runs and writing the sstables
	IngestS float64 `json:"ingest_s"` // Pebble's ingestion
}

// NewStage returns a Stage of s whose files go in a new directory under dir ("": the system's
// temporary directory), holding up to memBytes of rows per table in memory (≤ 0:
// DefaultStageBytes). On an in-memory store (Open("")) the sstables are made in memory too.
func (s *Store) NewStage(dir string, memBytes int) (*Stage, error) {
	runs, err := bulkruns.Open(dir, memBytes, checkKey)
	if err != nil {
		return nil, err
	}
	return &Stage{s: s, runs: runs}, nil
}

// Dir is the directory holding the stage's files.
func (st *Stage) Dir() string { return st.runs.Dir() }

// Stats sums what the stage's commits did.
func (st *Stage) Stats() IngestStats { return st.stats }

// Stage implements zen.BulkSink.
func (st *Stage) Stage(ctx context.Context, table string, muts []zen.Mutation) error {
	return st.runs.Add(ctx, table, muts)
}

// Commit implements zen.BulkSink: it writes every row staged so far as sstables and ingests
// them; the stage is then empty. When it fails, the rows staged before it are dropped (a rerun
// of the load writes them again).
func (st *Stage) Commit(ctx context.Context) error {
	err := st.commit(ctx)
	if err != nil {
		st.runs.Drop()
	}
	return err
}

// commit writes and ingests what is staged; its sstables are gone when it returns.
func (st *Stage) commit(ctx context.Context) error {
	if err := st.s.enter(ctx); err != nil {
		return err
	}
	defer st.s.life.RUnlock()
	fs := st.s.dbFS
	dir := filepath.Join(st.runs.Dir(), "sst")
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bulk commit: %w", err)
	}
	defer removeFiles(fs, dir)
	start := time.Now()
	var paths []string
	stats := IngestStats{}
	for _, name := range st.runs.Tables() {
		tb, err := st.s.Table(ctx, name)
		if err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		w := &sstWriter{fs: fs, dir: dir, opts: st.s.sst, prefix: tb.(*Table).prefix, n: len(paths)}
		err = st.runs.Merge(ctx, name, w.add)
		if err == nil {
			err = w.finish()
		}
		paths = append(paths, w.paths...)
		if err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		stats.Tables++
		stats.Rows += w.rows
		stats.Bytes += w.bytes
	}
	stats.Files = len(paths)
	stats.WriteS = time.Since(start).Seconds()
	if len(paths) == 0 {
		return nil
	}
	start = time.Now()
	is, err := st.s.db.IngestWithStats(ctx, paths)
	if err != nil {
		return fmt.Errorf("bulk commit: ingest %d sstables: %w", len(paths), err)
	}
	stats.IngestS = time.Since(start).Seconds()
	stats.L0Bytes = int64(is.ApproxIngestedIntoL0Bytes)
	st.stats.Tables += stats.Tables
	st.stats.Rows += stats.Rows
	st.stats.Files += stats.Files
	st.stats.Bytes += stats.Bytes
	st.stats.L0Bytes += stats.L0Bytes
	st.stats.WriteS += stats.WriteS
	st.stats.IngestS += stats.IngestS
	return nil
}

// Close removes the stage's directory and forgets what it holds.
func (st *Stage) Close() error { return st.runs.Close() }

// removeFiles removes dir and the files in it from fs (ingested files were linked, or copied,
// into the database).
func removeFiles(fs vfs.FS, dir string) {
	names, _ := fs.List(dir)
	for _, n := range names {
		_ = fs.Remove(fs.PathJoin(dir, n))
	}
	_ = fs.Remove(dir)
}

// sstWriter writes one table's merged rows, in key order, as sstables of about sstTarget bytes
// of rows each, the table's prefix before every key.
type sstWriter struct {
	fs     vfs.FS
	dir    string
	opts   sstable.WriterOptions
	prefix []byte
	n      int // files written before, for their names

	w     *sstable.Writer
	inW   int // bytes of rows in w
	key   []byte
	paths []string
	rows  int64
	bytes int64
}

// add writes one row (zen key k, value v).
func (w *sstWriter) add(k, v []byte) error {
	if w.w == nil {
		path := w.fs.PathJoin(w.dir, fmt.Sprintf("%06d.sst", w.n+len(w.paths)))
		f, err := w.fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		w.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), w.opts)
		w.paths = append(w.paths, path)
	}
	w.key = append(append(w.key[:0], w.prefix...), k...)
	if err := w.w.Set(w.key, v); err != nil {
		return err
	}
	w.rows++
	if w.inW += len(w.key) + len(v); w.inW >= sstTarget {
		return w.finish()
	}
	return nil
}

// finish closes the sstable being written, if any.
func (w *sstWriter) finish() error {
	if w.w == nil {
		return nil
	}
	err := w.w.Close()
	if err == nil {
		var md *sstable.WriterMetadata
		if md, err = w.w.Metadata(); err == nil {
			w.bytes += int64(md.Size)
		}
	}
	w.w, w.inW = nil, 0
	return err
}
