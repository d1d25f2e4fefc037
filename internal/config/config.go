// Package config is the typed configuration of the smartfeed binary: defaults in code
// (DefaultConfig), a JSON file, environment variables (SMARTFEED_*) and flags, applied in that
// order, validated as a whole, and printed at start with its secrets masked.
package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen/zencache"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
)

// Backends of Storage.Backend.
const (
	BackendPebble = "pebble"
	BackendHBase  = "hbase"
)

// Config is the whole configuration of one smartfeed process. Every field has a documented
// default (DefaultConfig), a flag and an environment variable (see Bind).
type Config struct {
	// Storage chooses where zen's tables live.
	Storage Storage `json:"storage"`
	// Redis is the pinlater queue store.
	Redis Redis `json:"redis"`
	// Cache is the join cache of the graph (objects, edge pages, counts) on the same Redis.
	Cache Cache `json:"cache"`
	// GRPC is the public gRPC listener: every service of the role, health and reflection.
	GRPC GRPC `json:"grpc"`
	// Admin is the operator's plane: the HTTP listener of /metrics, /healthz, /readyz (and
	// /debug/pprof when enabled) and the admin gRPC listener (FeedAdmin).
	Admin Admin `json:"admin"`
	// Auth is the authentication of the public gRPC port.
	Auth Auth `json:"auth"`
	// TLS is the certificate of every listener (public gRPC, admin gRPC, admin HTTP).
	TLS TLS `json:"tls"`
	// Log configures the zap logger.
	Log Log `json:"log"`
	// Worker configures the pinlater server of the worker role.
	Worker Worker `json:"worker"`
	// Engagement configures the learned scoring model and its experiment (engagement.go).
	Engagement Engagement `json:"engagement"`
	// Generator configures the chunk generator, and how feedsvc reaches it.
	Generator Generator `json:"generator"`
	// Feed configures the feed service and its speculative reads.
	Feed Feed `json:"feed"`
	// ShutdownTimeout bounds the whole graceful shutdown. Default 30s.
	ShutdownTimeout jsontime.Duration `json:"shutdown_timeout"`
	// WaitForDeps makes a server that finds Redis (or HBase, when configured) unreachable at
	// start wait for it, with backoff, instead of exiting with an error naming it. Default
	// false: a typo in an address fails at once.
	WaitForDeps bool `json:"wait_for_deps"`
	// GCHeapFloorMB is the least heap goal of Go's collector, in MiB: GOGC is raised after each
	// collection while the live heap is under half of it, so a small heap is not collected
	// dozens of times a second under load (package internal/gcfloor). Capped at half
	// GOMEMLIMIT and a quarter of the container's memory limit. 0 turns it off (GOGC as set).
	// Default 256.
	GCHeapFloorMB int `json:"gc_heap_floor_mb"`
	// MaxProcs is the process's GOMAXPROCS. 0, the default: twice the processors the runtime
	// would use (the CPUs, or the container's CPU limit), unless the GOMAXPROCS environment
	// variable is set, which then holds. The embedded store's log syncs are system calls that
	// keep their processor for as long as the disk takes (0.3–3 ms each here), and the runtime
	// takes it back only when its monitor next looks; with a processor per CPU, two syncs at
	// once left none for the requests (docs/read-path.md, "Processors held by fsyncs").
	MaxProcs int `json:"max_procs"`
}

