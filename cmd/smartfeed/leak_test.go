package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestMain fails the package's tests when a goroutine they started outlives them, and removes
// the binary the tests built (buildBinary) before it exits.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LeakOptions(goleak.Cleanup(func(code int) {
		removeBuiltBinary()
		os.Exit(code)
	}))...)
}
