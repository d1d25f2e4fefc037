//go:build !linux

package bulkruns

import (
	"errors"
	"os"
)

// releaseRead is not supported here: the run keeps its blocks until it is removed.
func releaseRead(*os.File, int64, int64) error { return errors.ErrUnsupported }
