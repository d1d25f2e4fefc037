package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// Names of the zen tables the binary opens (besides zen.Graph's own).
const (
	tablePools    = "pools"
	tableGenState = "genstate"
	tableFeed     = "feed"
)

// stores are the three storage clusters: main (graph, pools, generator state), and the primary
// and standby copies of the materialized feed. Each is opened on first use, so a role opens only
// what it needs.
type stores struct {
	cfg config.Storage
	log *zap.Logger
	reg prometheus.Registerer // nil: the Pebble stores' LSM gauges are not registered
	// stats holds, per store name, the open Pebble store its gauges read (registered once; a
	// store reopened under the same name takes its place).
	stats  map[string]*atomic.Pointer[zenpebble.Store]
	opened map[string]zen.Store
	order  []string // opening order, closed in reverse
	// compactions bounds the Pebble stores' compactions together (storage.pebble_compactions),
	// made with the first Pebble store and closed after the last.
	compactions *zenpebble.Compactions
	cstats      *atomic.Pointer[zenpebble.Compactions] // what the bound's metrics read; registered once
}

// newStores returns the stores of cfg; reg, when not nil, gets the Pebble stores' LSM gauges and
// the HBase client's metrics (registerHBaseMetrics).
func newStores(cfg config.Storage, log *zap.Logger, reg prometheus.Registerer) *stores {
	if reg != nil {
		registerHBaseMetrics(reg, log)
	}
	return &stores{cfg: cfg, log: log, reg: reg, opened: map[string]zen.Store{}}
}

// registerHBaseMetrics registers the HBase client's metrics in reg: gohbase counts its
// operations (gohbase_operation_duration_seconds by operation and result "ok" or "error", what
// the region servers answered after the client's retries), its retries and the regions it lost
// and found again (a region server's death, a region moved) in Prometheus's default registry,
// which /metrics does not serve. They are registered whatever the backend, and have series
// once an HBase store is used.
func registerHBaseMetrics(reg prometheus.Registerer, log *zap.Logger) {
	for _, c := range zenhbase.Collectors() {
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			log.Warn("hbase client metrics not registered", zap.Error(err))
		}
	}
}

// Store names.
const (
	storeMain    = "main"
	storePrimary = "feed-primary"
	storeStandby = "feed-standby"
)

// get opens (once) and returns the named store.
func (s *stores) get(ctx context.Context, name string) (zen.Store, error) {
	if st, ok := s.opened[name]; ok {
		return st, nil
	}
	var st zen.Store
	switch s.cfg.Backend {
	case config.BackendPebble:
		dir := filepath.Join(s.cfg.DataDir, name)
		if err := writableDir(dir); err != nil {
			return nil, fmt.Errorf("data directory %s cannot hold the %s store (%w): pass a writable directory with --data-dir (or %s)",
				quote.Q(s.cfg.DataDir), name, err, config.EnvName("data-dir"))
		}
		p, err := zenpebble.Open(dir, s.pebbleOptions(name)...)
		if pebbleLocked(err) {
			// Pebble admits one process per directory. The worker and the generator (and a
			// feedsvc without --generator-addr) all open the main store.
			return nil, fmt.Errorf("open pebble %s: another process holds it (%w): with storage=pebble the roles "+
				"that share the %s store run in one process (smartfeed all); separate role processes need storage=hbase",
				dir, err, name)
		}
		if err != nil {
			return nil, fmt.Errorf("open pebble %s: %w", dir, err)
		}
		if err := s.registerPebbleStats(name, p); err != nil {
			_ = p.Close()
			return nil, err
		}
		st = p
	case config.BackendHBase:
		h := s.cfg.HBase
		zk := map[string]string{storeMain: h.PoolsZK, storePrimary: h.PrimaryZK, storeStandby: h.StandbyZK}[name]
		prefix := h.TablePrefix
		// Primary and standby on one cluster would share the "feed" table; keep them apart.
		if name == storeStandby && h.StandbyZK == h.PrimaryZK {
			prefix += "standby_"
		}
		// With HBase's own replication the primary's tables carry REPLICATION_SCOPE 1; the
		// standby cluster has the same tables under the same prefix.
		replicated := name == storePrimary && h.NativeReplication()
		hb, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: prefix, ZookeeperRoot: h.ZookeeperRoot, Replicated: replicated,
			FlushInterval: time.Duration(h.WriteFlush)})
		if err != nil {
			return nil, fmt.Errorf("open hbase %s at %s: %w", name, zk, err)
		}
		st = hb
	default:
		return nil, fmt.Errorf("unknown storage backend %q", s.cfg.Backend)
	}
	s.opened[name] = st
	s.order = append(s.order, name)
	return st, nil
}