// Storage chooses the zen backend: embedded Pebble under a data directory (the default) or HBase,
// with one ZooKeeper quorum per store.
type Storage struct {
	// Backend is "pebble" (default) or "hbase".
	Backend string `json:"backend"`
	// DataDir holds the Pebble databases (main/, feed-primary/, feed-standby/). Default "data".
	DataDir string `json:"data_dir"`
	// PebbleNoSync skips fsync on Pebble writes (demos, benchmarks). Default false.
	PebbleNoSync bool `json:"pebble_no_sync"`
	// PebbleCacheMB is the block cache of each Pebble database, in MiB: reads of hot pools,
	// objects and feeds are served from it instead of decompressing blocks again. Default 256;
	// 0 means Pebble's own default (8 MiB).
	PebbleCacheMB int `json:"pebble_cache_mb"`
	// PebbleMemTableMB is the memtable of each Pebble database, in MiB: fewer, larger flushes,
	// so compaction rewrites the base level less often under the fanout's scattered writes.
	// Default 64; 0 means Pebble's own default (4 MiB).
	PebbleMemTableMB int `json:"pebble_memtable_mb"`
	// PebbleFeedMemTableMB is the memtable of the feed's Pebble databases (primary and
	// standby), in MiB, in place of PebbleMemTableMB. A page's read seeks into the memtable's
	// skiplist first, and that seek grows with the rows the memtable holds; but the feed's
	// writes, though clustered per user, span every user in each flush, so each flush's L0
	// file overlaps the whole base level and a small memtable makes compaction rewrite that
	// level often (docs/read-path.md, "Feed memtables"). Default 32; 0 means PebbleMemTableMB.
	PebbleFeedMemTableMB int `json:"pebble_feed_memtable_mb"`
	// PebbleL0CompactionThreshold is how many L0 sublevels each Pebble database lets
	// accumulate before compacting them into the base level: under the fanout's scattered
	// writes each such compaction rewrites the whole base level. Default 8; 0 means Pebble's
	// own default (4).
	PebbleL0CompactionThreshold int `json:"pebble_l0_compaction_threshold"`
	// PebbleCompactions is how many compactions the process's Pebble databases run at once,
	// all together: a compaction takes a processor for up to seconds, and the databases of one
	// process compacting at once take every processor from the requests it serves. A database
	// that falls behind may run a second one past the bound. Default 0: no shared bound (each
	// database runs its own, one at a time).
	PebbleCompactions int `json:"pebble_compactions"`
	// PebbleCompactionNice runs the Pebble databases' compactions below L0 this many nice
	// values lower than the rest of the process, each on its own thread (zenpebble.
	// WithCompactionNice), so that the kernel gives a core to the requests first; compactions
	// out of L0 keep the process's priority, so that writes do not stall. A lowered compaction
	// still holds one of Go's processors while the kernel runs other threads, so raise
	// max_procs by the databases' compactions with it. Default 0: the process's priority.
	// Linux only.
	PebbleCompactionNice int `json:"pebble_compaction_nice"`
	// PebbleFlushAfter flushes a Pebble memtable that holds at least 1 MiB and is this old:
	// readers step over a memtable's deleted rows (the pins chunks took from the heads of the
	// pools) one by one until a flush, and under a light write load a full-size memtable keeps
	// them for minutes. Each such flush is a small L0 file that compaction merges into the
	// whole base level, and on two cores that compaction showed in the reads' tail
	// (docs/read-path.md, "Old memtables flushed"). Default 0: only full memtables are flushed.
	PebbleFlushAfter jsontime.Duration `json:"pebble_flush_after"`
	// HBase holds the quorums of the three stores.
	HBase HBase `json:"hbase"`
	// ShardMap is where the live shard map comes from; empty fields mean the default map
	// (shards 0–4095 on store "default", all open).
	ShardMap ShardMap `json:"shard_map"`
	// Stores names extra stores the shard map may route shard ranges to, besides "default"
	// (the main store): "NAME=hbase:QUORUM" or "NAME=pebble:DIR", separated by ";" (e.g.
	// "cold=hbase:10.0.0.5:2181,10.0.0.6:2181"; its tables are named with the HBase table prefix
	// and the store's name: smartfeed_cold_objects). Names are 1–32 of [a-z0-9-]. With any, the
	// shard-keyed tables (objects, edges, counters, modshard, pools) are routed by the map
	// and `smartfeed shards move` can move ranges between the stores. Default none.
	Stores string `json:"stores"`
}

// NamedStore is one entry of Storage.Stores.
type NamedStore struct {
	Name    string
	Backend string // BackendHBase or BackendPebble
	// Addr is the ZooKeeper quorum (hbase) or the data directory (pebble).
	Addr string
}

