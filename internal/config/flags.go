package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/jsontime"
	"github.com/smartfeed/smartfeed/internal/quote"
)

// EnvPrefix starts the environment twin of every flag: --redis-addr is SMARTFEED_REDIS_ADDR.
const EnvPrefix = "SMARTFEED_"

// ConfigFlag names the config file flag (its twin is SMARTFEED_CONFIG).
const ConfigFlag = "config"

// NoEnvAnnotation marks a flag that has no environment twin (a destructive switch like
// `jobs delete --all`, which a variable left set in a shell must not turn on).
const NoEnvAnnotation = "smartfeed_no_env"

// EnvName returns the environment variable twin of a flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Bind defines --config and a flag for every field of c on fs, each defaulting to the field's
// current value and writing into it when parsed; each flag's help names its SMARTFEED_* twin.
// Resolve turns the parsed flags into the configuration.
func Bind(fs *pflag.FlagSet, c *Config) {
	s, d, i, f, b := fs.StringVar, durVar(fs), fs.IntVar, fs.Float64Var, fs.BoolVar
	s(new(string), ConfigFlag, "", "JSON config file (applied over the defaults, under the environment and the flags)")
	s(&c.Storage.Backend, "storage", c.Storage.Backend, "storage backend: pebble or hbase")
	s(&c.Storage.DataDir, "data-dir", c.Storage.DataDir, "pebble data directory")
	bindPebble(fs, c)
	s(&c.Storage.HBase.PoolsZK, "hbase-pools-zk", c.Storage.HBase.PoolsZK, "ZooKeeper quorum of the HBase holding the graph, pools and generator state")
	s(&c.Storage.HBase.PrimaryZK, "hbase-primary-zk", c.Storage.HBase.PrimaryZK, "ZooKeeper quorum of the HBase holding the materialized feed (primary)")
	s(&c.Storage.HBase.StandbyZK, "hbase-standby-zk", c.Storage.HBase.StandbyZK, "ZooKeeper quorum of the HBase holding the materialized feed (standby)")
	s(&c.Storage.HBase.TablePrefix, "hbase-table-prefix", c.Storage.HBase.TablePrefix, "prefix of every HBase table name")
	s(&c.Storage.HBase.ZookeeperRoot, "hbase-zk-root", c.Storage.HBase.ZookeeperRoot, "HBase znode")
	d(&c.Storage.HBase.WriteFlush, "hbase-write-flush", c.Storage.HBase.WriteFlush, "how long the HBase client batches writes before sending them (reads never wait)")
	s(&c.Storage.HBase.Replication, "hbase-replication", c.Storage.HBase.Replication, "who copies the feed to the standby: hbase (HBase replication), app (feedsvc's change log) or auto")
	s(&c.Storage.ShardMap.File, "shard-map-file", c.Storage.ShardMap.File, "JSON shard map, watched and applied live (empty: the default map)")
	s(&c.Storage.ShardMap.ZK, "shard-map-zk", c.Storage.ShardMap.ZK, "ZooKeeper quorum holding the live shard map (empty: none)")
	s(&c.Storage.ShardMap.ZKPath, "shard-map-zk-path", c.Storage.ShardMap.ZKPath, "znode of the live shard map")
	s(&c.Storage.Stores, "stores", c.Storage.Stores, "extra stores shard ranges may live on: NAME=hbase:QUORUM or NAME=pebble:DIR, separated by ';'")
	bindRedis(fs, c)
	bindAdmin(fs, c)
	b(&c.Cache.Enabled, "cache", c.Cache.Enabled, "cache graph objects, edge pages and counts in Redis (read-through, invalidated on write)")
	d(&c.Cache.TTL, "cache-ttl", c.Cache.TTL, "lifetime of a cached object, edge page or count")
	d(&c.Cache.NegativeTTL, "cache-negative-ttl", c.Cache.NegativeTTL, "lifetime of a cached miss")
	s(&c.GRPC.Addr, "grpc-addr", c.GRPC.Addr, "gRPC listen address (services, health, reflection)")
	s(&c.Auth.JWKSFile, "auth-jwks-file", c.Auth.JWKSFile, "JWKS of the identity provider: callers of the public port present its tokens")
	s(&c.Auth.Issuer, "auth-issuer", c.Auth.Issuer, "required iss of the tokens (empty: any)")
	s(&c.Auth.Audience, "auth-audience", c.Auth.Audience, "required aud of the tokens (empty: any)")
	b(&c.Auth.Insecure, "insecure", c.Auth.Insecure, "serve without authentication or without TLS on a non-loopback address")
	f(&c.Auth.UserRate, "auth-user-rate", c.Auth.UserRate, "calls per second each user may make on the public port (0: no limit)")
	i(&c.Auth.UserBurst, "auth-user-burst", c.Auth.UserBurst, "burst of a user's calls")
	f(&c.Auth.ProducerRate, "auth-producer-rate", c.Auth.ProducerRate, "calls per second each producer (scope ingest:publish) may make (0: no limit)")
	i(&c.Auth.ProducerBurst, "auth-producer-burst", c.Auth.ProducerBurst, "burst of a producer's calls")
	d(&c.Auth.MaxTokenLifetime, "auth-max-token-lifetime", c.Auth.MaxTokenLifetime, "longest lifetime (exp - iat) of a bearer token; longer-lived tokens are refused")
	s(&c.TLS.CertFile, "tls-cert-file", c.TLS.CertFile, "PEM certificate (chain) of every listener, reloaded when it changes")
	s(&c.TLS.KeyFile, "tls-key-file", c.TLS.KeyFile, "PEM key of the certificate")
	s(&c.TLS.ClientCAFile, "tls-client-ca-file", c.TLS.ClientCAFile, "PEM CAs whose client certificates every listener requires (mTLS)")
	s(&c.Generator.CAFile, "generator-ca-file", c.Generator.CAFile, "PEM CAs to verify the generator's TLS certificate with (feedsvc)")
	s(&c.Log.Level, "log-level", c.Log.Level, "log level: debug, info, warn, error")
	s(&c.Log.Format, "log-format", c.Log.Format, "log format: json, console, or auto (console on a terminal, JSON otherwise)")
	i(&c.Worker.Concurrency, "worker-concurrency", c.Worker.Concurrency, "pinlater tasks run at once")
	b(&c.Worker.StrictPriority, "worker-strict-priority", c.Worker.StrictPriority, "drain higher-priority queues first")
	i(&c.Worker.Dequeuers, "worker-dequeuers", c.Worker.Dequeuers, "Asynq processors sharing the worker's slots, each taking tasks one at a time (more helps handlers that wait on I/O)")
	d(&c.Worker.ShutdownTimeout, "worker-shutdown-timeout", c.Worker.ShutdownTimeout, "how long running tasks may finish at shutdown")
	d(&c.Worker.ReclaimAfter, "worker-reclaim-after", c.Worker.ReclaimAfter, "a task whose Asynq lease ended this long ago (dead worker, killed Redis) goes back to its queue (negative: off, Asynq's recoverer alone)")
	d(&c.Worker.OutboxGrace, "outbox-grace", c.Worker.OutboxGrace, "how long an outbox event may be unknown to Redis before the relay enqueues it again")
	d(&c.Worker.OutboxRelayInterval, "outbox-relay-interval", c.Worker.OutboxRelayInterval, "how often the relay walks the outbox")
	d(&c.Worker.FeatureTTL, "worker-feature-ttl", c.Worker.FeatureTTL, "how long the fanout keeps a receiver's scoring features (affinity, interest follows) once read (0: read for every pin)")
	d(&c.Worker.ActiveTTL, "worker-active-ttl", c.Worker.ActiveTTL, "how long the fanout keeps a receiver's last-active row once it said deliver (0: read for every pin)")
	d(&c.Worker.UserDeleteRecheck, "worker-user-delete-recheck", c.Worker.UserDeleteRecheck, "how long after a user's deletion its leftovers (rows of fanouts under way) are deleted once more (0: the longest fanout task run + the active TTL + 1m)")
	bindScoring(fs, c)
	s(&c.Generator.ConfigFile, "generator-config", c.Generator.ConfigFile, "generator JSON config file (empty: defaults)")
	s(&c.Generator.Addr, "generator-addr", c.Generator.Addr, "gRPC target of the generator for feedsvc (empty: in process)")
	s(&c.Generator.TokenFile, "generator-token-file", c.Generator.TokenFile, "file holding the token (scope generator) sent to an authenticating generator")
	d(&c.Feed.GeneratorDeadline, "feed-generator-deadline", c.Feed.GeneratorDeadline, "deadline of the generator call of a first page")
	d(&c.Feed.PersistTimeout, "feed-persist-timeout", c.Feed.PersistTimeout, "bound of recording a served chunk on the primary before the answer; past it the page has no fresh chunk (PERSIST_FAILED)")
	i(&c.Feed.MaxItems, "feed-max-items", c.Feed.MaxItems, "maximum length of a materialized feed")
	s(&c.Feed.KnobsFile, "feed-knobs", c.Feed.KnobsFile, "feedsvc knobs file, watched for live changes")
	d(&c.Feed.StandbyMaxStaleness, "feed-standby-max-staleness", c.Feed.StandbyMaxStaleness, "refuse standby reads while replication lags more than this (0: never)")
	d(&c.Feed.RecoverAfter, "feed-recover-after", c.Feed.RecoverAfter, "crash recovery leaves chunks younger than this alone")
	d(&c.Feed.RecoverEvery, "feed-recover-every", c.Feed.RecoverEvery, "period of the crash recovery pass")
	d(&c.Feed.PrepareAfter, "feed-prepare-after", c.Feed.PrepareAfter, "prepare a user's next chunk this long after a first page (0: off)")
	d(&c.Feed.PreparedMaxAge, "feed-prepared-max-age", c.Feed.PreparedMaxAge, "serve a prepared chunk older than this beside a new one")
	fs.BoolVar(&c.Feed.PrepareReturning, "feed-prepare-returning", c.Feed.PrepareReturning, "prepare only for a user whose previous first page came within --feed-prepared-max-age (false: after every first page)")
	d(&c.Feed.MinChunkInterval, "feed-min-chunk-interval", c.Feed.MinChunkInterval, "least time between two generator calls for one user; a first page sooner serves the feed as it stands (0: no bound)")
	i(&c.Feed.InlineMaterialize, "feed-inline-materialize", c.Feed.InlineMaterialize, "served chunks materialized at once in process instead of as Redis jobs (0: all as jobs)")
	bindFeedResources(fs, c)
	i(&c.Feed.MaxGenerating, "feed-max-generating", c.Feed.MaxGenerating, "first pages waiting on the generator at once; past it a first page serves the feed as it stands (fresh status DEFERRED) and leaves the new pins in the pools (0: two per GOMAXPROCS on pebble, no bound on hbase)")
	i(&c.Feed.MaxInflight, "feed-max-inflight", c.Feed.MaxInflight, "GetFeed calls run at once; past it a call waits in line up to --feed-admission-wait, then is shed with RESOURCE_EXHAUSTED (0: 64 per GOMAXPROCS)")
	d(&c.Feed.AdmissionWait, "feed-admission-wait", c.Feed.AdmissionWait, "how long a GetFeed call past --feed-max-inflight waits for a slot before it is shed (0: shed at once)")
	b(&c.Feed.Faults, "feed-faults", c.Feed.Faults, "enable FeedAdmin fault injection on the feed stores")
	bindHedge(fs, c)
	d(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound of the whole graceful shutdown")
	i(&c.MaxProcs, "max-procs", c.MaxProcs, "GOMAXPROCS (0: twice the CPUs, unless the GOMAXPROCS environment variable is set)")
	i(&c.GCHeapFloorMB, "gc-heap-floor-mb", c.GCHeapFloorMB, "least heap goal of Go's collector, in MiB: GOGC is raised while the live heap is small (0: GOGC as set)")
	b(&c.WaitForDeps, "wait-for-deps", c.WaitForDeps, "at start, wait (with backoff) for an unreachable Redis or HBase instead of exiting with an error")
	NameEnvTwins(fs)
}

// bindPebble defines the flags of the Pebble databases.
func bindPebble(fs *pflag.FlagSet, c *Config) {
	d, i, b := durVar(fs), fs.IntVar, fs.BoolVar
	i(&c.Storage.PebbleCacheMB, "pebble-cache-mb", c.Storage.PebbleCacheMB, "block cache of each pebble database, in MiB (0: pebble's 8 MiB)")
	i(&c.Storage.PebbleL0CompactionThreshold, "pebble-l0-compaction-threshold", c.Storage.PebbleL0CompactionThreshold, "L0 sublevels each pebble database lets accumulate before compacting them (0: pebble's 4)")
	i(&c.Storage.PebbleCompactionNice, "pebble-compaction-nice", c.Storage.PebbleCompactionNice, "how many nice values lower than the rest of the process the pebble databases' compactions below L0 run, each on its own thread (0: the process's priority; Linux only)")
	i(&c.Storage.PebbleCompactions, "pebble-compactions", c.Storage.PebbleCompactions, "compactions the process's pebble databases run at once, all together; one falling behind may run a second past it (0: no shared bound, one per database)")
	i(&c.Storage.PebbleMemTableMB, "pebble-memtable-mb", c.Storage.PebbleMemTableMB, "memtable of each pebble database, in MiB (0: pebble's 4 MiB)")
	i(&c.Storage.PebbleFeedMemTableMB, "pebble-feed-memtable-mb", c.Storage.PebbleFeedMemTableMB, "memtable of the feed's pebble databases (primary, standby), in MiB (0: --pebble-memtable-mb)")
	d(&c.Storage.PebbleFlushAfter, "pebble-flush-after", c.Storage.PebbleFlushAfter, "flush a pebble memtable of at least 1 MiB once it is this old, so reads stop stepping over its deleted rows (0: only when full)")
	b(&c.Storage.PebbleNoSync, "pebble-no-sync", c.Storage.PebbleNoSync, "skip fsync on pebble writes (demos, benchmarks)")
}

// bindAdmin binds the admin listeners' settings, and those the admin commands dial them with.
func bindAdmin(fs *pflag.FlagSet, c *Config) {
	s, b, d := fs.StringVar, fs.BoolVar, durVar(fs)
	s(&c.Admin.Addr, "admin-addr", c.Admin.Addr, "admin HTTP listen address (/metrics, /healthz, /readyz, /debug/pprof if enabled); empty disables it")
	s(&c.Admin.GRPCAddr, "admin-grpc-addr", c.Admin.GRPCAddr, "admin gRPC listen address (FeedAdmin); empty disables it")
	s(&c.Admin.TokenFile, "admin-token-file", c.Admin.TokenFile, "file holding the admin credential the admin gRPC port requires")
	s(&c.Admin.CAFile, "admin-ca-file", c.Admin.CAFile, "CA certificate the admin commands (hedge, shards move) verify the admin ports' TLS against (empty: plaintext)")
	s(&c.Admin.ServerName, "admin-server-name", c.Admin.ServerName, "name the admin commands verify the admin port's certificate for (empty: the host dialled)")
	b(&c.Admin.Pprof, "pprof", c.Admin.Pprof, "serve /debug/pprof on the admin HTTP listener")
	s(&c.Admin.SlowTraceDir, "slow-trace-dir", c.Admin.SlowTraceDir, "write the last seconds of the execution trace to this directory when a public gRPC call is slow (empty: off)")
	d(&c.Admin.SlowTraceOver, "slow-trace-over", c.Admin.SlowTraceOver, "a public gRPC call slower than this has its trace written (with --slow-trace-dir)")
}

// bindRedis defines the flags of the pinlater Redis settings (c.Redis) on fs, as Bind does.
// The passwords themselves have no flag, only their files do (see Redis.Password).
func bindRedis(fs *pflag.FlagSet, c *Config) {
	s, i, b := fs.StringVar, fs.IntVar, fs.BoolVar
	s(&c.Redis.Mode, "redis-mode", c.Redis.Mode, "shape of the pinlater Redis: single (--redis-addr), sentinel (--redis-sentinel-master, --redis-sentinel-addrs) or cluster (--redis-cluster-addrs)")
	s(&c.Redis.Addr, "redis-addr", c.Redis.Addr, "pinlater Redis host:port (--redis-mode single)")
	s(&c.Redis.SentinelMaster, "redis-sentinel-master", c.Redis.SentinelMaster, "name the sentinels monitor the Redis primary under (--redis-mode sentinel)")
	s(&c.Redis.SentinelAddrs, "redis-sentinel-addrs", c.Redis.SentinelAddrs, "the sentinels, host:port,host:port,... (--redis-mode sentinel)")
	s(&c.Redis.ClusterAddrs, "redis-cluster-addrs", c.Redis.ClusterAddrs, "some nodes of the Redis Cluster, host:port,... (--redis-mode cluster)")
	s(&c.Redis.Username, "redis-username", c.Redis.Username, "Redis ACL user (empty: the default user)")
	s(&c.Redis.SentinelUsername, "redis-sentinel-username", c.Redis.SentinelUsername, "ACL user of the sentinels (empty: none)")
	s(&c.Redis.SentinelPasswordFile, "redis-sentinel-password-file", c.Redis.SentinelPasswordFile, "file holding the sentinels' password (or set SMARTFEED_REDIS_SENTINEL_PASSWORD; never a flag)")
	s(&c.Redis.PasswordFile, "redis-password-file", c.Redis.PasswordFile, "file holding the pinlater Redis password (or set SMARTFEED_REDIS_PASSWORD; never a flag)")
	i(&c.Redis.DB, "redis-db", c.Redis.DB, "pinlater Redis database")
	s(&c.Redis.Namespace, "redis-namespace", c.Redis.Namespace, "prefix of pinlater keys and queues")
	b(&c.Redis.NamespaceTakeover, "redis-namespace-takeover", c.Redis.NamespaceTakeover, "purge and claim a namespace another (gone) deployment owns")
}

// bindFeedResources defines the flags of what the feed process's read path may hold beside the
// requests (background lanes, the feed-head cache's memory) on fs, as Bind does.
func bindFeedResources(fs *pflag.FlagSet, c *Config) {
	d, i := durVar(fs), fs.IntVar
	i(&c.Feed.BackgroundNice, "feed-background-nice", c.Feed.BackgroundNice, "how many nice values lower than the rest of the process the background lanes' work runs, on threads of their own (0: the process's priority; Linux only)")
	d(&c.Feed.BackgroundGapWait, "feed-background-gap-wait", c.Feed.BackgroundGapWait, "how long the read path's background tasks wait for a gap between requests before they start anyway (0: they do not wait)")
	i(&c.Feed.BackgroundLanes, "feed-background-lanes", c.Feed.BackgroundLanes, "background tasks of the read path (preparations, inline materializations, and in the same process the fanout's reads) run at once (0: half of GOMAXPROCS, at least 1, on pebble; no bound on hbase)")
	i(&c.Feed.HeadCacheMB, "feed-head-cache-mb", c.Feed.HeadCacheMB, "memory of the feed-head cache, in MiB: each active user's last first page, served again while the feed's head version is unchanged (0: no cache)")
}

func durVar(fs *pflag.FlagSet) func(p *jsontime.Duration, name string, v jsontime.Duration, usage string) {
	return func(p *jsontime.Duration, name string, v jsontime.Duration, usage string) {
		fs.DurationVar((*time.Duration)(p), name, v.D(), usage)
	}
}

// hasEnv reports whether f has an environment twin: every flag but --help, hidden aliases and
// those marked with NoEnvAnnotation.
func hasEnv(f *pflag.Flag) bool {
	_, no := f.Annotations[NoEnvAnnotation]
	return f.Name != "help" && !f.Hidden && !no
}

// EnvTwin returns the environment variable twin of f, or false when f has none.
func EnvTwin(f *pflag.Flag) (string, bool) {
	if !hasEnv(f) {
		return "", false
	}
	return EnvName(f.Name), true
}

// NameEnvTwins appends " [$SMARTFEED_…]" to the help of every flag of fs that has a twin, once.
func NameEnvTwins(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if tw := EnvName(f.Name); hasEnv(f) && !strings.Contains(f.Usage, tw) {
			f.Usage += " [$" + tw + "]"
		}
	})
}

