package zen_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started outlives them. gohbase's
// region-client reader is the one exception: Close shuts its connection but does not wait for
// the reader goroutine to notice, so it may still be on its way out when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/tsuna/gohbase/region.(*client).receiveRPCs"))
}