// ParseStores parses Storage.Stores, refusing a bad or repeated name, an unknown backend or an
// empty address.
func ParseStores(s string) ([]NamedStore, error) {
	var out []NamedStore
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, spec, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("stores: %q: want NAME=hbase:QUORUM or NAME=pebble:DIR", part)
		}
		if !validStoreName(name) {
			return nil, fmt.Errorf("stores: name %q: want 1–32 of [a-z0-9-]", name)
		}
		if name == "default" || seen[name] {
			return nil, fmt.Errorf("stores: name %q is already taken", name)
		}
		seen[name] = true
		backend, addr, _ := strings.Cut(spec, ":")
		if backend != BackendHBase && backend != BackendPebble {
			return nil, fmt.Errorf("stores: %s: backend %q is neither hbase nor pebble", name, backend)
		}
		if addr == "" {
			return nil, fmt.Errorf("stores: %s: empty %s address", name, backend)
		}
		out = append(out, NamedStore{Name: name, Backend: backend, Addr: addr})
	}
	return out, nil
}

func validStoreName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, c := range n {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// ShardMap locates the live shard map: a JSON file, a ZooKeeper znode, or both (each change of
// either is applied; a bad map is refused and the one in use kept).
type ShardMap struct {
	// File is a JSON shard map, watched for changes. Empty = none.
	File string `json:"file"`
	// ZK is the ZooKeeper quorum holding the map ("host:port,…"). Empty = none.
	ZK string `json:"zk"`
	// ZKPath is the znode of the map. Default "/smartfeed/shardmap".
	ZKPath string `json:"zk_path"`
}

// HBase names the three HBase clusters by their ZooKeeper quorum ("host:port,...").
type HBase struct {
	// PoolsZK holds the graph, the pools and the generator state.
	PoolsZK string `json:"pools_zk"`
	// PrimaryZK holds the materialized feed read first.
	PrimaryZK string `json:"primary_zk"`
	// StandbyZK holds the hot copy of the materialized feed.
	StandbyZK string `json:"standby_zk"`
	// TablePrefix is put in front of every table name. Default "smartfeed_".
	TablePrefix string `json:"table_prefix"`
	// ZookeeperRoot is HBase's znode. Default "/hbase".
	ZookeeperRoot string `json:"zookeeper_root"`
	// Replication says who copies the materialized feed from the primary to the standby:
	// "hbase" (HBase's own replication: the primary's feed table is created with
	// REPLICATION_SCOPE 1 and a replication peer to the standby cluster must exist, e.g.
	// scripts/hbase.sh replicate; the service only measures the lag with a canary) or "app"
	// (the feed service's change-log Replicator). Default "auto": hbase when primary_zk and
	// standby_zk differ, app when they are one cluster.
	Replication string `json:"replication"`
	// WriteFlush is how long the HBase client waits to batch writes to a region server before
	// it sends them (reads never wait). Every write on a request's path (a chunk's claims, the
	// feed's pending row) waits for it once, so it is short; under load batches still form
	// (gohbase sends at once when 100 calls are queued). Default 1ms; gohbase's own default is 20ms.
	WriteFlush jsontime.Duration `json:"write_flush"`
}

// Replication modes of HBase.Replication.
const (
	ReplicationAuto  = "auto"
	ReplicationHBase = "hbase"
	ReplicationApp   = "app"
)

// NativeReplication reports whether HBase itself replicates the feed from primary to standby.
func (h HBase) NativeReplication() bool {
	switch h.Replication {
	case ReplicationHBase:
		return true
	case ReplicationApp:
		return false
	}
	return h.PrimaryZK != h.StandbyZK
}

// Cache configures the graph's read-through join cache (zen/zencache) on the pinlater Redis.
type Cache struct {
	// Enabled turns it on. Default false. Writes to the graph then need Redis (to invalidate).
	Enabled bool `json:"enabled"`
	// TTL of a cached object, edge page or count. Default 10m.
	TTL jsontime.Duration `json:"ttl"`
	// NegativeTTL of a cached miss. Default 5s.
	NegativeTTL jsontime.Duration `json:"negative_ttl"`
}

// GRPC is the public gRPC listener.
type GRPC struct {
	// Addr is the listen address. Default "127.0.0.1:9090": another address needs
	// authentication (Auth) or Auth.Insecure.
	Addr string `json:"addr"`
}

// TLS configures the listeners' certificate.
type TLS struct {
	// CertFile and KeyFile are the PEM certificate (chain) and key, reloaded when they change.
	// Empty: plaintext, allowed only on loopback addresses or with Auth.Insecure.
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
	// ClientCAFile, when set, makes every listener require a client certificate signed by one
	// of its CAs (mTLS between roles).
	ClientCAFile string `json:"client_ca_file"`
}

// Auth configures the public port's authentication (package auth).
type Auth struct {
	// JWKSFile is the JSON Web Key Set of the identity provider whose tokens callers present
	// (reloaded when it changes). Empty turns authentication off, which is allowed only on a
	// loopback gRPC address or with Insecure.
	JWKSFile string `json:"jwks_file"`
	// Issuer and Audience, when set, must match the tokens' iss and aud.
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	// Insecure serves without authentication, or without TLS, on a non-loopback address (a
	// warning is logged at start). Default false.
	Insecure bool `json:"insecure"`
	// UserRate and UserBurst limit each user's calls on the public port (counted in Redis,
	// shared by the replicas); 0 turns the limit off. Default 50/s, burst 100.
	UserRate  float64 `json:"user_rate"`
	UserBurst int     `json:"user_burst"`
	// ProducerRate and ProducerBurst limit each producer (scope ingest:publish). Default
	// 1000/s, burst 2000.
	ProducerRate  float64 `json:"producer_rate"`
	ProducerBurst int     `json:"producer_burst"`
	// MaxTokenLifetime is the longest lifetime (exp minus iat) a bearer token may have; a
	// longer-lived token, or one without exp, is refused (Unauthenticated). It bounds how long
	// a leaked token stays useful. Default 24h; at most 8760h (a year).
	MaxTokenLifetime jsontime.Duration `json:"max_token_lifetime"`
}

// Log configures the logger.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `json:"level"`
	// Format is "json", "console", or "auto": console when the log goes to a terminal, JSON
	// otherwise (to a file, a pipe, a log collector). Default "auto".
	Format string `json:"format"`
}