// ApplyEnv sets every flag of fs that was not given on the command line from its SMARTFEED_*
// twin, when that is set: the environment sets the default, a flag overrides it.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || !hasEnv(f) {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
			}
		}
	})
	return errors.Join(errs...)
}

// Resolve builds the configuration from fs, parsed, which holds the flags Bind bound to c: base,
// then the file named by --config (or SMARTFEED_CONFIG), then the environment twins of the
// flags, then the flags given. Flags of fs that Bind did not define (a subcommand's own) get
// their environment twins too. getenv is os.Getenv in production. The result, validated, is
// left in c.
func Resolve(fs *pflag.FlagSet, c *Config, base Config, getenv func(string) string) error {
	return ResolveFor(fs, c, base, getenv, nil)
}

// ResolveFor is Resolve for a process that opens only the stores uses names for the resolved
// configuration (ValidateFor); a nil uses means every store (Validate).
func ResolveFor(fs *pflag.FlagSet, c *Config, base Config, getenv func(string) string, uses func(Config) Uses) error {
	// What the command line (or an earlier ApplyEnv) set, to apply again over the file.
	// A slice flag is kept as its items: its String form ("[a,b]") does not parse back, and
	// Set on a slice flag already given appends instead of replacing.
	type set struct {
		name, value string
		items       []string
		slice       pflag.SliceValue
	}
	var given []set
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			given = append(given, set{name: f.Name, items: sv.GetSlice(), slice: sv})
			return
		}
		given = append(given, set{name: f.Name, value: f.Value.String()})
	})
	path := getenv(EnvName(ConfigFlag))
	if f := fs.Lookup(ConfigFlag); f != nil && f.Changed {
		path = f.Value.String()
	}
	*c = base
	if path != "" {
		loaded, err := Load(path, base)
		if err != nil {
			return err
		}
		*c = loaded
	}
	if err := ApplyEnv(fs, getenv); err != nil {
		return err
	}
	for _, g := range given {
		if g.slice != nil {
			if err := g.slice.Replace(g.items); err != nil {
				return fmt.Errorf("--%s: %w", g.name, err)
			}
			continue
		}
		if err := fs.Set(g.name, g.value); err != nil {
			return fmt.Errorf("--%s: %w", g.name, err)
		}
	}
	// Secrets come from the config file, files or the environment, never from flags (a flag
	// shows in ps and in /debug/pprof/cmdline).
	if v := getenv(EnvPrefix + "REDIS_PASSWORD"); v != "" {
		c.Redis.Password = v
	}
	if c.Redis.PasswordFile != "" {
		b, err := os.ReadFile(c.Redis.PasswordFile)
		if err != nil {
			return fmt.Errorf("redis password file: %w", err)
		}
		c.Redis.Password = strings.TrimRight(string(b), "\r\n")
	}
	if v := getenv(EnvPrefix + "REDIS_SENTINEL_PASSWORD"); v != "" {
		c.Redis.SentinelPassword = v
	}
	if c.Redis.SentinelPasswordFile != "" {
		b, err := os.ReadFile(c.Redis.SentinelPasswordFile)
		if err != nil {
			return fmt.Errorf("redis sentinel password file: %w", err)
		}
		c.Redis.SentinelPassword = strings.TrimRight(string(b), "\r\n")
	}
	u := UsesAll
	if uses != nil {
		u = uses(*c)
	}
	if err := c.ValidateFor(u); err != nil {
		return fmt.Errorf("invalid config:\n%w", nameFlags(err, fs, c))
	}
	return nil
}

