package zentest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// Environment of the randomized comparisons.
const (
	// SeedEnv fixes the random seed of a run (to replay a failure): SMARTFEED_SEED=1234.
	SeedEnv = "SMARTFEED_SEED"
	// LongEnv turns on the soak mode: SMARTFEED_LONG=1 runs many random seeds (make test-long).
	LongEnv = "SMARTFEED_LONG"
)

// Seeds returns the seeds a randomized comparison runs: the fixed regression seeds 0..fixed-1,
// then one random seed (or SMARTFEED_SEED), or 50 of them with SMARTFEED_LONG=1. The random
// seeds are logged, and every failure message of RunRandomized and RunModelRandomized names its
// seed, so a failure can be replayed with SMARTFEED_SEED.
func Seeds(t testing.TB, fixed int) []uint64 {
	t.Helper()
	seeds := make([]uint64, 0, fixed+50)
	for s := range fixed {
		seeds = append(seeds, uint64(s))
	}
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not a uint64", SeedEnv, v)
		}
		t.Logf("seed %d from %s", s, SeedEnv)
		return append(seeds, s)
	}
	n := 1
	if os.Getenv(LongEnv) == "1" {
		n = 50
	}
	for range n {
		s := rand.Uint64()
		t.Logf("random seed %d (replay: %s=%d)", s, SeedEnv, s)
		seeds = append(seeds, s)
	}
	return seeds
}
