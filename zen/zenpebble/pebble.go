// Package zenpebble is the embedded zen.Store: every named table is a key prefix in one Pebble
// database, the single-machine default backend.
//
// Layout: the Pebble key of row k in table "name" is "name" 0x00 k. Table names are short
// lowercase words (no 0x00), so the prefixes never nest and a table is the Pebble range
// ["name\x00", "name\x01").
//
// Atomicity and concurrency: Apply is one Pebble Batch (atomic, all or nothing). Pebble has no
// transactions, so CheckAndSet and Increment are a read followed by a write under a striped
// mutex chosen by hashing the start of the row key (stripePrefix). That is linearizable because every writer of a row holds
// its stripe while it reads and writes: CheckAndSet and Increment hold one stripe, and Apply
// holds the stripes of all of its rows (taken in ascending stripe order, so two writers never
// wait on each other in a cycle) until its batch is applied. A batch Pebble has applied is
// visible to every later read, so the value a CheckAndSet compares against is the latest one and
// nothing can slip in between its read and its write. The stripes are released once the batch is
// visible, before its WAL fsync completes (ApplyNoSyncWait, then SyncWait outside the locks): the
// next writer of a row needs the previous write visible, not durable, and the log is sequential,
// so no write is ever durable without the writes it read. Readers (Get, Scan) take no lock: they
// see the database as of some applied batch (possibly one whose fsync is still under way, as in
// Pebble itself).
//
// Durability: by default every write (Apply, CheckAndSet, Increment) is synced to the write-ahead
// log before it returns (pebble.Sync), so an acknowledged write survives a machine crash. With
// WithNoSync a write survives a process crash (the log is in the OS page cache) but a power
// loss may drop the last writes; Pebble still never exposes a torn batch after recovery.
package zenpebble

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// stripes is the number of row-lock stripes. It bounds how many CheckAndSet/Increment calls on
// different rows can run at once; collisions only cost waiting, never correctness.
const stripes = 16384

// stripePrefix is how much of a row key picks its stripe: the 8-byte ID that starts the zen
// row keys (a user's pool, feed and state rows; an object's edges). A call on one entity's rows
// then takes one stripe instead of one per row, so that it rarely meets the stripes a large
// batch of other entities' rows holds (a generator's claim of a user's pool entries beside the
// fanout's batches of a thousand receivers). A row's stripe depends on its key alone, so every
// writer of the row still takes the same one.
const stripePrefix = 8

// scanCheckEvery is how many rows a Scan reads between two looks at its context.
const scanCheckEvery = 256

// Option configures Open.
type Option func(*config)

type config struct {
	sync   bool
	logger *zap.Logger
	cache  int64
	mem    uint64
	l0     int
	fs     vfs.FS
	flush  time.Duration
	// compactions is the bound shared with other stores (WithCompactions); nil: Pebble's own.
	compactions *Compactions
	// compactionNice lowers the compactions' threads (WithCompactionNice); 0: not.
	compactionNice int
}

// WithNoSync makes writes return once they are in the write-ahead log without waiting for
// fsync: faster, but a machine crash may lose the last acknowledged writes.
func WithNoSync() Option { return func(c *config) { c.sync = false } }

// WithLogger sends Pebble's own log lines to l (default: discarded).
func WithLogger(l *zap.Logger) Option { return func(c *config) { c.logger = l } }

// WithFS opens the database in dir of fs instead of the operating system's file system (tests:
// vfs.NewCrashableMem, whose CrashClone is what a machine crash would leave).
func WithFS(fs vfs.FS) Option { return func(c *config) { c.fs = fs } }

// WithCacheSize sets Pebble's block cache size in bytes (default: Pebble's, 8 MiB).
func WithCacheSize(n int64) Option { return func(c *config) { c.cache = n } }

