package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
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
		{"pebble flush after, too short", func(c *Config) { c.Storage.PebbleFlushAfter = Duration(time.Millisecond) }, "storage.pebble_flush_after"},
		{"pebble flush after, negative", func(c *Config) { c.Storage.PebbleFlushAfter = Duration(-time.Second) }, "storage.pebble_flush_after"},
		{"background lanes, negative", func(c *Config) { c.Feed.BackgroundLanes = -1 }, "feed.background_lanes"},
		{"background lanes, too many", func(c *Config) { c.Feed.BackgroundLanes = 1025 }, "feed.background_lanes"},
		{"min chunk interval, negative", func(c *Config) { c.Feed.MinChunkInterval = -1 }, "feed.min_chunk_interval"},
		{"min chunk interval, over an hour", func(c *Config) { c.Feed.MinChunkInterval = Duration(2 * time.Hour) }, "feed.min_chunk_interval"},
		{"slow trace bound, zero", func(c *Config) { c.Admin.SlowTraceOver = 0 }, "admin.slow_trace_over"},
		{"log level", func(c *Config) { c.Log.Level = "loud" }, "log.level"},
		{"hedge percentile", func(c *Config) { c.Feed.Hedge.Percentile = 100 }, "feed.hedge: hedge policy: percentile"},
		{"hedge budget", func(c *Config) { c.Feed.Hedge.Budget = 1.5 }, "feed.hedge: hedge policy: budget"},
		{"hedge min max", func(c *Config) { c.Feed.Hedge.Max = time.Millisecond }, "min <= max"},
		{"namespace", func(c *Config) { c.Redis.Namespace = "a-b" }, "redis.namespace"},
		{"concurrency", func(c *Config) { c.Worker.Concurrency = 0 }, "worker.concurrency"},
		{"dequeuers", func(c *Config) { c.Worker.Dequeuers = 0 }, "worker.dequeuers"},
		{"dequeuers over slots", func(c *Config) { c.Worker.Dequeuers = c.Worker.Concurrency + 1 }, "worker.dequeuers"},
		{"reclaim after 0", func(c *Config) { c.Worker.ReclaimAfter = 0 }, "worker.reclaim_after"},
		{"gc heap floor, negative", func(c *Config) { c.GCHeapFloorMB = -1 }, "gc_heap_floor_mb"},
		{"max procs, negative", func(c *Config) { c.MaxProcs = -1 }, "max_procs"},
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
		{"unknown file field", []string{"--config", unknown}, nil, "unknown field"},
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
	out := c.Masked()
	if strings.Contains(out, "hunter2") || !strings.Contains(out, `"password": "****"`) {
		t.Fatalf("Masked() leaks or drops the password:\n%s", out)
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
