package zenpebble

import (
	"fmt"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// BenchmarkTopAfterTakes reads the best 50 of a pool of 200 live rows after taken pins were
// inserted at its head and taken (what a user's visits do to a pool): each taken row's delete
// stays in the LSM until compaction, and a read from the pool's start steps over all of them.
// With flushed, the history is in sstables rather than the memtable.
func BenchmarkTopAfterTakes(b *testing.B) {
	for _, flushed := range []bool{false, true} {
		for _, taken := range []int{0, 1000, 10000} {
			b.Run(fmt.Sprintf("flushed=%v/taken=%d", flushed, taken), func(b *testing.B) {
				ctx := b.Context()
				s := openStore(b, b.TempDir(), WithNoSync())
				p := zen.NewPools(openTable(b, s, "pools"), nil)
				id := func(typ zen.Type, local uint64) zen.ID {
					v, err := zen.NewID(1, typ, local)
					if err != nil {
						b.Fatal(err)
					}
					return v
				}
				u, next := id(zen.TypeUser, 1), uint64(0)
				add := func(n int, score float64) {
					es := make([]zen.PoolEntry, n)
					for i := range es {
						next++
						es[i] = zen.PoolEntry{User: u, Pin: id(zen.TypePin, next), Source: zen.SourceFollowing,
							Score: score - float64(i)*1e-9, CreatedMs: time.Now().UnixMilli()}
					}
					if _, err := p.Insert(ctx, es); err != nil {
						b.Fatal(err)
					}
				}
				add(200, 0.1)
				for k := range taken / 50 {
					add(50, 0.9-float64(k)*1e-6)
					top, err := p.Top(ctx, u, zen.SourceFollowing, 50)
					if err != nil {
						b.Fatal(err)
					}
					if got, err := p.Take(ctx, u, top); err != nil || len(got) != 50 {
						b.Fatalf("Take = %d, %v", len(got), err)
					}
				}
				if flushed {
					if err := s.db.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					top, err := p.Top(ctx, u, zen.SourceFollowing, 50)
					if err != nil || len(top) != 50 {
						b.Fatalf("Top = %d, %v", len(top), err)
					}
				}
			})
		}
	}
}