// pebbleOptions are the options of every Pebble store opened, the store named name (a label
// of its log lines): sync, block cache and memtable size from the storage config (the feed's
// stores their own memtable size).
func (s *stores) pebbleOptions(name string) []zenpebble.Option {
	opts := []zenpebble.Option{zenpebble.WithLogger(s.log.Named("pebble").With(zap.String("store", name)))}
	if s.cfg.PebbleNoSync {
		opts = append(opts, zenpebble.WithNoSync())
	}
	if s.cfg.PebbleCacheMB > 0 {
		opts = append(opts, zenpebble.WithCacheSize(int64(s.cfg.PebbleCacheMB)<<20))
	}
	if s.cfg.PebbleL0CompactionThreshold > 0 {
		opts = append(opts, zenpebble.WithL0CompactionThreshold(s.cfg.PebbleL0CompactionThreshold))
	}
	if n := s.cfg.PebbleCompactionNice; n > 0 {
		opts = append(opts, zenpebble.WithCompactionNice(n))
	}
	if n := s.cfg.PebbleCompactions; n > 0 {
		if s.compactions == nil {
			s.compactions = zenpebble.NewCompactions(n)
			s.registerCompactionStats()
		}
		opts = append(opts, zenpebble.WithCompactions(s.compactions))
	}
	mem := s.cfg.PebbleMemTableMB
	if feed := s.cfg.PebbleFeedMemTableMB; feed > 0 && (name == storePrimary || name == storeStandby) {
		mem = feed
	}
	if mem > 0 {
		opts = append(opts, zenpebble.WithMemTableSize(uint64(mem)<<20))
	}
	if d := time.Duration(s.cfg.PebbleFlushAfter); d > 0 {
		opts = append(opts, zenpebble.WithFlushAfter(d))
	}
	return opts
}

// registerCompactionStats points the metrics of the Pebble stores' shared compaction bound at
// s.compactions, registering them the first time.
func (s *stores) registerCompactionStats() {
	if s.reg == nil {
		return
	}
	if s.cstats != nil {
		s.cstats.Store(s.compactions)
		return
	}
	s.cstats = &atomic.Pointer[zenpebble.Compactions]{}
	s.cstats.Store(s.compactions)
	stat := func() zenpebble.CompactionStats { return s.cstats.Load().Stats() }
	reg := promauto.With(s.reg)
	reg.NewGaugeFunc(prometheus.GaugeOpts{Name: "smartfeed_pebble_compaction_slots",
		Help: "Compactions the process's Pebble stores may run at once, all together (storage.pebble_compactions)."},
		func() float64 { return float64(stat().Limit) })
	reg.NewCounterFunc(prometheus.CounterOpts{Name: "smartfeed_pebble_compaction_waits_total",
		Help: "Times a Pebble store's compaction found every shared slot taken and waited."},
		func() float64 { return float64(stat().Waited) })
	reg.NewCounterFunc(prometheus.CounterOpts{Name: "smartfeed_pebble_compactions_past_bound_total",
		Help: "Compactions run past the shared bound because their store fell behind (L0 too deep, too much debt)."},
		func() float64 { return float64(stat().Escalated) })
}

