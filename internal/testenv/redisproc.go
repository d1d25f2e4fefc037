package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RedisProc is a redis-server of a test's own (AOF on, data in a temp dir, a fixed loopback
// port), which the test may kill -9 and start again on the same port with the same data.
type RedisProc struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server for t (skipped under -short or SMARTFEED_NO_REDIS=1, like
// Redis; it needs the redis-server binary that scripts/redis.sh installs). It is stopped when
// the test ends.
func StartRedis(t testing.TB) *RedisProc {
	t.Helper()
	_ = Redis(t) // the same skip rules, and a Redis-enabled run has the binary installed
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testenv: redis-server not installed (scripts/redis.sh up installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &RedisProc{t: t, dir: t.TempDir(), port: port}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Addr is host:port.
func (r *RedisProc) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server (again) on its port with its data, and waits until it accepts
// connections.
func (r *RedisProc) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port),
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.Addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server on %s did not start: %v\n%s", r.Addr(), err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server with SIGKILL (as a crash would) and waits for it to exit.
func (r *RedisProc) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_, _ = r.cmd.Process.Wait()
	r.cmd = nil
}

// Pause stops the server with SIGSTOP: it keeps its port and connections but answers nothing,
// as a hung or swapped-out server would. Resume undoes it.
func (r *RedisProc) Pause() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		r.t.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT); it is a no-op on a server that is not running.
func (r *RedisProc) Resume() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
}

// Wipe deletes the server's data (call it while the server is stopped): the next Start comes up
// empty, as a Redis replaced or restored from nothing would.
func (r *RedisProc) Wipe() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("testenv: Wipe of a running redis-server")
	}
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "redis.log" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.dir, e.Name())); err != nil {
			r.t.Fatal(err)
		}
	}
}

// String describes the server for failure messages.
func (r *RedisProc) String() string { return fmt.Sprintf("redis-server %s (data %s)", r.Addr(), r.dir) }
