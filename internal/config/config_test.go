package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/smartfeed/smartfeed/internal/jsontime"
)

func TestDefaultConfigValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"backend", func(c *Config) { c.Storage.Backend = "mysql" }, "storage.backend"},
		{"hbase needs quorums", func(c *Config) { c.Storage.Backend = BackendHBase; c.Storage.HBase.PoolsZK = "zk:2181" }, "storage.hbase.primary_zk"},
		{"pebble needs dir", func(c *Config) { c.Storage.DataDir = "" }, "storage.data_dir"},
		{"pebble memtable", func(c *Config) { c.Storage.PebbleMemTableMB = -1 }, "storage.pebble_memtable_mb"},
		{"pebble l0 threshold", func(c *Config) { c.Storage.PebbleL0CompactionThreshold = 65 }, "storage.pebble_l0_compaction_threshold"},
		{"pebble compactions", func(c *Config) { c.Storage.PebbleCompactions = -1 }, "storage.pebble_compactions"},
		{"pebble flush after, too short", func(c *Config) { c.Storage.PebbleFlushAfter = jsontime.Duration(time.Millisecond) }, "storage.pebble_flush_after"},
		{"pebble flush after, negative", func(c *Config) { c.Storage.PebbleFlushAfter = jsontime.Duration(-time.Second) }, "storage.pebble_flush_after"},
		{"background lanes, negative", func(c *Config) { c.Feed.BackgroundLanes = -1 }, "feed.background_lanes"},
		{"background lanes, too many", func(c *Config) { c.Feed.BackgroundLanes = 1025 }, "feed.background_lanes"},
		{"pebble compaction nice, over 19", func(c *Config) { c.Storage.PebbleCompactionNice = 20 }, "storage.pebble_compaction_nice"},
		{"background nice, negative", func(c *Config) { c.Feed.BackgroundNice = -1 }, "feed.background_nice"},
		{"background nice, over 19", func(c *Config) { c.Feed.BackgroundNice = 20 }, "feed.background_nice"},
		{"head cache, negative", func(c *Config) { c.Feed.HeadCacheMB = -1 }, "feed.head_cache_mb"},
		{"head cache, too large", func(c *Config) { c.Feed.HeadCacheMB = 1<<20 + 1 }, "feed.head_cache_mb"},
		{"min chunk interval, negative", func(c *Config) { c.Feed.MinChunkInterval = -1 }, "feed.min_chunk_interval"},
		{"min chunk interval, over an hour", func(c *Config) { c.Feed.MinChunkInterval = jsontime.Duration(2 * time.Hour) }, "feed.min_chunk_interval"},
		{"slow trace bound, zero", func(c *Config) { c.Admin.SlowTraceOver = 0 }, "admin.slow_trace_over"},
		{"log level", func(c *Config) { c.Log.Level = "loud" }, "log.level"},
		{"hedge percentile", func(c *Config) { c.Feed.Hedge.Percentile = 100 }, "feed.hedge: hedge policy: percentile"},
		{"hedge budget", func(c *Config) { c.Feed.Hedge.Budget = 1.5 }, "feed.hedge: hedge policy: budget"},
		{"hedge min max", func(c *Config) { c.Feed.Hedge.Max = time.Millisecond }, "min <= max"},
		{"namespace", func(c *Config) { c.Redis.Namespace = "a-b" }, "redis.namespace"},
		{"redis mode", func(c *Config) { c.Redis.Mode = "ring" }, `redis.mode: "ring" is not single, sentinel or cluster`},
		{"sentinel without master", func(c *Config) { c.Redis.Mode = RedisSentinel; c.Redis.SentinelAddrs = "s:26379" }, "redis.sentinel_master: empty"},
		{"sentinel without sentinels", func(c *Config) { c.Redis.Mode = RedisSentinel; c.Redis.SentinelMaster = "m" }, "redis.sentinel_addrs: empty"},
		{"sentinel address without port", func(c *Config) {
			c.Redis.Mode, c.Redis.SentinelMaster, c.Redis.SentinelAddrs = RedisSentinel, "m", "s:26379,s2"
		}, `redis.sentinel_addrs: "s2" is not host:port`},
		{"cluster without nodes", func(c *Config) { c.Redis.Mode = RedisCluster; c.Redis.ClusterAddrs = " , " }, "redis.cluster_addrs: empty"},
		{"cluster database", func(c *Config) { c.Redis.Mode, c.Redis.ClusterAddrs, c.Redis.DB = RedisCluster, "n:7000", 2 }, "redis.db: 2, but a Redis Cluster has only database 0"},
		{"cluster with the join cache", func(c *Config) { c.Redis.Mode, c.Redis.ClusterAddrs, c.Cache.Enabled = RedisCluster, "n:7000", true }, "cache.enabled: the join cache's lookup script"},
		{"concurrency", func(c *Config) { c.Worker.Concurrency = 0 }, "worker.concurrency"},
		{"dequeuers", func(c *Config) { c.Worker.Dequeuers = 0 }, "worker.dequeuers"},
		{"dequeuers over slots", func(c *Config) { c.Worker.Dequeuers = c.Worker.Concurrency + 1 }, "worker.dequeuers"},
		{"reclaim after 0", func(c *Config) { c.Worker.ReclaimAfter = 0 }, "worker.reclaim_after"},
		{"gc heap floor, negative", func(c *Config) { c.GCHeapFloorMB = -1 }, "gc_heap_floor_mb"},
		{"max procs, negative", func(c *Config) { c.MaxProcs = -1 }, "max_procs"},
		{"feed max items over the feed service's bound", func(c *Config) { c.Feed.MaxItems = 2_000_000_000 }, "feed.max_items: 2000000000 is not in [1, 1048576]"},
		{"persist timeout of 0", func(c *Config) { c.Feed.PersistTimeout = 0 }, "feed.persist_timeout: 0s is not in (0, 1m]"},
		{"generator deadline over a minute", func(c *Config) { c.Feed.GeneratorDeadline = jsontime.Duration(2 * time.Minute) }, "feed.generator_deadline: 2m0s is not in (0, 1m]"},
		{"worker shutdown longer than the whole", func(c *Config) {
			c.Worker.ShutdownTimeout = jsontime.Duration(time.Minute)
			c.ShutdownTimeout = jsontime.Duration(30 * time.Second)
		}, "worker.shutdown_timeout: 1m0s is longer than shutdown_timeout 30s"},
		{"hedge fixed cutoff 0", func(c *Config) { c.Feed.Hedge.Mode = "fixed"; c.Feed.Hedge.Delay = 0 }, "feed.hedge: hedge policy: delay 0 in fixed mode"},
		{"hedge fixed cutoff 2h", func(c *Config) { c.Feed.Hedge.Mode = "fixed"; c.Feed.Hedge.Delay = 2 * time.Hour }, "feed.hedge: hedge policy: delay 2h0m0s is not in [0, 10s]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestPrecedence checks defaults < file < environment < flags.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.json")
	file := `{"redis": {"addr": "file:1", "namespace": "fromfile"}, "grpc": {"addr": "file:2"}, "feed": {"hedge": {"budget": 0.05}}}`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SMARTFEED_CONFIG":     path,
		"SMARTFEED_REDIS_ADDR": "env:1",
		"SMARTFEED_GRPC_ADDR":  "env:2",
		"SMARTFEED_HEDGE_MAX":  "250ms",
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	got, err := FromArgs(fs, []string{"--grpc-addr=flag:2", "--log-level", "debug"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Redis.Addr = "env:1"         // env over file
	want.Redis.Namespace = "fromfile" // file over default
	want.GRPC.Addr = "flag:2"         // flag over env
	want.Log.Level = "debug"
	want.Feed.Hedge.Budget = 0.05
	want.Feed.Hedge.Max = 250 * time.Millisecond
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
}

func TestFromArgsErrors(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.json")
	if err := os.WriteFile(unknown, []byte(`{"redis": {"adr": "x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown file field", []string{"--config", unknown}, nil, `unknown key "redis.adr"`},
		{"missing file", []string{"--config=" + filepath.Join(dir, "nope.json")}, nil, "read config"},
		{"bad env value", nil, map[string]string{"SMARTFEED_REDIS_DB": "seven"}, "SMARTFEED_REDIS_DB"},
		{"bad duration flag", []string{"--hedge-min=fast"}, nil, "hedge-min"},
		{"invalid result", []string{"--storage=hbase"}, nil, "storage.hbase.pools_zk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			_, err := FromArgs(fs, tt.args, func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromArgs = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestEveryFlagHasEnvTwin checks that each flag, the subcommand's own included, is set by its
// SMARTFEED_* variable.
func TestEveryFlagHasEnvTwin(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var extra string
	fs.StringVar(&extra, "demo-users", "", "a subcommand flag")
	seen := map[string]bool{}
	getenv := func(k string) string { seen[k] = true; return "" }
	if _, err := FromArgs(fs, nil, getenv); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !seen[EnvName(f.Name)] {
			t.Errorf("flag --%s: environment %s never read", f.Name, EnvName(f.Name))
		}
	})
	if extra != "" || !seen["SMARTFEED_DEMO_USERS"] {
		t.Errorf("subcommand flag: env twin not read")
	}
}

func TestMasked(t *testing.T) {
	c := DefaultConfig()
	c.Redis.Password = "hunter2"
	c.Redis.SentinelPassword = "sentinel-secret"
	out := c.Masked()
	if strings.Contains(out, "hunter2") || !strings.Contains(out, `"password": "****"`) {
		t.Fatalf("Masked() leaks or drops the password:\n%s", out)
	}
	if strings.Contains(out, "sentinel-secret") || !strings.Contains(out, `"sentinel_password": "****"`) {
		t.Fatalf("Masked() leaks or drops the sentinel password:\n%s", out)
	}
	if c.Redis.Password != "hunter2" {
		t.Fatal("Masked changed the config it printed")
	}
	if empty := DefaultConfig().Masked(); !strings.Contains(empty, `"password": ""`) {
		t.Fatalf("an empty secret should print empty:\n%s", empty)
	}
	// The printed form reads back to the same config.
	back, err := Parse([]byte(DefaultConfig().Masked()), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultConfig(), back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

// TestHelpNamesEnvTwins: every flag's help names its SMARTFEED_* twin.
func TestHelpNamesEnvTwins(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	if _, err := FromArgs(fs, nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		if !strings.Contains(f.Usage, "$"+EnvName(f.Name)) {
			t.Errorf("--%s: help %q does not name $%s", f.Name, f.Usage, EnvName(f.Name))
		}
	})
	if n < 40 {
		t.Errorf("only %d flags", n)
	}
}

func TestParseStores(t *testing.T) {
	got, err := ParseStores(" cold=hbase:10.0.0.5:2181,10.0.0.6:2181 ; b-2=pebble:/data/b;")
	if err != nil {
		t.Fatal(err)
	}
	want := []NamedStore{{Name: "cold", Backend: BackendHBase, Addr: "10.0.0.5:2181,10.0.0.6:2181"},
		{Name: "b-2", Backend: BackendPebble, Addr: "/data/b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stores (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"cold", "=hbase:x", "Cold=hbase:x", "default=hbase:x", "a=hbase:x;a=pebble:y",
		"a=redis:x", "a=hbase:", "a=hbase", strings.Repeat("a", 33) + "=hbase:x"} {
		if _, err := ParseStores(bad); err == nil {
			t.Errorf("ParseStores(%q): no error", bad)
		}
	}
	c := DefaultConfig()
	c.Storage.Stores = "x=nope:1"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "storage.stores") {
		t.Errorf("Validate with bad stores: %v", err)
	}
}

// TestParseRefuses: a config file is one JSON object naming each key once.
func TestParseRefuses(t *testing.T) {
	for _, tt := range []struct{ name, doc, want string }{
		{"null", `null`, "the document is null, not a JSON object"},
		{"null with spaces", " \n null \n", "the document is null, not a JSON object"},
		{"array", `[{"redis": {"db": 1}}]`, "the document is an array"},
		{"string", `"redis"`, "the document is a string"},
		{"number", `7`, "the document is a number"},
		{"duplicate top-level key", `{"shutdown_timeout": "10s", "shutdown_timeout": "20s"}`, `key "shutdown_timeout" appears twice`},
		{"duplicate nested key", `{"storage": {"backend": "pebble", "data_dir": "d", "backend": "hbase"}}`, `key "storage.backend" appears twice`},
		{"duplicate in another case", `{"redis": {"db": 1, "DB": 2}}`, `key "redis.DB" appears twice`},
		{"duplicate in the hedge policy", `{"feed": {"hedge": {"mode": "off", "mode": "fixed"}}}`, `key "feed.hedge.mode" appears twice`},
		{"duplicate object", `{"redis": {"db": 1}, "redis": {"addr": "x:1"}}`, `key "redis" appears twice`},
		{"trailing data", `{} {}`, "trailing data"},
		{"malformed", `{"redis": `, "parse config"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), DefaultConfig())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%s) = %v, want an error containing %q", tt.doc, err, tt.want)
			}
		})
	}
	// A huge key is not quoted whole.
	long := strings.Repeat("k", 100_000)
	if _, err := Parse([]byte(`{"`+long+`": 1, "`+long+`": 2}`), DefaultConfig()); err == nil || len(err.Error()) > 1000 {
		t.Errorf("duplicate 100,000-byte key: error of %d bytes (want under 1000): %.200v", len(fmt.Sprint(err)), err)
	}
	// The same key in two objects is two keys.
	c, err := Parse([]byte(`{"redis": {"addr": "r:1"}, "admin": {"addr": "a:2"}, "feed": {}}`), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Addr != "r:1" || c.Admin.Addr != "a:2" {
		t.Errorf("parsed redis.addr %q, admin.addr %q", c.Redis.Addr, c.Admin.Addr)
	}
}

func TestUnknownEnv(t *testing.T) {
	known := map[string]bool{"SMARTFEED_REDIS_ADDR": true, "SMARTFEED_LOG_LEVEL": true, "SMARTFEED_CONFIG": true}
	for _, tt := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"none", []string{"HOME=/root", "SMARTFEED_REDIS_ADDR=x:1", "SMARTFEED_CONFIG="}, nil},
		{"misspelled", []string{"SMARTFEED_REDIS_ADR=x:1"},
			[]string{`environment variable "SMARTFEED_REDIS_ADR" is set, but smartfeed reads no such variable; did you mean SMARTFEED_REDIS_ADDR?`}},
		{"far from any", []string{"SMARTFEED_MODE=off"},
			[]string{`environment variable "SMARTFEED_MODE" is set, but smartfeed reads no such variable`}},
		{"sorted, value never quoted", []string{"SMARTFEED_LOG_LEVL=secret-ish", "SMARTFEED_B=1"}, []string{
			`environment variable "SMARTFEED_B" is set, but smartfeed reads no such variable`,
			`environment variable "SMARTFEED_LOG_LEVL" is set, but smartfeed reads no such variable; did you mean SMARTFEED_LOG_LEVEL?`,
		}},
		{"other prefixes ignored", []string{"SMARTFEEDX=1", "XSMARTFEED_A=1", "smartfeed_redis_adr=1"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, UnknownEnv(tt.environ, known)); diff != "" {
				t.Errorf("UnknownEnv (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolveNamesFlags: an invalid value is reported with its config file key, the flag and
// the environment variable that set it.
func TestResolveNamesFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(`{"worker": {"shutdown_timeout": "1m"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"flag", []string{"--feed-max-items", "2000000000"}, nil,
			"feed.max_items: 2000000000 is not in [1, 1048576] (flag --feed-max-items, environment SMARTFEED_FEED_MAX_ITEMS)"},
		{"environment", nil, map[string]string{"SMARTFEED_REDIS_DB": "99"},
			"redis.db: 99 out of [0, 15] (flag --redis-db, environment SMARTFEED_REDIS_DB)"},
		{"file", []string{"--config", file}, nil,
			"worker.shutdown_timeout: 1m0s is longer than shutdown_timeout 30s, which bounds the whole shutdown (flag --worker-shutdown-timeout, environment SMARTFEED_WORKER_SHUTDOWN_TIMEOUT)"},
		{"hedge knob", []string{"--hedge-mode", "fixed", "--hedge-delay", "0s"}, nil,
			"feed.hedge: hedge policy: delay 0 in fixed mode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			_, err := FromArgs(fs, tt.args, func(k string) string { return tt.env[k] })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromArgs(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestValidateForUses: on HBase a process needs the quorums of the clusters it opens, and only
// those.
func TestValidateForUses(t *testing.T) {
	hb := DefaultConfig()
	hb.Storage.Backend = BackendHBase
	hb.Storage.HBase.PoolsZK = "zk-a:2181"
	if err := hb.ValidateFor(Uses{Main: true}); err != nil {
		t.Errorf("main store only, its quorum set: %v", err)
	}
	for _, u := range []Uses{{Feed: true}, UsesAll} {
		if err := hb.ValidateFor(u); err == nil || !strings.Contains(err.Error(), "storage.hbase.primary_zk") {
			t.Errorf("ValidateFor(%+v) without the feed's quorums = %v, want storage.hbase.primary_zk named", u, err)
		}
	}
	hb.Storage.HBase.PoolsZK = ""
	hb.Storage.HBase.PrimaryZK, hb.Storage.HBase.StandbyZK = "zk-b:2181", "zk-c:2181"
	if err := hb.ValidateFor(Uses{Feed: true}); err != nil {
		t.Errorf("feed stores only, their quorums set: %v", err)
	}
}

// TestConfigFileErrorsNameFileAndKeys: a config file with unknown keys is refused naming the
// file and every unknown key, with its path, at once; one with a value of the wrong type names
// the file and the field.
func TestConfigFileErrorsNameFileAndKeys(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"unknown keys", `{"storage": {"backend": "pebble", "bogus": 1, "hbase": {"pools_zkk": "x"}}, "nope": 2, "redis": {"adr": "x", "addr": "y"}, "feed": {"hedge": {"mode": "off"}}}`,
			`config file "DIR/unknown keys.json": parse config: unknown keys "nope", "redis.adr", "storage.bogus", "storage.hbase.pools_zkk": no such setting (the keys are the "config file key" column of docs/operations.md)`},
		{"one unknown key", `{"redis": {"Addr": "x", "dbb": 1}}`,
			`config file "DIR/one unknown key.json": parse config: unknown key "redis.dbb": no such setting (the keys are the "config file key" column of docs/operations.md)`},
		{"wrong type", `{"redis": {"db": "one"}}`,
			`config file "DIR/wrong type.json": parse config: json: cannot unmarshal string into Go struct field Redis.redis.db of type int`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, DefaultConfig())
			got := ""
			if err != nil {
				got = strings.ReplaceAll(err.Error(), dir, "DIR")
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Load (-want +got):\n%s", d)
			}
		})
	}
}

// TestResolveKeepsSliceFlags: a slice flag of the command beside the config's flags keeps the
// items given, once each, also when its environment twin is set.
func TestResolveKeepsSliceFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"flag only", nil},
		{"flag over its environment twin", map[string]string{"SMARTFEED_SIZES": "7,8,9"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			var sizes []int
			var rates []float64
			fs.IntSliceVar(&sizes, "sizes", nil, "sizes")
			fs.Float64SliceVar(&rates, "rates", []float64{1}, "rates")
			var c Config
			Bind(fs, &c)
			if err := fs.Parse([]string{"--sizes", "30000,2000", "--rates", "200,1000"}); err != nil {
				t.Fatal(err)
			}
			if err := Resolve(fs, &c, DefaultConfig(), func(k string) string { return tt.env[k] }); err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if diff := cmp.Diff([]int{30000, 2000}, sizes); diff != "" {
				t.Errorf("--sizes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]float64{200, 1000}, rates); diff != "" {
				t.Errorf("--rates (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRedisModesAccepted: each Redis mode with what it needs validates, from flags and from the
// environment (the sentinels' password from SMARTFEED_REDIS_SENTINEL_PASSWORD, never a flag).
func TestRedisModesAccepted(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want Redis
	}{
		{"single by default", nil, nil, DefaultConfig().Redis},
		{"sentinel from flags", []string{"--redis-mode", "sentinel", "--redis-sentinel-master", "pinlater",
			"--redis-sentinel-addrs", "127.0.0.1:26379,127.0.0.1:26380", "--redis-username", "app"},
			map[string]string{"SMARTFEED_REDIS_SENTINEL_PASSWORD": "s3cret"},
			Redis{Mode: RedisSentinel, Addr: "127.0.0.1:6379", SentinelMaster: "pinlater",
				SentinelAddrs: "127.0.0.1:26379,127.0.0.1:26380", Username: "app", SentinelPassword: "s3cret"}},
		{"cluster from the environment", nil,
			map[string]string{"SMARTFEED_REDIS_MODE": "cluster", "SMARTFEED_REDIS_CLUSTER_ADDRS": "n1:7000,n2:7000"},
			Redis{Mode: RedisCluster, Addr: "127.0.0.1:6379", ClusterAddrs: "n1:7000,n2:7000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromArgs(pflag.NewFlagSet("t", pflag.ContinueOnError), tt.args, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Redis); diff != "" {
				t.Errorf("redis config (-want +got):\n%s", diff)
			}
		})
	}
	if got := SplitAddrs(" a:1, ,b:2 "); !cmp.Equal(got, []string{"a:1", "b:2"}) {
		t.Errorf("SplitAddrs = %q", got)
	}
}

// TestRedisWhere: the banner names the Redis each mode points at, not the unused address.
func TestRedisWhere(t *testing.T) {
	for _, tc := range []struct {
		r    Redis
		want string
	}{
		{Redis{Mode: "single", Addr: "127.0.0.1:6379"}, "127.0.0.1:6379"},
		{Redis{Addr: "127.0.0.1:6380"}, "127.0.0.1:6380"},
		{Redis{Mode: "sentinel", Addr: "127.0.0.1:6379", SentinelMaster: "smartfeed", SentinelAddrs: "a:1,b:2"}, `Sentinel master "smartfeed" via a:1,b:2`},
		{Redis{Mode: "cluster", Addr: "127.0.0.1:6379", ClusterAddrs: "c:1,d:2"}, "Cluster c:1,d:2"},
	} {
		if d := cmp.Diff(tc.want, tc.r.Where()); d != "" {
			t.Errorf("%+v: (-want +got)\n%s", tc.r, d)
		}
	}
}