// WithMemTableSize sets the size of Pebble's memtable in bytes (default: Pebble's, 4 MiB).
// Every flush of a memtable becomes an L0 file that compaction merges into the base level; when
// writes land all over the key space (a fanout writes to every receiver's pools), each L0 file
// overlaps the whole base level, so small memtables make compaction rewrite it often. Up to
// two memtables may be held at once.
func WithMemTableSize(n uint64) Option { return func(c *config) { c.mem = n } }

// WithL0CompactionThreshold sets how many L0 sublevels Pebble lets accumulate before it compacts
// L0 into the base level (default: Pebble's, 4). Under the fanout's scattered writes every L0
// file overlaps the whole base level, so each such compaction rewrites it; a higher threshold
// rewrites it less often, for a few more sublevels to merge on reads.
func WithL0CompactionThreshold(n int) Option { return func(c *config) { c.l0 = n } }

// WithCompactions has the store's compactions share c's bound with the other stores given it
// (Compactions); a store that falls behind may run two at once.
func WithCompactions(c *Compactions) Option { return func(cfg *config) { cfg.compactions = c } }

// WithCompactionNice runs the store's compactions below L0 at a nice value delta above the
// process's (internal/lowprio), as RocksDB lowers its compaction threads: the kernel then gives
// a core to the process's requests first. Each compaction runs on a goroutine of its own, which
// locks itself to its thread and lowers it as the compaction begins, and ends with it.
// Compactions out of L0 keep the process's priority: they are what keeps the memtable flushes,
// and so the writes, from stalling. 0, the default, lowers nothing.
func WithCompactionNice(delta int) Option {
	return func(c *config) { c.compactionNice = max(0, delta) }
}

// WithFlushAfter flushes the memtable once the last flush ended at least d ago (checked every
// d/4), if the log holds at least flushMinBytes not yet flushed. Reads step over the deleted
// keys of a memtable one by one, as skiplist nodes, until a flush turns them into sstable
// entries (one per key, read in blocks) and compaction drops them; under a light write load a
// 64 MiB memtable keeps them for minutes. A flush writes out the memtable, a prefix of the log
// in order, so a crash still leaves a prefix of the writes (lazy ones included). 0, the
// default, flushes only when the memtable is full.
func WithFlushAfter(d time.Duration) Option { return func(c *config) { c.flush = d } }

// flushMinBytes is the least unflushed log WithFlushAfter flushes: a smaller memtable costs its
// readers little, and its flush would be an L0 file of a few rows.
const flushMinBytes = 1 << 20

// Store is a zen.Store over one Pebble database. It is safe for concurrent use.
type Store struct {
	db    *pebble.DB
	wo    *pebble.WriteOptions
	seed  maphash.Seed
	locks [stripes]sync.Mutex

	// life is read-held by every table call and write-held by Close, so no call ever reaches
	// a closed Pebble DB (which panics).
	life   sync.RWMutex
	closed bool

	mu     sync.Mutex
	tables map[string]*Table

	// stop ends the background loops (holdStates, and flushOld under WithFlushAfter); held
	// and done are closed when each has ended. lastFlush is when the last memtable flush
	// ended (unix nanoseconds; read under WithFlushAfter).
	lastFlush atomic.Int64
	// stalls counts Pebble's write stalls (writes held because memtables wait to be flushed or
	// L0 is too deep), stallNanos their total time, stallAt when the current one began.
	stalls, stallNanos, stallAt atomic.Int64
	// lowered counts the compactions run at a lower priority (WithCompactionNice).
	lowered  atomic.Int64
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	held     chan struct{}
	// holds counts the references holdStates has taken, each counted once its iterator is
	// open: a test waits on it to know the holder has seen a state.
	holds atomic.Int64

	// afterRead, when set (by tests only), runs between the read and the write of CheckAndSet
	// and Increment, to widen the window a missing lock would leave open.
	afterRead func()

	// fs and dir locate the clean-close marker (cleanMarker); unclean is whether Open found the
	// database without it.
	fs      vfs.FS
	dir     string
	unclean bool

	// dbFS is the database's file system, and sst the options of the sstables a bulk load
	// writes for it to ingest (Stage).
	dbFS vfs.FS
	sst  sstable.WriterOptions
}

