// Package testenv hands integration tests the addresses of the real Redis and HBase that
// `make test` (scripts/with-services.sh) starts, and skips or fails clearly when they are absent.
//
// The contract, for Redis and HBase alike:
//   - under `go test -short` the test is skipped (unit loop, no services);
//   - with SMARTFEED_NO_REDIS=1 / SMARTFEED_NO_HBASE=1 it is skipped, saying so;
//   - with SMARTFEED_REDIS_ADDR / SMARTFEED_HBASE_ZK set it gets that address;
//   - otherwise the test fails: a missing service is a broken setup, not a reason to pass.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Environment variables read by this package.
const (
	RedisAddrEnv = "SMARTFEED_REDIS_ADDR" // host:port of a Redis server
	HBaseZKEnv   = "SMARTFEED_HBASE_ZK"   // ZooKeeper quorum of an HBase cluster
	NoRedisEnv   = "SMARTFEED_NO_REDIS"   // "1": skip tests that need Redis
	NoHBaseEnv   = "SMARTFEED_NO_HBASE"   // "1": skip tests that need HBase
	// HBaseStandbyZKEnv is the ZooKeeper quorum of a second HBase cluster, fed by HBase's own
	// replication from the first (scripts/hbase.sh replicate).
	HBaseStandbyZKEnv = "SMARTFEED_HBASE_STANDBY_ZK"
	// NoHBaseStandbyEnv "1": skip tests that need the standby HBase.
	NoHBaseStandbyEnv = "SMARTFEED_NO_HBASE_STANDBY"
	// ChromiumEnv is the path of a Chromium for the browser tests (scripts/chromium.sh path).
	ChromiumEnv = "SMARTFEED_CHROMIUM"
	// NoChromiumEnv holds why no Chromium could be found or installed (scripts/with-services.sh
	// sets it when scripts/chromium.sh fails): the browser tests skip, saying so.
	NoChromiumEnv = "SMARTFEED_NO_CHROMIUM"
)

// Chromium returns the path of a headless-capable Chromium for the browser tests: the one
// scripts/with-services.sh found or installed (SMARTFEED_CHROMIUM), else one on PATH. It skips
// t under -short or when SMARTFEED_NO_CHROMIUM says why there is none, and fails t otherwise.
func Chromium(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: skipping: needs Chromium, and -short is set")
	}
	if why := os.Getenv(NoChromiumEnv); why != "" {
		t.Skipf("testenv: SKIPPING the browser test: Chromium is not installable here (%s=%q)", NoChromiumEnv, why)
	}
	if p := os.Getenv(ChromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("testenv: this test needs Chromium but %s is not set and none is on PATH: run make test "+
		"(scripts/with-services.sh installs Debian's chromium through scripts/chromium.sh), or set %s, "+
		"or set %s=<reason> to skip such tests, or use go test -short", ChromiumEnv, ChromiumEnv, NoChromiumEnv)
	return ""
}

// Redis returns the address of the test Redis server (host:port), or skips or fails t.
func Redis(t testing.TB) string {
	t.Helper()
	return service(t, "Redis", RedisAddrEnv, NoRedisEnv, "scripts/redis.sh up")
}

// HBase returns the ZooKeeper quorum of the test HBase (host:port), or skips or fails t.
func HBase(t testing.TB) string {
	t.Helper()
	return service(t, "HBase", HBaseZKEnv, NoHBaseEnv, "scripts/hbase.sh up")
}

// HBaseStandby returns the ZooKeeper quorums of the test HBase and of its standby, a second
// cluster that HBase replicates the first one's scope-1 tables to; or skips or fails t.
func HBaseStandby(t testing.TB) (primary, standby string) {
	t.Helper()
	primary = HBase(t)
	if os.Getenv(NoHBaseEnv) != "1" && os.Getenv(NoHBaseStandbyEnv) == "1" {
		t.Skipf("testenv: skipping: needs the standby HBase, and %s=1 is set", NoHBaseStandbyEnv)
	}
	standby = service(t, "standby HBase", HBaseStandbyZKEnv, NoHBaseEnv,
		"scripts/hbase.sh up hbase-standby && scripts/hbase.sh replicate hbase hbase-standby")
	return primary, standby
}

func service(t testing.TB, name, addrEnv, noEnv, upCmd string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("testenv: skipping: needs %s, and -short is set", name)
	}
	if os.Getenv(noEnv) == "1" {
		t.Skipf("testenv: skipping: needs %s, and %s=1 is set", name, noEnv)
	}
	addr := os.Getenv(addrEnv)
	if addr == "" {
		t.Fatalf("testenv: this test needs a real %s but %s is not set: run make test, "+
			"or set %s (e.g. from `%s`), or set %s=1 to skip such tests, or use go test -short",
			name, addrEnv, addrEnv, upCmd, noEnv)
	}
	return addr
}
