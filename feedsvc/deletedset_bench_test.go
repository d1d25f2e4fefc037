package feedsvc

import (
	"context"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// BenchmarkDeletedSetLiveParallel: pages check their pins at once, each page beginning when it
// checks, over a deletion log with no new rows: the steady state of a busy feed process.
func BenchmarkDeletedSetLiveParallel(b *testing.B) {
	g := graphOver(b, zenmem.New())
	d := NewDeletedSet(g)
	pins := make([]zen.ID, 25)
	for i := range pins {
		pins[i] = pinID(uint64(i + 1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx := withPageStart(context.Background(), time.Now())
			live, err := d.Live(ctx, pins)
			if err != nil || len(live) != len(pins) {
				b.Errorf("live %d of %d, %v", len(live), len(pins), err)
				return
			}
		}
	})
}
