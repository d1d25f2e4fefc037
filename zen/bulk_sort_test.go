package zen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSortMutationsIsStable: mutations come out by key, those of one key in their order.
func TestSortMutationsIsStable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	muts := make([]Mutation, 5000)
	for i := range muts {
		muts[i] = Mutation{Key: []byte(fmt.Sprintf("k%03d", r.IntN(300))), Value: []byte(fmt.Sprint(i)), Delete: i%7 == 0}
	}
	want := slices.Clone(muts)
	slices.SortStableFunc(want, func(x, y Mutation) int { return bytes.Compare(x.Key, y.Key) })
	SortMutations(muts)
	if diff := cmp.Diff(want, muts); diff != "" {
		t.Fatalf("SortMutations differs from a stable sort (-want +got):\n%s", diff)
	}
}

// BenchmarkSortMutations sorts a batch of the bulk loader's size.
func BenchmarkSortMutations(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]Mutation, 50000)
	for i := range src {
		src[i] = Mutation{Key: fmt.Appendf(nil, "%016x|e|%016x", r.Uint64(), r.Uint64())}
	}
	muts := make([]Mutation, len(src))
	b.ReportAllocs()
	for b.Loop() {
		copy(muts, src)
		SortMutations(muts)
	}
}

// BenchmarkSortMutationsStable is the library's stable sort on the same batch, for comparison.
func BenchmarkSortMutationsStable(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]Mutation, 50000)
	for i := range src {
		src[i] = Mutation{Key: fmt.Appendf(nil, "%016x|e|%016x", r.Uint64(), r.Uint64())}
	}
	muts := make([]Mutation, len(src))
	b.ReportAllocs()
	for b.Loop() {
		copy(muts, src)
		slices.SortStableFunc(muts, func(x, y Mutation) int { return bytes.Compare(x.Key, y.Key) })
	}
}
