// Package bulkruns is the part of a bulk load's zen.BulkSink that the backends share: it keeps
// the rows of each table in memory up to a bound, writes them to local disk as sorted runs, and
// merges a table's runs in key order, each key once with the row staged last. zenhbase writes
// the merged rows as HFiles for HBase's bulk load; zenpebble as sstables it ingests.
package bulkruns

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/smartfeed/smartfeed/zen"
)

// DefaultBytes is the keys' and values' bytes a table's rows may take in memory before they are
// written out as a sorted run.
const DefaultBytes = 256 << 20

// Runs holds the staged rows of a load, table by table, in a directory of its own. Not safe
// for concurrent use.
type Runs struct {
	dir    string
	lock   *os.File // flock held while Runs is open
	limit  int
	check  func(key []byte) error // the backend's rule for row keys
	tables map[string]*table
	n      int // runs written, for their names
}

// table is one table's rows in memory, as the sorted batches they came in, and its runs on
// disk.
type table struct {
	batches [][]zen.Mutation
	bytes   int
	runs    []string
}

// Open returns Runs writing its runs in a new directory under dir ("": the system's temporary
// directory), holding up to limit bytes of rows per table in memory (≤ 0: DefaultBytes), whose
// Add refuses a row key check refuses. It first removes the directories under dir that loads
// killed before they could (see Close).
func Open(dir string, limit int, check func(key []byte) error) (*Runs, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if limit <= 0 {
		limit = DefaultBytes
	}
	removeAbandoned(dir)
	d, lock, err := lockedTempDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bulk stage: %w", err)
	}
	return &Runs{dir: d, lock: lock, limit: limit, check: check, tables: map[string]*table{}}, nil
}

// Dir is the directory holding the runs; a backend may write its own files there too.
func (r *Runs) Dir() string { return r.dir }

// Close removes the directory and forgets what it holds.
func (r *Runs) Close() error {
	clear(r.tables)
	err := os.RemoveAll(r.dir)
	if r.lock != nil {
		r.lock.Close()
		r.lock = nil
	}
	return err
}

// Add stages muts (puts only) of table name, after the rows staged before: for a key staged
// twice, the later row wins. A bad table name, a delete or a key the backend refuses stages
// nothing of muts. Runs keeps muts, not a copy. A batch sorted by key (as zen.Bulk hands them)
// is taken as it is; another is sorted first.
func (r *Runs) Add(ctx context.Context, name string, muts []zen.Mutation) error {
	if err := zen.CheckTableName(name); err != nil {
		return fmt.Errorf("bulk stage: %w", err)
	}
	sorted := true
	for i, m := range muts {
		if m.Delete {
			return fmt.Errorf("bulk stage %s: mutation %d deletes: a bulk load only puts", name, i)
		}
		if r.check != nil {
			if err := r.check(m.Key); err != nil {
				return fmt.Errorf("bulk stage %s: mutation %d: %w", name, i, err)
			}
		}
		if i > 0 && bytes.Compare(muts[i-1].Key, m.Key) > 0 {
			sorted = false
		}
	}
	if len(muts) == 0 {
		return nil
	}
	if !sorted {
		zen.SortMutations(muts)
	}
	t := r.tables[name]
	if t == nil {
		t = &table{}
		r.tables[name] = t
	}
	t.batches = append(t.batches, muts)
	for _, m := range muts {
		t.bytes += len(m.Key) + len(m.Value) + 16
	}
	if t.bytes >= r.limit {
		return r.spill(ctx, name, t)
	}
	return nil
}

