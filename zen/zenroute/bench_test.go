package zenroute_test

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// BenchmarkIncrement measures what routing adds to a write (the map lookup and the in-flight
// count the fence relies on), in parallel, against the same zenmem table unrouted.
func BenchmarkIncrement(b *testing.B) {
	inner := zenmem.New()
	direct, _ := inner.Table(b.Context(), zen.TableCounters)
	s, err := zenroute.New(map[string]zen.Store{"default": inner, "other": zenmem.New()}, splitMap(b), zenroute.Options{})
	if err != nil {
		b.Fatal(err)
	}
	routed, _ := s.Table(b.Context(), zen.TableCounters)
	for name, tb := range map[string]zen.Table{"direct": direct, "routed": routed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				k := idKey(3, 1)
				for pb.Next() {
					if _, err := tb.Increment(b.Context(), k, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
