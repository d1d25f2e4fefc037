package zenpebble

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// BenchmarkGoneReads compares two ways to read the tombstones ("gone" rows, user | 0 | pin) of
// the 60 candidates of a pool read: a GetMany of their keys (what Pools.TopMany does), and one
// scan of all the user's gone rows. The user has gone rows of `gone` pins; the store holds the
// rows of 2,000 other users around it, so that the memtable is the size of a busy one and a
// seek in it costs what it does in the running system. Run with and without a flush.
//
// Measured (n=3, 2 cores, 256 MiB cache as the server's default): GetMany 37–68 µs whatever
// the number of gone rows; the scan 33–35 µs for 100 gone rows, 124–128 µs for 500 and
// 2.9–3.1 ms for 10,000. A scan pays only for users with almost no history, so TopMany keeps
// its GetMany. With Pebble's own 8 MiB cache the flushed GetMany took 1.1–1.4 ms: the filter
// and index blocks of a large sstable did not stay in the cache.
func BenchmarkGoneReads(b *testing.B) {
	const others, perOther, asked = 2000, 200, 60
	key := func(user, pin uint64) []byte {
		k := binary.BigEndian.AppendUint64(nil, user)
		k = append(k, 0)
		return binary.BigEndian.AppendUint64(k, pin)
	}
	for _, flushed := range []bool{false, true} {
		for _, gone := range []int{100, 500, 2000, 10000} {
			b.Run(fmt.Sprintf("flushed=%v/gone=%d", flushed, gone), func(b *testing.B) {
				ctx := b.Context()
				s := openStore(b, b.TempDir(), WithNoSync(), WithMemTableSize(256<<20), WithCacheSize(256<<20))
				t := openTable(b, s, "pools")
				const me = 1001
				for u := uint64(1); u <= others; u++ {
					var muts []zen.Mutation
					n := perOther
					if u == me {
						n = gone
					}
					for i := range n {
						muts = append(muts, zen.Mutation{Key: key(u, uint64(i)*7919+u), Value: make([]byte, 10)})
					}
					if err := t.Apply(ctx, muts); err != nil {
						b.Fatal(err)
					}
				}
				if flushed {
					if err := s.db.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				// Candidates: a third gone, the rest not.
				var keys [][]byte
				for i := range asked {
					if i%3 == 0 {
						keys = append(keys, key(me, uint64(i*gone/asked)*7919+me))
					} else {
						keys = append(keys, key(me, uint64(1<<40+i)))
					}
				}
				prefix := binary.BigEndian.AppendUint64(nil, me)
				prefix = append(prefix, 0)
				b.Run("getmany", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						vs, err := zen.GetMany(ctx, t, keys)
						if err != nil || len(vs) != asked {
							b.Fatal(err)
						}
					}
				})
				b.Run("scan", func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						rows, err := t.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: zen.PrefixEnd(prefix)})
						if err != nil || len(rows) != gone {
							b.Fatal(len(rows), err)
						}
					}
				})
			})
		}
	}
}
