package lowprio

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lowerThread raises the calling thread's nice value by delta (at most to MaxNice). On
// Linux a thread's nice value is its own: setpriority(2) with the thread's ID changes that
// thread alone. Raising a nice value needs no privilege.
func lowerThread(delta int) error {
	tid := unix.Gettid()
	// The system call returns 20 - nice (1 for nice 19, 40 for nice -20).
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return fmt.Errorf("read thread %d's priority: %w", tid, err)
	}
	nice := min(MaxNice, 20-raw+delta)
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		return fmt.Errorf("set thread %d's nice value to %d: %w", tid, nice, err)
	}
	return nil
}

// ThreadNice returns the calling thread's nice value (lock the goroutine to its thread to ask
// about a particular one).
func ThreadNice() (int, error) {
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		return 0, fmt.Errorf("read the thread's priority: %w", err)
	}
	return 20 - raw, nil
}