// Tables returns the names of the tables with rows staged, sorted.
func (r *Runs) Tables() []string {
	names := make([]string, 0, len(r.tables))
	for name, t := range r.tables {
		if len(t.batches) > 0 || len(t.runs) > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Merge calls emit with every key staged for table name once, in key order, with the row
// staged last, and forgets the table's rows (its runs removed) when it returns. The slices emit
// gets are reused after it returns: emit copies what it keeps.
func (r *Runs) Merge(ctx context.Context, name string, emit func(k, v []byte) error) error {
	t := r.tables[name]
	if t == nil {
		return nil
	}
	defer func() {
		removeAll(t.runs)
		delete(r.tables, name)
	}()
	if err := r.spill(ctx, name, t); err != nil {
		return err
	}
	return mergeRuns(t.runs, emit)
}

// Drop forgets every staged row and removes the runs holding them.
func (r *Runs) Drop() {
	for _, t := range r.tables {
		removeAll(t.runs)
	}
	clear(r.tables)
}

func removeAll(paths []string) {
	for _, p := range paths {
		_ = os.Remove(p)
	}
}

// spill writes t's batches as one sorted run, merged, the last row of each key kept.
func (r *Runs) spill(ctx context.Context, name string, t *table) error {
	if len(t.batches) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	path := filepath.Join(r.dir, fmt.Sprintf("%s.run%06d", name, r.n))
	r.n++
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bulk stage %s: %w", name, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	mergeBatches(t.batches, func(m zen.Mutation) { WriteRecord(w, m.Key, m.Value) })
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("bulk stage %s: write %s: %w", name, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bulk stage %s: %w", name, err)
	}
	t.runs = append(t.runs, path)
	t.batches, t.bytes = nil, 0
	return nil
}

// batchCursor walks one sorted batch, showing the last row of each key.
type batchCursor struct {
	rows []zen.Mutation
	i    int // the row shown: the last of its key
	idx  int // the batch's position: a later batch's row of a key wins
}

// settle moves i to the last row of the key at i.
func (c *batchCursor) settle() {
	for c.i+1 < len(c.rows) && bytes.Equal(c.rows[c.i].Key, c.rows[c.i+1].Key) {
		c.i++
	}
}

// batchHeap orders the batches' shown rows by key, a later batch first among equal keys.
type batchHeap []*batchCursor

func (h batchHeap) Len() int { return len(h) }
func (h batchHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].rows[h[i].i].Key, h[j].rows[h[j].i].Key); c != 0 {
		return c < 0
	}
	return h[i].idx > h[j].idx
}
func (h batchHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *batchHeap) Push(x any)   { *h = append(*h, x.(*batchCursor)) }
func (h *batchHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeBatches calls emit with each key of the sorted batches once, in key order, with the row
// staged last: n rows of k batches in O(n log k), where sorting them all would take O(n log n).
func mergeBatches(batches [][]zen.Mutation, emit func(zen.Mutation)) {
	h := make(batchHeap, 0, len(batches))
	for i, b := range batches {
		if len(b) > 0 {
			c := &batchCursor{rows: b, idx: i}
			c.settle()
			h = append(h, c)
		}
	}
	heap.Init(&h)
	var last []byte
	for h.Len() > 0 {
		top := h[0]
		m := top.rows[top.i]
		if last == nil || !bytes.Equal(m.Key, last) {
			emit(m)
			last = m.Key
		}
		if top.i++; top.i == len(top.rows) {
			heap.Pop(&h)
			continue
		}
		top.settle()
		heap.Fix(&h, 0)
	}
}

// WriteRecord appends one record: a 4-byte big-endian key length, the key, a 4-byte big-endian
// value length, the value. Runs are files of records sorted by key.
func WriteRecord(w *bufio.Writer, k, v []byte) {
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
	rr.k = grow(rr.k, int(binary.BigEndian.Uint32(n[:])))
	if _, err := io.ReadFull(rr.r, rr.k); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	if _, err := io.ReadFull(rr.r, n[:]); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	rr.v = grow(rr.v, int(binary.BigEndian.Uint32(n[:])))
	if _, err := io.ReadFull(rr.r, rr.v); err != nil {
		return fmt.Errorf("run %s: %w", rr.f.Name(), err)
	}
	return nil
}

// grow returns b resized to n bytes, its memory reused when it is large enough.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, max(n, 64))
	}
	return b[:n]
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

// mergeRuns calls emit with each key of the sorted runs once, in key order, with the value of
// the latest run that holds it. The slices emit gets are reused after it returns.
func mergeRuns(runs []string, emit func(k, v []byte) error) error {
	h := make(runHeap, 0, len(runs))
	defer func() {
		for _, rr := range h {
			rr.f.Close()
		}
	}()
	for i, path := range runs {
		// Opened for writing too: releasingReader gives the blocks it has read back.
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		rr := &runReader{r: bufio.NewReaderSize(&releasingReader{f: f}, 256<<10), f: f, idx: i}
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
	var last []byte
	seen := false
	for h.Len() > 0 {
		top := h[0]
		if !seen || !bytes.Equal(top.k, last) {
			if err := emit(top.k, top.v); err != nil {
				return err
			}
			last, seen = append(last[:0], top.k...), true
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
	return nil
}
