package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/internal/jsontime"
)

// ValidateFor reports every problem of c, or nil, for a process that opens the stores of u.
func (c Config) ValidateFor(u Uses) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	c.validateStorage(u, bad)
	if c.Cache.TTL <= 0 || c.Cache.NegativeTTL <= 0 || c.Cache.TTL > jsontime.Duration(2*time.Hour) {
		bad("cache: ttl %v and negative_ttl %v must be positive, ttl at most 2h", c.Cache.TTL, c.Cache.NegativeTTL)
	}
	c.Redis.validate(c.Cache.Enabled, bad)
	if c.GRPC.Addr == "" {
		bad("grpc.addr: empty")
	}
	if c.Auth.MaxTokenLifetime <= 0 || c.Auth.MaxTokenLifetime > jsontime.Duration(8760*time.Hour) {
		bad("auth.max_token_lifetime: %v not in (0, 8760h]", c.Auth.MaxTokenLifetime.D())
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level: %q is not debug, info, warn or error", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "console" && c.Log.Format != "auto" {
		bad("log.format: %q is not json, console or auto", c.Log.Format)
	}
	c.validateWorker(bad)
	c.validateFeed(bad)
	if c.ShutdownTimeout <= 0 {
		bad("shutdown_timeout: must be positive")
	}
	if c.MaxProcs < 0 || c.MaxProcs > 4096 {
		bad("max_procs: %d is not in [0, 4096]", c.MaxProcs)
	}
	if c.GCHeapFloorMB < 0 || c.GCHeapFloorMB > 1<<20 {
		bad("gc_heap_floor_mb: %d is not in [0, 1048576]", c.GCHeapFloorMB)
	}
	return errors.Join(errs...)
}

// validateStorage reports the problems of c's storage settings to bad.
func (c Config) validateStorage(u Uses, bad func(format string, args ...any)) {
	switch c.Storage.Backend {
	case BackendPebble:
		if c.Storage.DataDir == "" {
			bad("storage.data_dir: empty (pebble needs a data directory)")
		}
		if c.Storage.PebbleCacheMB < 0 || c.Storage.PebbleCacheMB > 1<<20 {
			bad("storage.pebble_cache_mb: %d is not in [0, 1048576]", c.Storage.PebbleCacheMB)
		}
		if c.Storage.PebbleMemTableMB < 0 || c.Storage.PebbleMemTableMB > 4096 {
			bad("storage.pebble_memtable_mb: %d is not in [0, 4096]", c.Storage.PebbleMemTableMB)
		}
		if c.Storage.PebbleFeedMemTableMB < 0 || c.Storage.PebbleFeedMemTableMB > 4096 {
			bad("storage.pebble_feed_memtable_mb: %d is not in [0, 4096]", c.Storage.PebbleFeedMemTableMB)
		}
		if d := time.Duration(c.Storage.PebbleFlushAfter); d != 0 && (d < 100*time.Millisecond || d > time.Hour) {
			bad("storage.pebble_flush_after: %v is not 0 or in [100ms, 1h]", d)
		}
		if c.Storage.PebbleCompactions < 0 || c.Storage.PebbleCompactions > 64 {
			bad("storage.pebble_compactions: %d is not in [0, 64]", c.Storage.PebbleCompactions)
		}
		if c.Storage.PebbleCompactionNice < 0 || c.Storage.PebbleCompactionNice > 19 {
			bad("storage.pebble_compaction_nice: %d is not in [0, 19]", c.Storage.PebbleCompactionNice)
		}
		if c.Storage.PebbleL0CompactionThreshold < 0 || c.Storage.PebbleL0CompactionThreshold > 64 {
			bad("storage.pebble_l0_compaction_threshold: %d is not in [0, 64]", c.Storage.PebbleL0CompactionThreshold)
		}
	case BackendHBase:
		h := c.Storage.HBase
		for _, q := range []struct {
			name, v string
			used    bool
		}{
			{"storage.hbase.pools_zk", h.PoolsZK, u.Main}, {"storage.hbase.primary_zk", h.PrimaryZK, u.Feed},
			{"storage.hbase.standby_zk", h.StandbyZK, u.Feed},
		} {
			if q.v == "" && q.used {
				bad("%s: empty (the hbase backend needs a ZooKeeper quorum per store this process opens)", q.name)
			}
		}
		switch h.Replication {
		case ReplicationAuto, ReplicationHBase, ReplicationApp:
			if h.Replication == ReplicationHBase && u.Feed && h.PrimaryZK == h.StandbyZK {
				bad("storage.hbase.replication: hbase needs the standby on another cluster than the primary")
			}
		default:
			bad("storage.hbase.replication: %q is not auto, hbase or app", h.Replication)
		}
		if h.WriteFlush <= 0 || time.Duration(h.WriteFlush) > time.Second {
			bad("storage.hbase.write_flush: %v is not in (0, 1s]", time.Duration(h.WriteFlush))
		}
	default:
		bad("storage.backend: %q is neither %q nor %q", c.Storage.Backend, BackendPebble, BackendHBase)
	}
	if _, err := ParseStores(c.Storage.Stores); err != nil {
		bad("storage.%v", err)
	}
	if c.Storage.ShardMap.ZK != "" && !strings.HasPrefix(c.Storage.ShardMap.ZKPath, "/") {
		bad("storage.shard_map.zk_path: %q must be an absolute znode path", c.Storage.ShardMap.ZKPath)
	}
}

