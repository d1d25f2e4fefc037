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
	"testing"
)

// Environment variables read by this package.
const (
	RedisAddrEnv = "SMARTFEED_REDIS_ADDR" // host:port of a Redis server
	HBaseZKEnv   = "SMARTFEED_HBASE_ZK"   // ZooKeeper quorum of an HBase cluster
	NoRedisEnv   = "SMARTFEED_NO_REDIS"   // "1": skip tests that need Redis
	NoHBaseEnv   = "SMARTFEED_NO_HBASE"   // "1": skip tests that need HBase
)

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
