package zenpebble

import (
	"fmt"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// TestModel runs the whole zen API acceptance suite on Pebble, in memory and on disk.
func TestModel(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		zentest.RunModel(t, func(t *testing.T) zen.Store { return openStore(t, "") })
	})
	t.Run("disk", func(t *testing.T) {
		zentest.RunModel(t, func(t *testing.T) zen.Store { return openStore(t, t.TempDir(), WithNoSync()) })
	})
}

// TestModelRandomizedVsModel replays random zen operations on zenmem and on Pebble and compares
// every result.
func TestModelRandomizedVsModel(t *testing.T) {
	for _, seed := range zentest.Seeds(t, 6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			zentest.RunModelRandomized(t, zenmem.New(), openStore(t, t.TempDir(), WithNoSync()), seed, 2000)
		})
	}
}

func BenchmarkModel(b *testing.B) {
	b.Run("mem", func(b *testing.B) {
		zentest.BenchModel(b, func(b *testing.B) zen.Store { return openStore(b, "") })
	})
	b.Run("disk-sync", func(b *testing.B) {
		zentest.BenchModel(b, func(b *testing.B) zen.Store { return openStore(b, b.TempDir()) })
	})
}
