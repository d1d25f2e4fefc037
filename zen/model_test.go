package zen_test

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// TestModel runs the backend acceptance suite of the model API on the in-memory store.
func TestModel(t *testing.T) {
	zentest.RunModel(t, func(*testing.T) zen.Store { return zenmem.New() })
}

// TestModelRandomized runs the randomized comparison with zenmem on both sides: the two runs
// must agree step by step (this checks the harness and the model's determinism).
func TestModelRandomized(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	for _, seed := range zentest.Seeds(t, 3) {
		zentest.RunModelRandomized(t, zenmem.New(), zenmem.New(), seed, n)
	}
}
