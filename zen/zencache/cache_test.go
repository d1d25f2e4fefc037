package zencache

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized model test (0: random, printed)")

func newRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// twoProcesses returns the same store behind two caches sharing one Redis (two processes of a
// deployment), and the bare store.
func twoProcesses(t *testing.T, rdb redis.UniversalClient, table string) (a, b, bare zen.Table) {
	t.Helper()
	st := zenmem.New()
	_, prefix := testenv.RedisKeyPrefix(t, "zctest")
	prefix += ":"
	ctx := context.Background()
	for i, dst := range []*zen.Table{&a, &b} {
		reg := prometheus.NewRegistry()
		c, err := Wrap(st, rdb, Options{Prefix: prefix, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := c.Table(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tb.(*Table); !ok {
			t.Fatalf("cache %d: table %s is not cached", i, table)
		}
		*dst = tb
	}
	bare, _ = st.Table(ctx, table)
	return a, b, bare
}

// key builds an edges-table-like key: from(8) | type(2) | rest.
func key(from uint64, typ uint16, rest byte) []byte {
	k := make([]byte, 0, 11)
	k = append(k, byte(from>>56), byte(from>>48), byte(from>>40), byte(from>>32), byte(from>>24), byte(from>>16), byte(from>>8), byte(from))
	k = append(k, byte(typ>>8), byte(typ), rest)
	return k
}

// TestModelAgainstTheStore runs random writes and reads through two caches over one store
// (writes from either "process") and checks every read against the bare store.
func TestModelAgainstTheStore(t *testing.T) {
	rdb := newRedis(t)
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for _, table := range []string{zen.TableEdges, zen.TableObjects} {
		a, b, bare := twoProcesses(t, rdb, table)
		ctx := context.Background()
		randKey := func() []byte { return key(uint64(r.IntN(3)), uint16(r.IntN(2)), byte(r.IntN(4))) }
		for step := range 3000 {
			c := []zen.Table{a, b}[r.IntN(2)]
			switch op := r.IntN(10); op {
			case 0, 1:
				var muts []zen.Mutation
				for range 1 + r.IntN(3) {
					m := zen.Mutation{Key: randKey(), Value: fmt.Appendf(nil, "v%d", step)}
					m.Delete = r.IntN(4) == 0
					muts = append(muts, m)
				}
				if err := c.Apply(ctx, muts); err != nil {
					t.Fatal(err)
				}
			case 2:
				k := randKey()
				cur, _ := bare.Get(ctx, k)
				var exp []byte
				if r.IntN(2) == 0 {
					exp = cur
				}
				if _, err := c.CheckAndSet(ctx, k, exp, fmt.Appendf(nil, "c%d", step)); err != nil {
					t.Fatal(err)
				}
			case 3:
				if _, err := c.Increment(ctx, key(9, 9, byte(r.IntN(2))), 1); err != nil {
					t.Fatal(err)
				}
			case 4, 5:
				k := randKey()
				if r.IntN(5) == 0 {
					k = key(9, 9, byte(r.IntN(2)))
				}
				got, gerr := c.Get(ctx, k)
				want, werr := bare.Get(ctx, k)
				if !errors.Is(gerr, werr) && !(gerr == nil && werr == nil) || !bytes.Equal(got, want) {
					t.Fatalf("seed %d step %d %s: Get(%x) = %q, %v; store %q, %v", seed, step, table, k, got, gerr, want, werr)
				}
			case 6:
				ks := [][]byte{randKey(), randKey(), randKey()}
				got, err := c.(zen.MultiGetter).GetMany(ctx, ks)
				if err != nil {
					t.Fatal(err)
				}
				for i, k := range ks {
					want, werr := bare.Get(ctx, k)
					if werr != nil {
						want = nil
					}
					if !bytes.Equal(got[i], want) || (got[i] == nil) != (want == nil) {
						t.Fatalf("seed %d step %d %s: GetMany[%d] %x = %q; store %q", seed, step, table, i, k, got[i], want)
					}
				}
			default:
				from, typ := uint64(r.IntN(3)), uint16(r.IntN(2))
				o := zen.ScanOptions{Start: key(from, typ, 0)[:10], Stop: zen.PrefixEnd(key(from, typ, 0)[:10]),
					Limit: r.IntN(4), Reverse: r.IntN(2) == 0}
				got, err := c.Scan(ctx, o)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := bare.Scan(ctx, o)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("seed %d step %d %s: Scan differs (-store +cache):\n%s", seed, step, table, diff)
				}
			}
		}
	}
}

// A read that starts after a write returned never sees the older value, while other readers
// keep filling the cache concurrently (the stale-fill race a delete-on-write cache loses).
func TestNoStaleReadAfterAcknowledgedWrite(t *testing.T) {
	rdb := newRedis(t)
	a, b, _ := twoProcesses(t, rdb, zen.TableObjects)
	ctx := context.Background()
	k := key(1, 0, 0)[:8]
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked.Load()
				v, err := b.Get(ctx, k)
				if err != nil {
					if floor > 0 {
						t.Errorf("read after write %d acknowledged: %v", floor, err)
						return
					}
					continue
				}
				var n int64
				fmt.Sscanf(string(v), "%d", &n)
				if n < floor {
					t.Errorf("stale read: %d after write %d was acknowledged", n, floor)
					return
				}
			}
		}()
	}
	for i := int64(1); i <= 300; i++ {
		if err := a.Apply(ctx, []zen.Mutation{{Key: k, Value: fmt.Appendf(nil, "%d", i)}}); err != nil {
			t.Fatal(err)
		}
		acked.Store(i)
	}
	close(stop)
	wg.Wait()
}

// With Redis unreachable reads go to the store and writes report the failed invalidation.
func TestRedisDown(t *testing.T) {
	st := zenmem.New()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	c, err := Wrap(st, rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := c.Table(context.Background(), zen.TableObjects)
	bare, _ := st.Table(context.Background(), zen.TableObjects)
	k := key(1, 0, 0)[:8]
	if err := bare.Apply(context.Background(), []zen.Mutation{{Key: k, Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if v, err := tb.Get(context.Background(), k); err != nil || string(v) != "x" {
		t.Errorf("Get with Redis down = %q, %v; want the store's value", v, err)
	}
	if err := tb.Apply(context.Background(), []zen.Mutation{{Key: k, Value: []byte("y")}}); err == nil {
		t.Error("a write whose invalidation failed reported success")
	}
}
