package config

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started outlives them. gohbase
// leaves a region client's receive loop behind a closed client until its connection's read
// returns (as in zen's own TestMain).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/tsuna/gohbase/region.(*client).receiveRPCs"))
}
