package zenpebble

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/lowprio"
)

// TestCompactionNice: with WithCompactionNice, a compaction below L0 lowers the thread of the
// goroutine it begins on (Pebble's compaction goroutine) by the delta and is counted; one out
// of L0 keeps the process's priority; without the option nothing is lowered.
func TestCompactionNice(t *testing.T) {
	niceOf := func() int {
		n, err := lowprio.ThreadNice()
		if err != nil {
			t.Error(err)
		}
		return n
	}
	base := niceOf()
	if base+4 > 19 {
		t.Skipf("the test runs at nice %d: no room to lower it", base)
	}
	for _, tc := range []struct {
		name        string
		nice, level int
		want        int
		lowered     int64
	}{
		{"below L0", 4, 5, base + 4, 1},
		{"out of L0", 4, 0, base, 0},
		{"off", 0, 5, base, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Store{}
			l := s.events(zap.NewNop(), tc.nice)
			got := make(chan int, 1)
			go func() { // as Pebble runs a compaction: on a goroutine that ends after it
				l.CompactionBegin(pebble.CompactionInfo{Input: []pebble.LevelInfo{{Level: tc.level}, {Level: 6}}})
				got <- niceOf()
			}()
			if n := <-got; n != tc.want {
				t.Errorf("nice in the compaction = %d, want %d", n, tc.want)
			}
			if n := s.lowered.Load(); n != tc.lowered {
				t.Errorf("lowered compactions = %d, want %d", n, tc.lowered)
			}
		})
	}
}
