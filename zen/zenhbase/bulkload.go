package zenhbase

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/internal/bulkruns"
)

// HBase's own bulk load, for zen.Bulk: the rows of a large load reach the regions as HFiles,
// without the region servers' write path. Stage (a zen.BulkSink) sorts the rows it is given
// into runs on local disk, bounded in memory; Commit merges each table's runs into one sorted
// file of cells, keeping the last row of each key, and has a LoadFunc turn the files into
// HFiles split at the regions' boundaries and move them into the tables (scripts/hbase-
// bulkload.sh: HBase's StoreFileWriter and BulkLoadHFiles, in Java).

// LoadFunc loads the sorted cell files Stage.Commit wrote under dir into their tables on the
// HBase to names, and returns when the rows are readable. Each HBase table's cells are in
// TABLE.NNNNNN.rows (NNNNNN from 000000 up, of about cellChunk bytes each, in key order): records
// of a 4-byte big-endian key length, the key, a 4-byte big-endian value length, the cell's
// value, sorted by key, each key once. A LoadFunc may remove each file once it has read it, so
// that the load needs little more disk than its HFiles.
type LoadFunc func(ctx context.Context, dir string, to LoadTarget) (LoadStats, error)

// LoadTarget names the HBase a Stage loads into and where its cells go.
type LoadTarget struct {
	ZK, ZNode, Family, Qualifier string
}

// LoadStats is what a LoadFunc reports.
type LoadStats struct {
	Tables int     `json:"tables"`
	Rows   int64   `json:"rows"`
	HFiles int     `json:"hfiles"`
	Bytes  int64   `json:"bytes"`
	WriteS float64 `json:"write_s"` // writing the HFiles
	LoadS  float64 `json:"load_s"`  // moving them into the tables
}

