package bulkruns

import (
	"os"

	"golang.org/x/sys/unix"
)

// releaseRead frees f's disk blocks in [off, off+n), keeping its size (a hole that reads as
// zeros).
func releaseRead(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