// Worker configures the pinlater server.
type Worker struct {
	// Concurrency is the number of tasks run at once. Default 10.
	Concurrency int `json:"concurrency"`
	// StrictPriority drains higher queues first instead of sharing by weight. Default false.
	StrictPriority bool `json:"strict_priority"`
	// Dequeuers is how many Asynq processors share the Concurrency slots, each taking tasks
	// one at a time (pinlater.Config.Dequeuers). Default 1; at most Concurrency.
	Dequeuers int `json:"dequeuers"`
	// ShutdownTimeout is how long running tasks may finish before they are handed back. Default 10s.
	ShutdownTimeout jsontime.Duration `json:"shutdown_timeout"`
	// ReclaimAfter: a task whose Asynq lease ended this long ago (its worker died, or Redis was
	// killed before the worker heard it had the task) goes back to its queue
	// (pinlater.Config.ReclaimAfter); Asynq alone would run it 60–120 s after. Default 5s;
	// negative: off.
	ReclaimAfter jsontime.Duration `json:"reclaim_after"`
	// OutboxGrace is how long an event recorded in the outbox may stay unknown to Redis before
	// the relay enqueues it again. Default 30s.
	OutboxGrace jsontime.Duration `json:"outbox_grace"`
	// OutboxRelayInterval is how often the relay walks the outbox. Default 10s.
	OutboxRelayInterval jsontime.Duration `json:"outbox_relay_interval"`
	// WeightsFile is the pool scorer's JSON weights (worker.Weights; absent fields keep their
	// defaults, unknown ones are refused). Default empty: worker.DefaultWeights.
	WeightsFile string `json:"weights_file"`
	// FeatureTTL is how long the fanout keeps a receiver's scoring features (affinity, interest
	// follows) once read (worker.Config.FeatureTTL): a change made by another process reaches
	// the scores at most this late. 0 reads them for every pin. Default 1m.
	FeatureTTL jsontime.Duration `json:"feature_ttl"`
	// ActiveTTL is how long the fanout keeps a receiver's last-active row once it said "deliver"
	// (worker.Config.ActiveTTL): a user deleted by another process can still get pins (that
	// nobody reads) this long. 0 reads it for every pin. Default 1s.
	ActiveTTL jsontime.Duration `json:"active_ttl"`
	// UserDeleteRecheck is how long after a user's deletion the worker deletes what is left of
	// the user once more: pool and feed rows written by a fanout or a materialization that was
	// under way when the user was deleted (worker.Config.UserDeleteRecheck). Default 0: the
	// worker's own, the longest fanout task run plus active_ttl plus a minute (11m1s).
	UserDeleteRecheck jsontime.Duration `json:"user_delete_recheck"`
}

