package zenhbase

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
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
)

// HBase's own bulk load, for zen.Bulk: the rows of a large load reach the regions as HFiles,
// without the region servers' write path. Stage (a zen.BulkSink) sorts the rows it is given
// into runs on local disk, bounded in memory; Commit merges each table's runs into one sorted
// file of cells, keeping the last row of each key, and has a LoadFunc turn the files into
// HFiles split at the regions' boundaries and move them into the tables (scripts/hbase-
// bulkload.sh: HBase's StoreFileWriter and BulkLoadHFiles, in Java).

// LoadFunc loads the sorted cell files Stage.Commit wrote under dir (one TABLE.rows per HBase
// table: records of a 4-byte big-endian key length, the key, a 4-byte big-endian value length,
// the cell's value, sorted by key, each key once) into their tables on the HBase to names, and
// returns when the rows are readable.
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
const DefaultStageBytes = 256 << 20

// Stage is a zen.BulkSink for s: give it to zen.Graph.NewBulk (zen.WithBulkSink). It keeps its
// runs and merged files under its own directory, made in dir, and removes it when Commit ends
// (or on Close). Not safe for concurrent use (zen.Bulk never calls it concurrently).
type Stage struct {
	s      *Store
	dir    string
	load   LoadFunc
	limit  int
	tables map[string]*stagedTable
	runs   int
	stats  LoadStats
}

// stagedTable is one table's rows in memory and its runs on disk.
type stagedTable struct {
	rows  []zen.Mutation
	bytes int
	runs  []string
}

// NewStage returns a Stage of s whose files go in a new directory under dir ("": the system's
// temporary directory), loaded by load, holding up to memBytes of rows per table in memory
// (≤ 0: DefaultStageBytes).
func (s *Store) NewStage(dir string, load LoadFunc, memBytes int) (*Stage, error) {
	if load == nil {
		return nil, errors.New("bulk stage: no load function")
	}
	d, err := os.MkdirTemp(dir, "smartfeed-bulk-")
	if err != nil {
		return nil, fmt.Errorf("bulk stage: %w", err)
	}
	if memBytes <= 0 {
		memBytes = DefaultStageBytes
	}
	return &Stage{s: s, dir: d, load: load, limit: memBytes, tables: map[string]*stagedTable{}}, nil
}

// Dir is the directory holding the stage's files.
func (st *Stage) Dir() string { return st.dir }

// Stats sums what the stage's loads reported.
func (st *Stage) Stats() LoadStats { return st.stats }

// Stage implements zen.BulkSink.
func (st *Stage) Stage(ctx context.Context, table string, muts []zen.Mutation) error {
	if err := zen.CheckTableName(table); err != nil {
		return fmt.Errorf("bulk stage: %w", err)
	}
	t := st.tables[table]
	if t == nil {
		t = &stagedTable{}
		st.tables[table] = t
	}
	for i, m := range muts {
		if m.Delete {
			return fmt.Errorf("bulk stage %s: mutation %d deletes: a bulk load only puts", table, i)
		}
		if err := checkKey(m.Key); err != nil {
			return fmt.Errorf("bulk stage %s: mutation %d: %w", table, i, err)
		}
		t.rows = append(t.rows, m)
		t.bytes += len(m.Key) + len(m.Value) + 16
	}
	if t.bytes >= st.limit {
		return st.spill(ctx, table, t)
	}
	return nil
}

// spill writes t's rows as a sorted run, the last row of each key kept.
func (st *Stage) spill(ctx context.Context, table string, t *stagedTable) error {
	if len(t.rows) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	slices.SortStableFunc(t.rows, func(a, b zen.Mutation) int { return bytes.Compare(a.Key, b.Key) })
	path := filepath.Join(st.dir, fmt.Sprintf("%s.run%06d", table, st.runs))
	st.runs++
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bulk stage %s: %w", table, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i, m := range t.rows {
		if i+1 < len(t.rows) && bytes.Equal(m.Key, t.rows[i+1].Key) {
			continue // a later row of the key wins
		}
		writeRecord(w, m.Key, m.Value)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("bulk stage %s: write %s: %w", table, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bulk stage %s: %w", table, err)
	}
	t.runs = append(t.runs, path)
	t.rows, t.bytes = nil, 0
	return nil
}

