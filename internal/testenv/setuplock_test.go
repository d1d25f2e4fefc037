package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLockSetupExcludes: while a test holds a setup's lock, another open of the lock file (as
// another test process would) cannot take it; once that test ends, it can.
func TestLockSetupExcludes(t *testing.T) {
	dir := t.TempDir()
	try := func() error {
		f, err := os.OpenFile(filepath.Join(dir, ".test-lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		LockSetup(t, dir)
		if err := try(); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("lock taken beside its holder: %v, want EWOULDBLOCK", err)
		}
	})
	if err := try(); err != nil {
		t.Errorf("lock not released when its test ended: %v", err)
	}
}