// Generator configures the generator and feedsvc's access to it.
type Generator struct {
	// ConfigFile is the generator's JSON config (rates, chunk sizes); empty = its defaults.
	ConfigFile string `json:"config_file"`
	// Addr is the gRPC target of the generator, for a feedsvc process. Empty = in process
	// (the "all" role). Default empty.
	Addr string `json:"addr"`
	// TokenFile holds the bearer token (a JWT with scope "generator") a feedsvc process sends
	// to a generator whose port requires authentication; re-read when it changes.
	TokenFile string `json:"token_file"`
	// CAFile, when set, makes a feedsvc process reach the generator over TLS verified against
	// these CAs (presenting its own --tls-cert-file, for a generator that requires mTLS).
	CAFile string `json:"ca_file"`
}

// Feed configures the feed service.
type Feed struct {
	// GeneratorDeadline bounds the generator call of a first page, in (0, 1m]. Default 150ms.
	GeneratorDeadline jsontime.Duration `json:"generator_deadline"`
	// PersistTimeout bounds recording a served chunk as pending on the primary before the
	// page's answer, in (0, 1m]; past it the page is served without its fresh chunk
	// (PERSIST_FAILED). Default 200ms; live in the knobs file as persist_timeout.
	PersistTimeout jsontime.Duration `json:"persist_timeout"`
	// MaxItems is the materialized feed's maximum length, in [1, 2^20]. Default 1000.
	MaxItems int `json:"max_items"`
	// KnobsFile is a feedsvc knobs document watched for live changes; empty = none.
	KnobsFile string `json:"knobs_file"`
	// Faults enables the FeedAdmin fault injection on the two stores (demos, tests). Default false.
	Faults bool `json:"faults"`
	// Hedge is the initial speculative-read policy (live-tunable with `smartfeed hedge` and the
	// knobs file). Its JSON form, defaults and validation are hedge.Policy's: a file names only
	// the knobs it changes, durations as strings. Default hedge.DefaultPolicy().
	Hedge hedge.Policy `json:"hedge"`
	// StandbyMaxStaleness refuses standby reads while replication lags more than this (0:
	// never refuse); live-tunable in the knobs file (standby.max_staleness). Default 30s.
	StandbyMaxStaleness jsontime.Duration `json:"standby_max_staleness"`
	// RecoverAfter: crash recovery leaves chunks younger than this alone (a request may still
	// be serving them). Default 1m.
	RecoverAfter jsontime.Duration `json:"recover_after"`
	// RecoverEvery is the period of the recovery pass (one runs at start). Default 1m.
	RecoverEvery jsontime.Duration `json:"recover_every"`
	// PrepareAfter, when positive, prepares a user's next chunk this long after a first page,
	// so that the next visit serves it with no generator call and no write before the answer:
	// this process alone shows it as fresh, from memory, and marks it served afterwards
	// (feedsvc.Config.PrepareAfter; live-tunable in the knobs file). Default 500ms; 0: off.
	PrepareAfter jsontime.Duration `json:"prepare_after"`
	// PreparedMaxAge: a prepared chunk older than this is served beside a new chunk from the
	// generator. Default 30s.
	PreparedMaxAge jsontime.Duration `json:"prepared_max_age"`
	// PrepareReturning prepares only for a user whose previous first page in the process came
	// within PreparedMaxAge: a single visit leaves no preparation behind it
	// (feedsvc.Config.PrepareReturning; live-tunable in the knobs file). Default true.
	PrepareReturning bool `json:"prepare_returning"`
	// MinChunkInterval is the least time between two generator calls for one user in the feed
	// process: a first page sooner after the last call serves the feed as it stands
	// (feedsvc.Config.MinChunkInterval; live-tunable in the knobs file). Default 1s; 0: no bound.
	MinChunkInterval jsontime.Duration `json:"min_chunk_interval"`
	// InlineMaterialize is how many served chunks the feed process materializes at once
	// itself, after the page is answered, rather than through a materialize job on Redis
	// (feedsvc.Config.InlineMaterialize; live-tunable in the knobs file). Default 4; 0: every
	// chunk is a job.
	InlineMaterialize int `json:"inline_materialize"`
	// BackgroundLanes bounds the feed process's background work for the read path
	// (preparations, inline materializations) running at once, and in a process that runs the
	// worker too its fanout deliveries' reads, so that it leaves processors to the requests
	// (feedsvc.Deps.Lanes, worker.Options.Lanes). 0, the default: half of GOMAXPROCS, at
	// least 1, on Pebble, where that work is the processors'; no bound beyond the work's own on
	// HBase, where it waits on RPCs.
	BackgroundLanes int `json:"background_lanes"`
	// BackgroundNice is how much lower than the rest of the process, in nice values, the
	// background lanes' work runs (quiet.Nice): each lane's work runs on an operating-system
	// thread of its own whose nice value is raised by this much, so that the kernel gives a
	// core to the requests' threads first (docs/read-path.md, "Background work runs at a lower
	// priority"); the recovery pass and the materialize jobs run at it too. Default 10; 0: the
	// process's priority. Linux only; elsewhere it is ignored, with a warning at start.
	BackgroundNice int `json:"background_nice"`
	// HeadCacheMB bounds the memory of the feed process's feed-head cache: each active user's
	// last first page, served again while the feed is unchanged (feedsvc.Deps.HeadCacheBytes;
	// docs/read-path.md, "The feed head in memory"). Default 64; 0: no cache.
	HeadCacheMB int `json:"head_cache_mb"`
	// BackgroundGapWait is how long that background work waits for a gap between the
	// process's requests (no public unary call in flight) before it starts anyway, so that it
	// takes the gaps rather than the processors a request and its answer wait for
	// (feedsvc.Deps.Quiet). Default 10ms; 0: it starts as soon as it has a lane.
	BackgroundGapWait jsontime.Duration `json:"background_gap_wait"`
	// MaxInflight is how many GetFeed calls the feed process runs at once; past it a call waits
	// in line (at most as many) up to AdmissionWait, then is shed with RESOURCE_EXHAUSTED and a
	// retry delay (feedsvc.Config.MaxInflight; live-tunable in the knobs file). 0, the default:
	// 64 per GOMAXPROCS.
	MaxInflight int `json:"max_inflight"`
	// AdmissionWait is how long a GetFeed call past MaxInflight waits for a slot before it is
	// shed (feedsvc.Config.AdmissionWait; live-tunable). Default 50ms; 0: shed at once.
	AdmissionWait jsontime.Duration `json:"admission_wait"`
	// MaxGenerating is how many first pages of the feed process wait on the generator at once;
	// past it a first page that would ask the generator serves the feed as it stands
	// (FRESH_STATUS_DEFERRED) and leaves the new pins in the pools for the next visit
	// (feedsvc.Config.MaxGenerating; live-tunable in the knobs file). 0, the default: two per
	// GOMAXPROCS on Pebble, no bound on HBase (where the calls wait on region servers).
	MaxGenerating int `json:"max_generating"`
}

