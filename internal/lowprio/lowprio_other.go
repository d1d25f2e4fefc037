//go:build !linux

package lowprio

import (
	"errors"
	"runtime"
)

// lowerThread is not supported here: the work runs at the process's priority.
func lowerThread(int) error {
	return errors.New("lowprio: a thread's own priority is not supported on " + runtime.GOOS)
}

// ThreadNice is not supported here.
func ThreadNice() (int, error) { return 0, errors.ErrUnsupported }