// CommandLoad is a LoadFunc that runs name with args and "--zk Q --znode Z --family F
// --qualifier Q --dir DIR" (scripts/hbase-bulkload.sh's flags), and reads its LoadStats from
// the last line of its standard output (the script prints one JSON line). Its standard error
// goes to stderr.
func CommandLoad(stderr io.Writer, name string, args ...string) LoadFunc {
	return func(ctx context.Context, dir string, to LoadTarget) (LoadStats, error) {
		var out bytes.Buffer
		argv := append(slices.Clone(args), "--zk", to.ZK, "--znode", to.ZNode, "--family", to.Family, "--qualifier", to.Qualifier, "--dir", dir)
		cmd := exec.CommandContext(ctx, name, argv...)
		cmd.Stdout, cmd.Stderr = &out, stderr
		if err := cmd.Run(); err != nil {
			return LoadStats{}, fmt.Errorf("bulk load: %s: %w", name, err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var st LoadStats
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
			return LoadStats{}, fmt.Errorf("bulk load: %s printed %q: %w", name, out.String(), err)
		}
		return st, nil
	}
}

// DefaultStageBytes is the keys' and values' bytes Stage holds per table before it writes them
// to disk as a sorted run.
const DefaultStageBytes = bulkruns.DefaultBytes

// Stage is a zen.BulkSink for s: give it to zen.Graph.NewBulk (zen.WithBulkSink). It keeps its
// runs and merged files under its own directory, made in dir: each Commit removes the files it
// loaded (or, when it fails, every row staged before it), and Close removes the directory. The
// directory is locked while the Stage is open, so a later NewStage in the same dir removes the
// directory of a load that was killed. Not safe for concurrent use (zen.Bulk never calls it
// concurrently).
type Stage struct {
	s     *Store
	runs  *bulkruns.Runs
	load  LoadFunc
	stats LoadStats
}

// NewStage returns a Stage of s whose files go in a new directory under dir ("": the system's
// temporary directory), loaded by load, holding up to memBytes of rows per table in memory
// (≤ 0: DefaultStageBytes).
func (s *Store) NewStage(dir string, load LoadFunc, memBytes int) (*Stage, error) {
	if load == nil {
		return nil, errors.New("bulk stage: no load function")
	}
	runs, err := bulkruns.Open(dir, memBytes, checkKey)
	if err != nil {
		return nil, err
	}
	return &Stage{s: s, runs: runs, load: load}, nil
}

// Dir is the directory holding the stage's files.
func (st *Stage) Dir() string { return st.runs.Dir() }

// Stats sums what the stage's loads reported.
func (st *Stage) Stats() LoadStats { return st.stats }

// Stage implements zen.BulkSink.
func (st *Stage) Stage(ctx context.Context, table string, muts []zen.Mutation) error {
	return st.runs.Add(ctx, table, muts)
}

// Commit implements zen.BulkSink: it merges each table's runs into its HBase table's cell file
// and loads them all; the stage is then empty. When it fails, the rows staged before it are
// dropped (a rerun of the load writes them again).
func (st *Stage) Commit(ctx context.Context) error {
	err := st.commit(ctx)
	if err != nil {
		st.runs.Drop()
	}
	return err
}

// commit merges and loads what is staged; its files are removed when it returns.
func (st *Stage) commit(ctx context.Context) error {
	load := filepath.Join(st.runs.Dir(), "load")
	defer os.RemoveAll(load)
	if err := os.Mkdir(load, 0o755); err != nil {
		return fmt.Errorf("bulk commit: %w", err)
	}
	var rows int64
	for _, name := range st.runs.Tables() {
		// The table must exist, pre-split as the store makes it, before its regions are read.
		if _, err := st.s.Table(ctx, name); err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		n, err := st.writeCells(ctx, name, filepath.Join(load, st.s.HBaseName(name)))
		if err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		rows += n
	}
	znode := st.s.opts.ZookeeperRoot
	if znode == "" {
		znode = "/hbase"
	}
	ls, err := st.load(ctx, load, LoadTarget{ZK: st.s.zk, ZNode: znode, Family: st.s.opts.Family, Qualifier: qualifier})
	if err != nil {
		return err
	}
	if ls.Rows != rows {
		return fmt.Errorf("bulk commit: the load command loaded %d rows of the %d staged", ls.Rows, rows)
	}
	st.stats.Tables += ls.Tables
	st.stats.Rows += ls.Rows
	st.stats.HFiles += ls.HFiles
	st.stats.Bytes += ls.Bytes
	st.stats.WriteS += ls.WriteS
	st.stats.LoadS += ls.LoadS
	return nil
}

// cellChunk is the bytes of cells Stage.Commit writes to one cell file before it starts the
// next (a variable for the tests).
var cellChunk int64 = 1 << 30

// writeCells merges table name's runs into cell files prefix.NNNNNN.rows of about cellChunk
// bytes each, and returns how many cells it wrote: each key once, with the row staged last,
// its value encoded as the store writes cells. The runs give their disk blocks back as they are read (bulkruns), so the merge needs
// little more disk than the rows.
func (st *Stage) writeCells(ctx context.Context, name, prefix string) (rows int64, err error) {
	var cw cellWriter
	err = st.runs.Merge(ctx, name, func(k, v []byte) error {
		return cw.add(prefix, k, encodeValue(v))
	})
	if cerr := cw.finish(); err == nil {
		err = cerr
	}
	return cw.rows, err
}

// cellWriter writes the cell files of one table.
type cellWriter struct {
	f    *os.File
	w    *bufio.Writer
	n    int   // files started
	b    int64 // bytes in the open one
	rows int64 // cells written
}

// add writes one cell, starting a new file when the open one has cellChunk bytes.
func (c *cellWriter) add(prefix string, k, v []byte) error {
	if c.f != nil && c.b >= cellChunk {
		if err := c.finish(); err != nil {
			return err
		}
	}
	if c.f == nil {
		f, err := os.Create(fmt.Sprintf("%s.%06d.rows", prefix, c.n))
		if err != nil {
			return err
		}
		c.f, c.n, c.b = f, c.n+1, 0
		if c.w == nil {
			c.w = bufio.NewWriterSize(f, 1<<20)
		} else {
			c.w.Reset(f)
		}
	}
	bulkruns.WriteRecord(c.w, k, v)
	c.b += int64(8 + len(k) + len(v))
	c.rows++
	return nil
}

// finish flushes and closes the open file, if any.
func (c *cellWriter) finish() error {
	if c.f == nil {
		return nil
	}
	err := c.w.Flush()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	return err
}

// Close removes the stage's directory and forgets what it holds.
func (st *Stage) Close() error { return st.runs.Close() }