// MaxFeedItems is the largest Feed.MaxItems, the feed service's own bound (feedsvc.Config).
const MaxFeedItems = 1 << 20

// Binary defaults the services leave off: the library's zero means "off" so that a test or an
// embedding program opts in, and the binary opts in for every deployment.
const (
	// DefaultPrepareAfter is Feed.PrepareAfter's default (feedsvc.Config.PrepareAfter: 0).
	DefaultPrepareAfter = 500 * time.Millisecond
	// DefaultMinChunkInterval is Feed.MinChunkInterval's default
	// (feedsvc.Config.MinChunkInterval: 0).
	DefaultMinChunkInterval = time.Second
	// DefaultBackgroundNice is Feed.BackgroundNice's default (quiet.NewLanes: the process's
	// priority without quiet.Nice).
	DefaultBackgroundNice = 10
)

// DefaultConfig returns the documented defaults. A setting that configures a service takes the
// service's own default (feedsvc.DefaultConfig, worker, pinlater, zencache, zenhbase, auth,
// hedge), so that the binary and the library never disagree; TestDefaultsAreTheServices holds
// them together.
func DefaultConfig() Config {
	fd := feedsvc.DefaultConfig()
	return Config{
		Storage: Storage{
			Backend:                     BackendPebble,
			DataDir:                     "data",
			PebbleCacheMB:               256,
			PebbleMemTableMB:            64,
			PebbleFeedMemTableMB:        32,
			PebbleL0CompactionThreshold: 8,
			HBase: HBase{TablePrefix: zenhbase.DefaultTablePrefix, ZookeeperRoot: "/hbase", Replication: ReplicationAuto,
				WriteFlush: jsontime.Duration(time.Millisecond)},
			ShardMap: ShardMap{ZKPath: "/smartfeed/shardmap"},
		},
		Redis: Redis{Mode: RedisSingle, Addr: "127.0.0.1:6379"},
		Cache: Cache{TTL: jsontime.Duration(zencache.DefaultTTL), NegativeTTL: jsontime.Duration(zencache.DefaultNegativeTTL)},
		GRPC:  GRPC{Addr: "127.0.0.1:9090"},
		Admin: Admin{Addr: "127.0.0.1:9091", GRPCAddr: "127.0.0.1:9092", SlowTraceOver: jsontime.Duration(100 * time.Millisecond)},
		Auth: Auth{UserRate: 50, UserBurst: 100, ProducerRate: 1000, ProducerBurst: 2000,
			MaxTokenLifetime: jsontime.Duration(auth.DefaultMaxLifetime)},
		Log:        Log{Level: "info", Format: "auto"},
		Engagement: Engagement{LearnedPercent: DefaultLearnedPercent, OnlineFeatures: true, ServedImpressions: true},
		Worker: Worker{
			Concurrency:         pinlater.DefaultConcurrency,
			Dequeuers:           pinlater.DefaultDequeuers,
			ShutdownTimeout:     jsontime.Duration(pinlater.DefaultShutdownTimeout),
			ReclaimAfter:        jsontime.Duration(pinlater.DefaultReclaimAfter),
			OutboxGrace:         jsontime.Duration(pinlater.DefaultOutboxGrace),
			OutboxRelayInterval: jsontime.Duration(pinlater.DefaultRelayInterval),
			FeatureTTL:          jsontime.Duration(worker.DefaultFeatureTTL),
			ActiveTTL:           jsontime.Duration(worker.DefaultActiveTTL),
		},
		Generator: Generator{},
		Feed: Feed{
			GeneratorDeadline:   jsontime.Duration(fd.GeneratorDeadline),
			PersistTimeout:      jsontime.Duration(fd.PersistTimeout),
			MaxItems:            fd.MaxItems,
			StandbyMaxStaleness: jsontime.Duration(30 * time.Second),
			RecoverAfter:        jsontime.Duration(time.Minute),
			RecoverEvery:        jsontime.Duration(time.Minute),
			PrepareAfter:        jsontime.Duration(DefaultPrepareAfter),
			PreparedMaxAge:      jsontime.Duration(fd.PreparedMaxAge),
			PrepareReturning:    true,
			MinChunkInterval:    jsontime.Duration(DefaultMinChunkInterval),
			InlineMaterialize:   fd.InlineMaterialize,
			HeadCacheMB:         feedsvc.DefaultHeadCacheBytes >> 20,
			MaxInflight:         fd.MaxInflight,
			BackgroundGapWait:   jsontime.Duration(feedsvc.DefaultQuietBound),
			BackgroundNice:      DefaultBackgroundNice,
			AdmissionWait:       jsontime.Duration(fd.AdmissionWait),
			Hedge:               hedge.DefaultPolicy(),
		},
		ShutdownTimeout: jsontime.Duration(30 * time.Second),
		GCHeapFloorMB:   256,
	}
}

// Uses names the storage clusters a process opens, for ValidateFor: a role that never opens a
// cluster needs no address for it (the graph role, for one, never opens the feed's).
type Uses struct {
	// Main is the cluster of the graph, the pools and the generator state (storage.hbase.pools_zk).
	Main bool
	// Feed is the materialized feed's primary and standby (storage.hbase.primary_zk and
	// storage.hbase.standby_zk).
	Feed bool
}

// UsesAll is every cluster: what a process running every role opens, and what Validate checks.
var UsesAll = Uses{Main: true, Feed: true}

// Validate reports every problem of c, or nil, for a process that opens every store.
func (c Config) Validate() error { return c.ValidateFor(UsesAll) }
