package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestStartFailsFastWithoutRedis: a server whose Redis nobody listens on exits at once with
// one line naming Redis, its address and --wait-for-deps, before it opens any store.
func TestStartFailsFastWithoutRedis(t *testing.T) {
	addr := deadAddr(t)
	dir := t.TempDir()
	for _, role := range []string{roleAll, roleWorker, roleFeed} {
		args := []string{role, "--redis-addr", addr, "--data-dir", dir, "--grpc-addr", "127.0.0.1:0",
			"--admin-addr", "", "--admin-grpc-addr", ""}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		start := time.Now()
		err := run(ctx, args, io.Discard, io.Discard)
		cancel()
		took := time.Since(start)
		if err == nil {
			t.Fatalf("smartfeed %s with Redis at %s (nobody there): no error", role, addr)
		}
		msg := err.Error()
		for _, want := range []string{"redis", addr, "--wait-for-deps"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error %q does not name %q", role, msg, want)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error is not one line: %q", role, msg)
		}
		if took > 5*time.Second {
			t.Errorf("%s: failed after %v, want at once", role, took)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the data dir was touched before the dependency check: %v", ents)
	}
}

// TestBinaryExitsNonZeroWithoutRedis runs main itself (this test binary, re-executed) against
// a Redis address nobody listens on: exit status 1 and the one line on stderr.
func TestBinaryExitsNonZeroWithoutRedis(t *testing.T) {
	if args := os.Getenv("SMARTFEED_TEST_MAIN_ARGS"); args != "" {
		os.Args = append([]string{"smartfeed"}, strings.Fields(args)...)
		main()
		return
	}
	addr := deadAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBinaryExitsNonZeroWithoutRedis$")
	cmd.Env = append(os.Environ(), "SMARTFEED_TEST_MAIN_ARGS=all --redis-addr "+addr+" --data-dir "+t.TempDir()+
		" --grpc-addr 127.0.0.1:0 --admin-addr= --admin-grpc-addr=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\nstderr:\n%s", err, stderr.String())
	}
	want := "smartfeed: redis at " + addr + " is unreachable ("
	if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "pass --wait-for-deps to wait for it\n") {
		t.Errorf("stderr lacks %q...--wait-for-deps:\n%s", want, stderr.String())
	}
	t.Logf("stderr: %s", stderr.String())
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestAwaitDeps: without --wait-for-deps the first unreachable dependency is the error; with
// it, the checks repeat until all answer, and each change of what is down is logged once.
func TestAwaitDeps(t *testing.T) {
	// script is the answers of one dependency, one per round ("x": down); the last repeats.
	fake := func(name, script string) startDep {
		round := 0
		return startDep{name: name, addr: name + ":1", check: func(context.Context) error {
			c := script[min(round, len(script)-1)]
			round++
			if c == 'x' {
				return errors.New("refused")
			}
			return nil
		}}
	}
	tests := []struct {
		name    string
		deps    []startDep
		wait    bool
		wantErr string
		want    []string // log lines: message and the unreachable field
	}{
		{"all up", []startDep{fake("redis", "o")}, false, "", nil},
		{"down, no wait", []startDep{fake("redis", "x")}, false,
			"redis at redis:1 is unreachable (refused); start it, or pass --wait-for-deps to wait for it", nil},
		{"down then up", []startDep{fake("redis", "xxxo")}, true, "", []string{
			"waiting for dependencies (--wait-for-deps) redis at redis:1",
			"dependencies answer; starting ",
		}},
		{"one then two then the other", []startDep{fake("redis", "xxoooo"), fake("hbase", "oxxxxo")}, true, "", []string{
			"waiting for dependencies (--wait-for-deps) redis at redis:1",
			"waiting for dependencies (--wait-for-deps) redis at redis:1; hbase at hbase:1",
			"waiting for dependencies (--wait-for-deps) hbase at hbase:1",
			"dependencies answer; starting ",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			err := awaitDeps(t.Context(), tt.deps, tt.wait, zap.New(core), depBackoff{Initial: time.Millisecond, Max: 2 * time.Millisecond})
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Errorf("error %q, want %q", gotErr, tt.wantErr)
			}
			var got []string
			for _, e := range logs.All() {
				down, _ := e.ContextMap()["unreachable"].(string)
				got = append(got, e.Message+" "+down)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("logs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartDeps: what each role checks at start.
func TestStartDeps(t *testing.T) {
	hb := config.DefaultConfig()
	hb.Storage.Backend = config.BackendHBase
	hb.Storage.HBase.PoolsZK, hb.Storage.HBase.PrimaryZK, hb.Storage.HBase.StandbyZK = "zk1:2181", "zk2:2181", "zk3:2181"
	remoteGen := hb
	remoteGen.Generator.Addr = "gen:9090"
	cached := config.DefaultConfig()
	cached.Cache.Enabled = true
	tests := []struct {
		role string
		cfg  config.Config
		want []string
	}{
		{roleAll, config.DefaultConfig(), []string{"redis 127.0.0.1:6379"}},
		{roleGenerator, config.DefaultConfig(), nil},
		{roleGenerator, cached, []string{"redis 127.0.0.1:6379"}},
		{roleAll, hb, []string{"redis 127.0.0.1:6379", "hbase (main store, its ZooKeeper) zk1:2181",
			"hbase (feed primary, its ZooKeeper) zk2:2181", "hbase (feed standby, its ZooKeeper) zk3:2181"}},
		{roleGenerator, hb, []string{"hbase (main store, its ZooKeeper) zk1:2181"}},
		{roleFeed, remoteGen, []string{"redis 127.0.0.1:6379", "hbase (feed primary, its ZooKeeper) zk2:2181",
			"hbase (feed standby, its ZooKeeper) zk3:2181"}},
	}
	for _, tt := range tests {
		var got []string
		for _, d := range startDeps(tt.role, tt.cfg) {
			got = append(got, d.name+" "+d.addr)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.role, diff)
		}
	}
}
