package bulkruns

import (
	"os"
	"path/filepath"
	"syscall"
)

// The directory of open Runs holds a lock file that Runs keeps locked (flock). The kernel
// releases the lock when the process ends, however it ends, so a directory whose lock can be
// taken belongs to a load that is gone.

// stagePattern names the directories Open makes.
const stagePattern = "smartfeed-bulk-*"

// stageLock is the lock file in the directory.
const stageLock = ".lock"

// lockedTempDir makes a new directory under dir and locks it; the lock is held until the
// returned file is closed.
func lockedTempDir(dir string) (string, *os.File, error) {
	d, err := os.MkdirTemp(dir, stagePattern)
	if err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, stageLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(d)
		return "", nil, err
	}
	return d, f, nil
}

// removeAbandoned removes the directories under dir whose lock nobody holds: those of loads
// that were killed before they could remove their own. A directory without a lock file is left
// alone (it may be one being made this moment).
func removeAbandoned(dir string) {
	dirs, _ := filepath.Glob(filepath.Join(dir, stagePattern))
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, stageLock), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(d)
		}
		f.Close()
	}
}