// cleanMarker is the file Close leaves in the database's directory once the database is
// closed, and Open removes: a database found without it was last left by a process that did not
// Close it (a crash of the process or of the machine).
const cleanMarker = "SMARTFEED-CLOSED-CLEANLY"

// Unclean reports whether the process that used the database before this Open did not Close it:
// it crashed, or its machine did. Writes it made Lazily may be lost then (the latest ones, a
// suffix of its log), so a caller that wrote lazily what it must not lose the effect of can
// make amends before it serves. A new database is clean.
func (s *Store) Unclean() bool { return s.unclean }

// ErrClosed is returned by every call on a closed Store.
var ErrClosed = errors.New("zenpebble: store closed")

// enter starts a table call; it must be paired with s.life.RUnlock when it returns nil.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

var _ zen.Store = (*Store)(nil)

// Open opens (creating if needed) the Pebble database in dir. An empty dir gives a fresh
// in-memory database (vfs.NewMem), for tests.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := config{sync: true, logger: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	po := &pebble.Options{Logger: zapLogger{cfg.logger.Sugar()}}
	// Bloom filters (10 bits a key, ~1% false positives) on every level: most point reads on
	// the hot paths are of rows that do not exist yet (a fanout's (user, pin) index rows, chunk
	// claims), and without a filter each such Get searches every level's index blocks. Pebble
	// has none by default.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	if dir == "" {
		po.FS = vfs.NewMem()
	}
	if cfg.fs != nil {
		po.FS = cfg.fs
	}
	if po.FS == nil {
		po.FS = vfs.Default
	}
	if cfg.mem > 0 {
		po.MemTableSize = cfg.mem
	}
	if cfg.l0 > 0 {
		po.L0CompactionThreshold = cfg.l0
	}
	if cfg.compactions != nil {
		po.Experimental.CompactionScheduler = cfg.compactions.forStore()
		po.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	}
	s := &Store{wo: pebble.NoSync, seed: maphash.MakeSeed(), tables: map[string]*Table{}}
	if cfg.flush > 0 {
		s.lastFlush.Store(time.Now().UnixNano())
	}
	po.EventListener = s.events(cfg.logger, cfg.compactionNice)
	if cfg.cache > 0 {
		c := pebble.NewCache(cfg.cache)
		defer c.Unref()
		po.Cache = c
	}
	fresh := true
	if dir != "" {
		if names, err := po.FS.List(dir); err == nil && len(names) > 0 {
			fresh = false
		}
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("open pebble %q: %w", dir, err)
	}
	s.db = db
	wo := po.Clone()
	wo.EnsureDefaults()
	s.dbFS, s.sst = po.FS, wo.MakeWriterOptions(len(wo.Levels)-1, db.TableFormat())
	if dir != "" {
		s.fs, s.dir = po.FS, dir
		if s.unclean, err = takeMarker(po.FS, dir); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open pebble %q: %w", dir, err)
		}
		s.unclean = s.unclean && !fresh
	}
	if cfg.sync {
		s.wo = pebble.Sync
	}
	s.stop, s.held = make(chan struct{}), make(chan struct{})
	go s.holdStates()
	if cfg.flush > 0 {
		s.done = make(chan struct{})
		go s.flushOld(cfg.flush)
	}
	return s, nil
}

// Table returns the named table. Names are 1 to 64 characters of [a-z0-9_].
func (s *Store) Table(_ context.Context, name string) (zen.Table, error) {
	if err := zen.CheckTableName(name); err != nil {
		return nil, err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[name]
	if !ok {
		p := append([]byte(name), 0)
		end := append([]byte(name), 1)
		t = &Table{s: s, name: name, prefix: p, end: end}
		s.tables[name] = t
	}
	return t, nil
}

// Close flushes and closes the database. Tables must not be used afterwards.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.held
	if s.done != nil {
		<-s.done
	}
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close pebble: %w", err)
	}
	if s.fs != nil {
		if err := putMarker(s.fs, s.dir); err != nil {
			return fmt.Errorf("close pebble: %w", err)
		}
	}
	return nil
}

