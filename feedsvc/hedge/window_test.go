package hedge

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestNthMatchesSort checks the selection behind the percentile against a sort: random
// latencies, coarse ones with long runs of equal values, sorted and reversed inputs, every rank
// of the short ones.
func TestNthMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inputs := map[string][]time.Duration{"one": {7}, "two equal": {3, 3}}
	for _, n := range []int{5, 17, 100, 4096} {
		var random, coarse, up, down []time.Duration
		for i := range n {
			random = append(random, time.Duration(r.Int64N(1e7)))
			coarse = append(coarse, time.Duration(r.IntN(3))*time.Millisecond)
			up = append(up, time.Duration(i))
			down = append(down, time.Duration(n-i))
		}
		for name, s := range map[string][]time.Duration{"random": random, "coarse": coarse, "sorted": up, "reversed": down} {
			inputs[fmt.Sprintf("%s %d", name, n)] = s
		}
	}
	for name, in := range inputs {
		sorted := slices.Sorted(slices.Values(in))
		ranks := []int{0, len(in) / 2, len(in) * 95 / 100, len(in) * 99 / 100, len(in) - 1}
		if len(in) <= 100 {
			ranks = ranks[:0]
			for k := range in {
				ranks = append(ranks, k)
			}
		}
		for _, k := range ranks {
			if got := nth(slices.Clone(in), k); got != sorted[k] {
				t.Errorf("%s: nth(%d) = %v, want %v", name, k, got, sorted[k])
			}
		}
	}
}

// BenchmarkWindowPercentile is the refresh of a full default window's percentile.
func BenchmarkWindowPercentile(b *testing.B) {
	w := newWindow(4096, 256)
	r := rand.New(rand.NewPCG(1, 2))
	for range 4096 {
		w.add(time.Duration(r.Int64N(int64(5 * time.Millisecond))))
	}
	for b.Loop() {
		w.valid = false
		w.percentile(95)
	}
}
