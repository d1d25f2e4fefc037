package zen_test

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// BenchmarkModel runs the model hot paths on the in-memory store; the backends call
// zentest.BenchModel with their own stores.
func BenchmarkModel(b *testing.B) {
	zentest.BenchModel(b, func(*testing.B) zen.Store { return zenmem.New() })
}
