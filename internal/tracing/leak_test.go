package tracing

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests when a goroutine they started (an exporter's, a batch processor's)
// outlives them: Shutdown must stop what New started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
