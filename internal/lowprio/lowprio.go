// Package lowprio runs a goroutine's work at a lower CPU priority than the rest of the process.
//
// Go's scheduler has no priorities; the operating system's has. A goroutine locked to its
// operating-system thread (runtime.LockOSThread) can have that thread's nice value raised, and
// then the kernel gives a core to the process's other threads first. A thread's nice value can
// be raised without privilege but not lowered again, so a lowered thread must never go back to
// the Go runtime for other goroutines: the goroutine that lowered it keeps it until it ends,
// and the runtime ends a thread whose goroutine ends locked to it. RocksDB lowers the priority
// of its compaction threads the same way (Env::LowerThreadPoolCPUPriority).
package lowprio

import "runtime"

// MaxNice is the highest nice value: the lowest priority.
const MaxNice = 19

// LowerThread locks the calling goroutine to its thread and raises the thread's nice value by
// delta above the process's (at most MaxNice). The goroutine must not unlock the thread
// (runtime.UnlockOSThread): it keeps it until it ends, and the thread ends with it. It returns
// an error where the operating system has no priority per thread (only Linux has) or refuses;
// the goroutine stays locked either way.
func LowerThread(delta int) error {
	runtime.LockOSThread()
	if delta <= 0 {
		return nil
	}
	return lowerThread(delta)
}

// Probe reports whether LowerThread(delta) works here, trying it on a goroutine of its own
// (whose thread then ends).
func Probe(delta int) error {
	errc := make(chan error, 1)
	go func() { errc <- LowerThread(delta) }()
	return <-errc
}
