package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// The bench states the Redis peer's durability as the server reports it, and finds its process.
func TestBenchRedisDurability(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	ctx := context.Background()
	conf, err := rdb.ConfigGet(ctx, "append*").Result()
	if err != nil {
		t.Skipf("CONFIG GET refused: %v", err)
	}
	dur, synced, pid := redisDurability(ctx, rdb)
	want := "no AOF (snapshots at most)"
	if conf["appendonly"] == "yes" {
		want = "AOF appendfsync " + conf["appendfsync"]
	}
	if dur != want || synced != (conf["appendonly"] == "yes" && conf["appendfsync"] == "always") || pid <= 0 {
		t.Errorf("durability %q (synced %v, pid %d); want %q", dur, synced, pid, want)
	}
}

// The bench's own redis-server acknowledges writes only once fsynced, and goes away with its
// data when stopped.
func TestBenchRedisAlways(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on the PATH")
	}
	ctx := context.Background()
	r, err := startRedisAlways(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dur, synced, pid := redisDurability(ctx, r.rdb)
	if dur != "AOF appendfsync always" || !synced || pid != r.cmd.Process.Pid {
		t.Errorf("durability %q, synced %v, pid %d (started %d)", dur, synced, pid, r.cmd.Process.Pid)
	}
	r.stop()
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("its data directory is still there: %v", err)
	}
	select {
	case <-r.exited:
	default:
		t.Error("the server is still running")
	}
}
