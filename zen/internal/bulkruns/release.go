package bulkruns

import "os"

// releaseEvery is how many bytes of a run a merge reads between two releases of the disk
// blocks behind it (a variable for the tests).
var releaseEvery int64 = 64 << 20

// releasingReader reads a run once, front to back, and gives the disk blocks it has read
// back to the file system as it goes (releaseRead), so that a merge of runs as large as the
// disk's free space does not need as much again for its output: the runs shrink while the
// merged file grows. The run is removed after the merge anyway; what was released reads as
// zeros.
type releasingReader struct {
	f        *os.File
	off      int64 // bytes read from f
	released int64 // bytes at f's start given back
}

// Read implements io.Reader.
func (r *releasingReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.off += int64(n)
	if r.off-r.released >= releaseEvery {
		// Best effort: a file system that cannot release keeps the blocks until the run is
		// removed.
		if releaseRead(r.f, r.released, r.off-r.released) == nil {
			r.released = r.off
		}
	}
	return n, err
}