// nameFlags returns err, a join of Validate's errors, with each error that starts with a
// config file key ("feed.max_items: ...") followed by the flag and environment variable that
// set that key, when fs has one bound to c's field: "(flag --feed-max-items, environment
// SMARTFEED_FEED_MAX_ITEMS)".
func nameFlags(err error, fs *pflag.FlagSet, c *Config) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	// The config file key of each leaf field of c, by its address.
	keys := map[uintptr]string{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			f := v.Field(i)
			if f.Kind() == reflect.Struct {
				walk(f, prefix+name+".")
				continue
			}
			keys[f.Addr().Pointer()] = prefix + name
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	flagOf := map[string]*pflag.Flag{}
	fs.VisitAll(func(f *pflag.Flag) {
		if v := reflect.ValueOf(f.Value); v.Kind() == reflect.Pointer {
			if key, ok := keys[v.Pointer()]; ok {
				flagOf[key] = f
			}
		}
	})
	var out []error
	for _, e := range joined.Unwrap() {
		key, _, _ := strings.Cut(e.Error(), ":")
		key, _, _ = strings.Cut(key, " ")
		if f, ok := flagOf[key]; ok {
			how := "flag --" + f.Name
			if env, ok := EnvTwin(f); ok {
				how += ", environment " + env
			}
			e = fmt.Errorf("%w (%s)", e, how)
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// FromArgs builds the configuration of one process from args: Bind on fs (which may already
// hold a subcommand's own flags), parse, Resolve over DefaultConfig.
func FromArgs(fs *pflag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	return FromArgsOver(DefaultConfig(), fs, args, getenv)
}

// FromArgsOver is FromArgs starting from base instead of DefaultConfig.
func FromArgsOver(base Config, fs *pflag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	c := base
	Bind(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	err := Resolve(fs, &c, base, getenv)
	return c, err
}

// ExtraEnv are the SMARTFEED_* variables read that are no flag's twin: the config file's path
// (the twin of --config, defined by Bind) and the Redis and Sentinel passwords, which have no flag.
var ExtraEnv = []string{EnvName(ConfigFlag), EnvPrefix + "REDIS_PASSWORD", EnvPrefix + "REDIS_SENTINEL_PASSWORD"}

// UnknownEnv returns a warning for each SMARTFEED_* variable of environ ("NAME=value" entries,
// as os.Environ gives them) that known does not hold, sorted: a misspelled variable would
// otherwise be ignored without a word. The warning names the known variable it most likely
// misspells, if one is close; it never quotes the value.
func UnknownEnv(environ []string, known map[string]bool) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || known[name] {
			continue
		}
		msg := fmt.Sprintf("environment variable %s is set, but smartfeed reads no such variable", quote.Q(name))
		if near := nearest(name, known); near != "" {
			msg += "; did you mean " + near + "?"
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// nearest returns the name of known closest to name within an edit distance of 2 (the first in
// sorted order on a tie), or "".
func nearest(name string, known map[string]bool) string {
	best, bestD := "", 3
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if d := editDistance(name, k, bestD); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or at least limit when it is limit or more.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// bindHedge binds the hedged reads' flags.
func bindHedge(fs *pflag.FlagSet, c *Config) {
	s, d, f := fs.StringVar, durVar(fs), fs.Float64Var
	h := &c.Feed.Hedge
	s((*string)(&h.Mode), "hedge-mode", string(h.Mode), "hedging mode: off, fixed or percentile")
	d((*jsontime.Duration)(&h.Delay), "hedge-delay", jsontime.Duration(h.Delay), "hedging cutoff in fixed mode")
	f(&h.Percentile, "hedge-percentile", h.Percentile, "percentile of the primary's latency used as the cutoff")
	d((*jsontime.Duration)(&h.Min), "hedge-min", jsontime.Duration(h.Min), "lowest percentile cutoff")
	d((*jsontime.Duration)(&h.Max), "hedge-max", jsontime.Duration(h.Max), "highest percentile cutoff")
	f(&c.Feed.Hedge.Budget, "hedge-budget", c.Feed.Hedge.Budget, "largest fraction of calls that may hedge on the cutoff")
	f(&c.Feed.Hedge.Warmup, "hedge-warmup", c.Feed.Hedge.Warmup, "fraction of calls that also read the standby")
}