// takeMarker removes dir's clean-close marker, durably, and reports whether it was missing.
func takeMarker(fs vfs.FS, dir string) (missing bool, err error) {
	path := fs.PathJoin(dir, cleanMarker)
	if _, err := fs.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		return false, fmt.Errorf("clean-close marker: %w", err)
	}
	if err := fs.Remove(path); err != nil {
		return false, fmt.Errorf("remove clean-close marker: %w", err)
	}
	return false, syncDir(fs, dir)
}

// putMarker writes dir's clean-close marker, durably.
func putMarker(fs vfs.FS, dir string) error {
	f, err := fs.Create(fs.PathJoin(dir, cleanMarker), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("clean-close marker: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("clean-close marker: %w", err)
	}
	return syncDir(fs, dir)
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// Table is one named table of a Store.
type Table struct {
	s      *Store
	name   string
	prefix []byte // name 0x00
	end    []byte // name 0x01: the first key past the table
}

var (
	_ zen.Table   = (*Table)(nil)
	_ zen.Carrier = (*Table)(nil)
)

func (t *Table) key(k []byte) []byte {
	out := make([]byte, 0, len(t.prefix)+len(k))
	return append(append(out, t.prefix...), k...)
}

func (t *Table) stripe(k []byte) int {
	return int(maphash.Bytes(t.s.seed, k[:min(len(k), stripePrefix)]) % stripes)
}

// MaxKeyLen is the longest row key accepted, the same limit as the HBase backend's.
const MaxKeyLen = 1024

func checkKey(k []byte) error {
	if len(k) == 0 {
		return errors.New("empty row key")
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("row key of %d bytes (at most %d)", len(k), MaxKeyLen)
	}
	return nil
}

// Log identifies the store's write-ahead log (zen.Logged): the tables of one Store share it.
func (t *Table) Log() any { return t.s }

// apply is Apply, untraced.
func (t *Table) apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.s.enter(ctx); err != nil {
		return err
	}
	defer t.s.life.RUnlock()
	if len(muts) == 0 {
		return nil
	}
	for i, m := range muts {
		if err := checkKey(m.Key); err != nil {
			return fmt.Errorf("apply %s: mutation %d: %w", t.name, i, err)
		}
	}
	b := t.s.db.NewBatch()
	st := make([]int, 0, len(muts))
	var kb []byte // the batch copies each key: one buffer for all of them
	for _, m := range muts {
		kb = append(append(kb[:0], t.prefix...), m.Key...)
		var err error
		if m.Delete {
			err = b.Delete(kb, nil)
		} else {
			err = b.Set(kb, m.Value, nil)
		}
		if err != nil {
			_ = b.Close()
			return fmt.Errorf("apply %s: %w", t.name, err)
		}
		st = append(st, t.stripe(m.Key))
	}
	slices.Sort(st)
	st = slices.Compact(st)
	for _, i := range st {
		t.s.locks[i].Lock()
	}
	wait, err := t.s.applyVisible(ctx, b)
	for _, i := range st {
		t.s.locks[i].Unlock()
	}
	if err == nil {
		err = wait()
	}
	if err != nil {
		return fmt.Errorf("apply %s: %w", t.name, err)
	}
	return nil
}

// applyVisible applies b to the database: when it returns, b is visible to every reader (and to
// every compare-and-set after it). It returns a wait that blocks until b is durable (the WAL
// fsync, with sync on) and closes b. Callers hold the stripe locks of b's rows across
// applyVisible only, never across the wait: a row's next writer needs the previous write to be
// visible, not synced (Pebble makes a write visible before its WAL sync either way, and the log
// is sequential, so a later write is never durable without the earlier ones). Holding the locks
// across the fsync made every compare-and-set of a read request queue behind the fsyncs of
// the fanout batches that happened to share a stripe.
//
// Under zen.Lazily (ctx) b is applied without a sync, and the wait returns at once.
func (s *Store) applyVisible(ctx context.Context, b *pebble.Batch) (wait func() error, err error) {
	if !s.wo.Sync || zen.IsLazy(ctx) {
		if err := s.db.Apply(b, pebble.NoSync); err != nil {
			_ = b.Close()
			return nil, err
		}
		return b.Close, nil
	}
	if err := s.db.ApplyNoSyncWait(b, s.wo); err != nil {
		_ = b.Close()
		return nil, err
	}
	return func() error {
		err := b.SyncWait()
		if cerr := b.Close(); err == nil {
			err = cerr
		}
		return err
	}, nil
}

var _ zen.MultiGetter = (*Table)(nil)

// seekManyFrom is the batch size from which GetMany reads through one iterator instead of a
// Get per key.
const seekManyFrom = 8

var _ zen.CondBatcher = (*Table)(nil)

// Stats is the shape of the store's LSM tree, for monitoring: what a read pays (ReadAmp: the
// memtables and L0 sublevels and levels a point read may look in) and what compaction owes.
type Stats struct {
	ReadAmp             int    // sublevels of L0 plus non-empty levels below, plus memtables
	L0Files             int64  // sstables in L0
	L0Sublevels         int32  // sublevels of L0
	MemTables           int64  // memtables, the mutable one included
	CompactionDebtBytes uint64 // Pebble's estimate of what is left to compact
	Compactions         int64  // compactions running
	Flushes             int64  // memtable flushes since Open
	// WriteStalls is how many times Pebble held writes since Open (memtables waiting for a
	// flush, or too many L0 sublevels), and WriteStallTime their total duration.
	WriteStalls    int64
	WriteStallTime time.Duration
	// LoweredCompactions is how many compactions ran at a lower priority since Open
	// (WithCompactionNice).
	LoweredCompactions int64
	// BlockCacheBytes is what the block cache holds now; it grows with the blocks read, up to
	// the configured cache size (WithCacheSize), and stays there.
	BlockCacheBytes int64
	// MemTableBytes is the memory of the memtables (the mutable one and those waiting for a
	// flush) and of zombie memtables an open iterator still holds: at most a few times the
	// memtable size (WithMemTableSize) while flushes keep up.
	MemTableBytes uint64
	// WALBytes, FlushedBytes and CompactedBytes are the bytes written since Open to the
	// write-ahead log, to sstables by flushes and to sstables by compactions: (flushed +
	// compacted) / WAL over an interval is the store's write amplification there, and
	// compacted bytes are what compactions spend their CPU on.
	WALBytes, FlushedBytes, CompactedBytes uint64
}

// Stats returns the store's LSM shape now (zero after Close).
func (s *Store) Stats() Stats {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return Stats{}
	}
	m := s.db.Metrics()
	st := Stats{ReadAmp: m.ReadAmp() + int(m.MemTable.Count), L0Files: m.Levels[0].TablesCount, L0Sublevels: m.Levels[0].Sublevels,
		MemTables: m.MemTable.Count, CompactionDebtBytes: m.Compact.EstimatedDebt, Compactions: m.Compact.NumInProgress,
		Flushes: m.Flush.Count, WriteStalls: s.stalls.Load(), WriteStallTime: time.Duration(s.stallNanos.Load()), LoweredCompactions: s.lowered.Load(),
		BlockCacheBytes: m.BlockCache.Size, MemTableBytes: m.MemTable.Size + m.MemTable.ZombieSize}
	st.WALBytes = m.WAL.BytesWritten
	for i := range m.Levels {
		st.FlushedBytes += m.Levels[i].TableBytesFlushed
		st.CompactedBytes += m.Levels[i].TableBytesCompacted
	}
	return st
}