// validateWorker reports the problems of c's worker settings to bad.
func (c Config) validateWorker(bad func(format string, args ...any)) {
	if c.Worker.Concurrency < 1 || c.Worker.Concurrency > 10000 {
		bad("worker.concurrency: %d out of [1, 10000]", c.Worker.Concurrency)
	}
	if c.Worker.Dequeuers < 1 || c.Worker.Dequeuers > c.Worker.Concurrency {
		bad("worker.dequeuers: %d out of [1, worker.concurrency]", c.Worker.Dequeuers)
	}
	if c.Worker.ReclaimAfter == 0 {
		bad("worker.reclaim_after: 0 (want a duration, or a negative one for off)")
	}
	if c.Worker.OutboxGrace <= 0 || c.Worker.OutboxRelayInterval <= 0 {
		bad("worker.outbox_grace and worker.outbox_relay_interval must be positive")
	}
	if c.Worker.ShutdownTimeout < 0 {
		bad("worker.shutdown_timeout: negative")
	}
	if c.ShutdownTimeout > 0 && c.Worker.ShutdownTimeout > c.ShutdownTimeout {
		bad("worker.shutdown_timeout: %v is longer than shutdown_timeout %v, which bounds the whole shutdown", c.Worker.ShutdownTimeout.D(), c.ShutdownTimeout.D())
	}
	if c.Worker.FeatureTTL < 0 {
		bad("worker.feature_ttl: negative")
	}
	if c.Worker.ActiveTTL < 0 {
		bad("worker.active_ttl: negative")
	}
	if c.Worker.UserDeleteRecheck < 0 {
		bad("worker.user_delete_recheck: negative")
	}
}

// validateFeed reports the problems of c's feed settings (and the admin's slow-trace bound) to bad.
func (c Config) validateFeed(bad func(format string, args ...any)) {
	if c.Feed.GeneratorDeadline <= 0 || c.Feed.GeneratorDeadline > jsontime.Duration(time.Minute) {
		bad("feed.generator_deadline: %v is not in (0, 1m]", c.Feed.GeneratorDeadline.D())
	}
	if c.Feed.PersistTimeout <= 0 || c.Feed.PersistTimeout > jsontime.Duration(time.Minute) {
		bad("feed.persist_timeout: %v is not in (0, 1m]", c.Feed.PersistTimeout.D())
	}
	if c.Feed.RecoverAfter <= 0 || c.Feed.RecoverEvery <= 0 {
		bad("feed.recover_after and feed.recover_every must be positive")
	}
	if c.Feed.PrepareAfter < 0 || c.Feed.PrepareAfter > jsontime.Duration(time.Hour) {
		bad("feed.prepare_after: %v not in [0, 1h]", c.Feed.PrepareAfter.D())
	}
	if c.Admin.SlowTraceOver <= 0 {
		bad("admin.slow_trace_over: %v is not positive", c.Admin.SlowTraceOver.D())
	}
	if c.Feed.MinChunkInterval < 0 || c.Feed.MinChunkInterval > jsontime.Duration(time.Hour) {
		bad("feed.min_chunk_interval: %v not in [0, 1h]", c.Feed.MinChunkInterval.D())
	}
	if c.Feed.PreparedMaxAge <= 0 || c.Feed.PreparedMaxAge > jsontime.Duration(time.Hour) {
		bad("feed.prepared_max_age: %v not in (0, 1h]", c.Feed.PreparedMaxAge.D())
	}
	if c.Feed.BackgroundGapWait < 0 || c.Feed.BackgroundGapWait > jsontime.Duration(time.Second) {
		bad("feed.background_gap_wait: %v not in [0, 1s]", c.Feed.BackgroundGapWait.D())
	}
	if c.Feed.InlineMaterialize < 0 || c.Feed.InlineMaterialize > 1024 {
		bad("feed.inline_materialize: %d not in [0, 1024]", c.Feed.InlineMaterialize)
	}
	if c.Feed.MaxGenerating < 0 || c.Feed.MaxGenerating > 1<<20 {
		bad("feed.max_generating: %d not in [0, 1048576]", c.Feed.MaxGenerating)
	}
	if c.Feed.MaxInflight < 0 || c.Feed.MaxInflight > 1<<20 {
		bad("feed.max_inflight: %d not in [0, 1048576]", c.Feed.MaxInflight)
	}
	if c.Feed.AdmissionWait < 0 || c.Feed.AdmissionWait > jsontime.Duration(time.Minute) {
		bad("feed.admission_wait: %v not in [0, 1m]", c.Feed.AdmissionWait.D())
	}
	c.Feed.validateResources(bad)
	if c.Feed.StandbyMaxStaleness < 0 {
		bad("feed.standby_max_staleness: negative")
	}
	if c.Feed.MaxItems < 1 || c.Feed.MaxItems > MaxFeedItems {
		bad("feed.max_items: %d is not in [1, %d]", c.Feed.MaxItems, MaxFeedItems)
	}
	if err := c.Feed.Hedge.Validate(); err != nil {
		bad("feed.hedge: %w", err)
	}
}
