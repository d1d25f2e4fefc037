package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// LockSetup holds dir's test lock (a file lock on dir/.test-lock) for the rest of t, waiting for
// it first. A setup shared by several test processes (the Redis Cluster of
// scripts/redis-cluster.sh, the Sentinel group of scripts/redis-sentinel.sh) is locked by every
// test that uses it: `go test -p 2` runs packages side by side, and two tests that each kill a
// primary of one 3-primary cluster at the same time leave no majority of primaries to promote a
// replica (CLUSTERDOWN until a person restarts the nodes).
func LockSetup(t testing.TB, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".test-lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("test lock of %s: %v", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("test lock of %s: %v", dir, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
