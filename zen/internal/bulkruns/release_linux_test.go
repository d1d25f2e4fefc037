package bulkruns

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// TestMergeReleasesWhatItRead: while a table's runs are merged, the disk blocks of what the
// merge has read are given back, so that near its end the runs hold a fraction of their size;
// the merge still emits every row, in order.
func TestMergeReleasesWhatItRead(t *testing.T) {
	defer func(n int64) { releaseEvery = n }(releaseEvery)
	releaseEvery = 64 << 10
	r, err := Open(t.TempDir(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const rows = 40_000
	val := make([]byte, 100)
	for b := 0; b < 4; b++ { // four interleaved runs of about 1 MiB each
		var muts []zen.Mutation
		for i := b; i < rows; i += 4 {
			muts = append(muts, zen.Mutation{Key: fmt.Appendf(nil, "k%08d", i), Value: val})
		}
		if err := r.Add(context.Background(), "edges", muts); err != nil {
			t.Fatal(err)
		}
	}
	runs := append([]string(nil), r.tables["edges"].runs...)
	if len(runs) < 3 {
		t.Fatalf("%d runs staged, want several", len(runs))
	}
	var size, allocLate int64
	for _, p := range runs {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	n := 0
	err = r.Merge(context.Background(), "edges", func(k, v []byte) error {
		if want := fmt.Sprintf("k%08d", n); string(k) != want || len(v) != len(val) {
			return fmt.Errorf("row %d: got %q (%d bytes), want %q", n, k, len(v), want)
		}
		if n++; n == rows*9/10 {
			for _, p := range runs {
				var st syscall.Stat_t
				if err := syscall.Stat(p, &st); err != nil {
					return err
				}
				allocLate += st.Blocks * 512
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != rows {
		t.Fatalf("merge emitted %d rows, want %d", n, rows)
	}
	if allocLate > size/2 {
		t.Errorf("runs hold %d bytes on disk with 90%% of them merged (of %d): their read blocks were not released", allocLate, size)
	}
}