// Commit implements zen.BulkSink: it merges each table's runs into its HBase table's cell file
// and loads them all; the stage is then empty, and its directory gone.
func (st *Stage) Commit(ctx context.Context) error {
	defer st.Close()
	names := make([]string, 0, len(st.tables))
	for name := range st.tables {
		names = append(names, name)
	}
	slices.Sort(names)
	load := filepath.Join(st.dir, "load")
	if err := os.Mkdir(load, 0o755); err != nil {
		return fmt.Errorf("bulk commit: %w", err)
	}
	for _, name := range names {
		t := st.tables[name]
		if err := st.spill(ctx, name, t); err != nil {
			return err
		}
		if len(t.runs) == 0 {
			continue
		}
		// The table must exist, pre-split as the store makes it, before its regions are read.
		if _, err := st.s.Table(ctx, name); err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		out := filepath.Join(load, st.s.HBaseName(name)+".rows")
		if err := mergeRuns(t.runs, out); err != nil {
			return fmt.Errorf("bulk commit %s: %w", name, err)
		}
		for _, r := range t.runs {
			_ = os.Remove(r)
		}
	}
	clear(st.tables)
	znode := st.s.opts.ZookeeperRoot
	if znode == "" {
		znode = "/hbase"
	}
	ls, err := st.load(ctx, load, LoadTarget{ZK: st.s.zk, ZNode: znode, Family: st.s.opts.Family, Qualifier: qualifier})
	if err != nil {
		return err
	}
	st.stats.Tables += ls.Tables
	st.stats.Rows += ls.Rows
	st.stats.HFiles += ls.HFiles
	st.stats.Bytes += ls.Bytes
	st.stats.WriteS += ls.WriteS
	st.stats.LoadS += ls.LoadS
	return nil
}

// Close removes the stage's directory and forgets what it holds.
func (st *Stage) Close() error {
	clear(st.tables)
	return os.RemoveAll(st.dir)
}

// writeRecord appends one record of a run or cell file (the value as zen gave it in a run;
// encodeValue of it in a cell file, which mergeRuns writes).
func writeRecord(w *bufio.Writer, k, v []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(k)))
	w.Write(n[:])
	w.Write(k)
	binary.BigEndian.PutUint32(n[:], uint32(len(v)))
	w.Write(n[:])
	w.Write(v)
}

// runReader reads one run's records in order.
type runReader struct {
	r    *bufio.Reader
	f    *os.File
	idx  int // the run's position: a later run's row of a key wins
	k, v []byte
}

// next reads the following record; io.EOF at the run's end.
func (rr *runReader) next() error {
	var n [4]byte
	if _, err := io.ReadFull(rr.r, n[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return err
	}
	rr.k = make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(rr.r, rr.k); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	if _, err := io.ReadFull(rr.r, n[:]); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	rr.v = make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(rr.r, rr.v); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	return nil
}

// runHeap orders the runs' current records by key, a later run first among equal keys.
type runHeap []*runReader

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].k, h[j].k); c != 0 {
		return c < 0
	}
	return h[i].idx > h[j].idx
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*runReader)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeRuns merges the sorted runs into one cell file at out: each key once, with the value of
// the latest run that holds it, encoded as the store writes cells.
func mergeRuns(runs []string, out string) (err error) {
	h := make(runHeap, 0, len(runs))
	defer func() {
		for _, rr := range h {
			rr.f.Close()
		}
	}()
	for i, path := range runs {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		rr := &runReader{r: bufio.NewReaderSize(f, 256<<10), f: f, idx: i}
		switch err := rr.next(); {
		case errors.Is(err, io.EOF):
			f.Close()
			continue
		case err != nil:
			f.Close()
			return err
		}
		h = append(h, rr)
	}
	heap.Init(&h)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var last []byte
	for h.Len() > 0 {
		top := h[0]
		if last == nil || !bytes.Equal(top.k, last) {
			writeRecord(w, top.k, encodeValue(top.v))
			last = top.k
		}
		switch err := top.next(); {
		case errors.Is(err, io.EOF):
			top.f.Close()
			heap.Pop(&h)
		case err != nil:
			return err
		default:
			heap.Fix(&h, 0)
		}
	}
	return w.Flush()
}
