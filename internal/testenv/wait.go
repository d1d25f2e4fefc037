package testenv

import (
	"testing"
	"time"
)

// WaitTimeout is WaitFor's usual bound: generous, so that a loaded machine (a CI run beside
// other work, `stress-ng --cpu 2`) only makes a test slower, never red.
const WaitTimeout = 30 * time.Second

// WaitFor polls cond every 10 ms until it holds, and fails tb when it did not within timeout,
// naming what it waited for. Tests wait on a condition with it instead of sleeping for a time
// they hope is long enough.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