// registerPebbleStats registers gauges of p's LSM shape (zenpebble.Stats), labelled store=name:
// read amplification and L0 rising over a run mean reads slow down as compaction falls behind.
func (s *stores) registerPebbleStats(name string, p *zenpebble.Store) error {
	if s.reg == nil {
		return nil
	}
	if cur, ok := s.stats[name]; ok {
		cur.Store(p)
		return nil
	}
	if s.stats == nil {
		s.stats = map[string]*atomic.Pointer[zenpebble.Store]{}
	}
	cur := &atomic.Pointer[zenpebble.Store]{}
	cur.Store(p)
	s.stats[name] = cur
	reg := promauto.With(s.reg)
	for _, g := range []struct {
		name, help string
		v          func(zenpebble.Stats) float64
	}{
		{"smartfeed_pebble_read_amp", "Memtables, L0 sublevels and non-empty levels a point read may look in.", func(s zenpebble.Stats) float64 { return float64(s.ReadAmp) }},
		{"smartfeed_pebble_l0_files", "Sstables in L0.", func(s zenpebble.Stats) float64 { return float64(s.L0Files) }},
		{"smartfeed_pebble_l0_sublevels", "Sublevels of L0.", func(s zenpebble.Stats) float64 { return float64(s.L0Sublevels) }},
		{"smartfeed_pebble_memtables", "Memtables, the mutable one included.", func(s zenpebble.Stats) float64 { return float64(s.MemTables) }},
		{"smartfeed_pebble_compaction_debt_bytes", "Pebble's estimate of the bytes left to compact.", func(s zenpebble.Stats) float64 { return float64(s.CompactionDebtBytes) }},
		{"smartfeed_pebble_compactions_running", "Compactions in progress.", func(s zenpebble.Stats) float64 { return float64(s.Compactions) }},
		{"smartfeed_pebble_cache_bytes", "Bytes the block cache holds (at most storage.pebble_cache_mb).", func(s zenpebble.Stats) float64 { return float64(s.BlockCacheBytes) }},
		{"smartfeed_pebble_memtable_bytes", "Bytes of the memtables, those waiting for a flush and those an open iterator still holds included.",
			func(s zenpebble.Stats) float64 { return float64(s.MemTableBytes) }},
	} {
		reg.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help, ConstLabels: prometheus.Labels{"store": name}},
			func() float64 { return g.v(cur.Load().Stats()) })
	}
	for _, c := range []struct {
		name, help string
		v          func(zenpebble.Stats) float64
	}{
		{"smartfeed_pebble_flushes_total", "Memtable flushes (full memtables, and old ones under storage.pebble_flush_after).",
			func(s zenpebble.Stats) float64 { return float64(s.Flushes) }},
		{"smartfeed_pebble_write_stalls_total", "Times Pebble held writes (memtables waiting for a flush, or L0 too deep); each is also logged.",
			func(s zenpebble.Stats) float64 { return float64(s.WriteStalls) }},
		{"smartfeed_pebble_write_stall_seconds_total", "Time writes were held by Pebble's write stalls.",
			func(s zenpebble.Stats) float64 { return s.WriteStallTime.Seconds() }},
		{"smartfeed_pebble_wal_bytes_total", "Bytes written to the write-ahead log.",
			func(s zenpebble.Stats) float64 { return float64(s.WALBytes) }},
		{"smartfeed_pebble_flushed_bytes_total", "Bytes of sstables written by memtable flushes.",
			func(s zenpebble.Stats) float64 { return float64(s.FlushedBytes) }},
		{"smartfeed_pebble_compacted_bytes_total", "Bytes of sstables written by compactions: with the flushed and WAL bytes, the store's write amplification.",
			func(s zenpebble.Stats) float64 { return float64(s.CompactedBytes) }},
		{"smartfeed_pebble_lowered_compactions_total", "Compactions run at a lower CPU priority (storage.pebble_compaction_nice: those below L0).",
			func(s zenpebble.Stats) float64 { return float64(s.LoweredCompactions) }},
	} {
		reg.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help, ConstLabels: prometheus.Labels{"store": name}},
			func() float64 { return c.v(cur.Load().Stats()) })
	}
	return nil
}

// named opens (once) an extra store of --stores, under the key "store:NAME".
func (s *stores) named(ctx context.Context, ns config.NamedStore) (zen.Store, error) {
	key := "store:" + ns.Name
	if st, ok := s.opened[key]; ok {
		return st, nil
	}
	var st zen.Store
	switch ns.Backend {
	case config.BackendPebble:
		p, err := zenpebble.Open(ns.Addr, s.pebbleOptions(ns.Name)...)
		if err != nil {
			return nil, fmt.Errorf("open store %s (pebble %s): %w", ns.Name, ns.Addr, err)
		}
		if err := s.registerPebbleStats(key, p); err != nil {
			_ = p.Close()
			return nil, err
		}
		st = p
	case config.BackendHBase:
		h := s.cfg.HBase
		hb, err := zenhbase.Open(ctx, ns.Addr, zenhbase.Options{TablePrefix: namedStorePrefix(h.TablePrefix, ns.Name),
			ZookeeperRoot: h.ZookeeperRoot, FlushInterval: time.Duration(h.WriteFlush)})
		if err != nil {
			return nil, fmt.Errorf("open store %s (hbase at %s): %w", ns.Name, ns.Addr, err)
		}
		st = hb
	default:
		return nil, fmt.Errorf("store %s: unknown backend %q", ns.Name, ns.Backend)
	}
	s.opened[key] = st
	s.order = append(s.order, key)
	return st, nil
}

// namedStorePrefix is the HBase table prefix of an extra store: the configured prefix and the
// store's name ("smartfeed_cold_objects"), so two stores on one cluster never share a table.
func namedStorePrefix(prefix, name string) string { return prefix + name + "_" }

// table opens one table of the named store.
func (s *stores) table(ctx context.Context, store, table string) (zen.Table, error) {
	st, err := s.get(ctx, store)
	if err != nil {
		return nil, err
	}
	t, err := st.Table(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("open table %s of %s: %w", table, store, err)
	}
	return t, nil
}

// close closes the stores in the reverse of their opening order.
func (s *stores) close() error {
	var errs []error
	for i := len(s.order) - 1; i >= 0; i-- {
		name := s.order[i]
		if err := s.opened[name].Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", name, err))
		}
		delete(s.opened, name)
	}
	s.order = nil
	if s.compactions != nil {
		s.compactions.Close()
		s.compactions = nil
	}
	return errors.Join(errs...)
}

// pebbleLocked reports whether err is Pebble's refusal of a directory another holder has locked:
// EAGAIN from another process, its own message from this one.
func pebbleLocked(err error) bool {
	return err != nil && (errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held by current process"))
}

// writableDir makes dir if needed and checks that a file can be written in it, so an
// unwritable data directory is named as such before Pebble reports it in its own terms.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".smartfeed-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}
