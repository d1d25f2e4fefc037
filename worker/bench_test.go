package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/worker/baseline"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// benchFollowers is the number of receivers per fanout event (env SMARTFEED_BENCH_FOLLOWERS,
// default 10,000).
func benchFollowers(b *testing.B) int {
	if v := os.Getenv("SMARTFEED_BENCH_FOLLOWERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SMARTFEED_BENCH_FOLLOWERS=%q", v)
		}
		return n
	}
	return 10_000
}

// benchReceivers are the generated events' receivers: follower i is user (shard i%4096, local
// i/4096+1,000,000), the same IDs for every backend and the baseline.
func benchReceivers(n int) []zen.ID {
	out := make([]zen.ID, n)
	for i := range out {
		out[i], _ = zen.NewID(uint16(i%4096), zen.TypeUser, uint64(i/4096)+1_000_000)
	}
	return out
}

// BenchmarkFanout measures fanout throughput in pool inserts per second: each iteration is one
// event, a new pin by an author with benchFollowers followers, fanned out in chunk tasks of 1,000
// run on 2 goroutines (the machine has 2 cores). Sub-benchmarks: the worker on Pebble (synced
// writes, the default, and unsynced), on HBase (SMARTFEED_HBASE_ZK), the Mastodon-style baseline
// on Redis (SMARTFEED_REDIS_ADDR: pipelined ZADD + ZREMRANGEBYRANK per receiver, same receivers),
// and raw-batch: the store's raw batched write rate of pool-sized rows (the physical limit).
func BenchmarkFanout(b *testing.B) {
	n := benchFollowers(b)
	b.Run("pebble", func(b *testing.B) { benchWorker(b, n, openPebble(b)) })
	b.Run("pebble-nosync", func(b *testing.B) { benchWorker(b, n, openPebble(b, zenpebble.WithNoSync())) })
	// With the block cache the binary gives each database by default (storage.pebble_cache_mb).
	b.Run("pebble-nosync-cache256", func(b *testing.B) {
		benchWorker(b, n, openPebble(b, zenpebble.WithNoSync(), zenpebble.WithCacheSize(256<<20)))
	})
	b.Run("hbase", func(b *testing.B) {
		if os.Getenv("SMARTFEED_HBASE_ZK") == "" {
			b.Skip("SMARTFEED_HBASE_ZK not set")
		}
		benchWorker(b, n, openStore(b, "hbase"))
	})
	b.Run("redis-zset-baseline", func(b *testing.B) { benchBaseline(b, n) })
	b.Run("raw-batch/pebble", func(b *testing.B) { benchRaw(b, openPebble(b)) })
	b.Run("raw-batch/hbase", func(b *testing.B) {
		if os.Getenv("SMARTFEED_HBASE_ZK") == "" {
			b.Skip("SMARTFEED_HBASE_ZK not set")
		}
		benchRaw(b, openStore(b, "hbase"))
	})
}

func openPebble(b *testing.B, opts ...zenpebble.Option) zen.Store {
	s, err := zenpebble.Open(b.TempDir(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// benchWorker runs the fanout benchmark over store; opts, when set, adds to the worker's
// options.
func benchWorker(b *testing.B, n int, store zen.Store, opts ...func(*Options)) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)}
	g, err := zen.NewGraph(ctx, store, nil, clk.now)
	if err != nil {
		b.Fatal(err)
	}
	author, _ := g.Create(ctx, zen.TypeUser, 0, nil)
	board, _ := g.Create(ctx, zen.TypeBoard, author.ID, nil)
	recv := benchReceivers(n)
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(maxParallel)
	for _, r := range recv {
		eg.Go(func() error {
			return g.AddEdge(ectx, zen.Edge{From: author.ID, Type: zen.EdgeFollowedByUser, To: r})
		})
	}
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}
	pools, _ := store.Table(ctx, "pools")
	state, _ := store.Table(ctx, StateTable)
	q := newStreamQueue(64)
	o := Options{Now: clk.now}
	for _, f := range opts {
		f(&o)
	}
	w, err := New(g, pools, state, q, Config{}, o)
	if err != nil {
		b.Fatal(err)
	}
	w.Register(q)
	q.start(ctx, 2)
	defer close(q.ch)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	events := 0
	for b.Loop() {
		pin, err := g.Create(ctx, zen.TypePin, board.ID, map[string]any{"author": author.ID.String()})
		if err != nil {
			b.Fatal(err)
		}
		clk.add(time.Second)
		task, _ := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(pin.ID), Author: uint64(author.ID), Board: uint64(board.ID), CreatedMs: clk.now().UnixMilli()})
		if _, err := q.Enqueue(ctx, task); err != nil {
			b.Fatal(err)
		}
		q.wg.Wait()
		if q.err != nil {
			b.Fatal(q.err)
		}
		events++
	}
	b.ReportMetric(float64(events*n)/b.Elapsed().Seconds(), "inserts/s")
	// On a machine shared with other work the wall time per event varies with the others'
	// load; the CPU this process spent on it (with the store's background work) much less.
	b.ReportMetric(float64(processCPU()-cpu0)/1e6/float64(events), "cpu-ms/op")
}

// processCPU is the user and system CPU time this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchBaseline(b *testing.B, n int) {
	addr := os.Getenv("SMARTFEED_REDIS_ADDR")
	if addr == "" {
		b.Skip("SMARTFEED_REDIS_ADDR not set")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	z, err := baseline.New(rdb, fmt.Sprintf("bench:feed:home:%d:", time.Now().UnixNano()), 800, 1000)
	if err != nil {
		b.Fatal(err)
	}
	recv := benchReceivers(n)
	users := make([]uint64, n)
	for i, u := range recv {
		users[i] = uint64(u)
	}
	defer z.Clear(ctx, users)
	s := &LogisticScorer{W: DefaultWeights()}
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	for b.Loop() {
		pin, _ := zen.NewID(1, zen.TypePin, uint64(events+1))
		score := s.Score(Features{Source: zen.SourceFollowing})
		// The same split as the worker: chunks of 1,000 receivers on 2 goroutines.
		err := parallelN(ctx, 2, (n+999)/1000, func(ctx context.Context, c int) error {
			_, err := z.Push(ctx, users[c*1000:min(n, (c+1)*1000)], uint64(pin), score)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		events++
	}
	b.ReportMetric(float64(events*n)/b.Elapsed().Seconds(), "inserts/s")
}

// benchRaw writes batches of 1,000 pool-shaped rows (25-byte key, 8-byte value) with Apply on 2
// goroutines: the store's raw batched write rate.
func benchRaw(b *testing.B, store zen.Store) {
	ctx := context.Background()
	t, err := store.Table(ctx, "rawbench")
	if err != nil {
		b.Fatal(err)
	}
	recv := benchReceivers(100_000)
	b.ReportAllocs()
	b.ResetTimer()
	rows := 0
	batch := 0
	for b.Loop() {
		err := parallelN(ctx, 2, 2, func(ctx context.Context, k int) error {
			muts := make([]zen.Mutation, 1000)
			for i := range muts {
				u := recv[(batch*2000+k*1000+i)%len(recv)]
				key, _ := zen.PoolKey(u, zen.SourceFollowing, 0.5, zen.ID(uint64(batch*2+k+1)|uint64(zen.TypePin)<<36))
				muts[i] = zen.Mutation{Key: key, Value: i64Bytes(int64(i))}
			}
			return t.Apply(ctx, muts)
		})
		if err != nil {
			b.Fatal(err)
		}
		batch++
		rows += 2000
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "inserts/s")
}

// parallelN runs fn(i) for i in [0, n) on g goroutines.
func parallelN(ctx context.Context, g, n int, fn func(ctx context.Context, i int) error) error {
	errs := make(chan error, g)
	next := make(chan int)
	for range g {
		go func() {
			var first error
			for i := range next {
				if first == nil {
					first = fn(ctx, i)
				}
			}
			errs <- first
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	var first error
	for range g {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// BenchmarkFanoutTaskInline measures one fanout task at a time whose receiver lists are all
// delivered inline (200 followers of the author, a board follower, an interest follower) and
// whose pin brings a related pin to the saver, on a Pebble store on disk with fsync on: the
// task's latency, which its sequential commits bound.
func BenchmarkFanoutTaskInline(b *testing.B) {
	ctx := context.Background()
	s, err := zenpebble.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	w := newWorld(b, s, Config{TrimEvery: 1 << 20}, 200, nil)
	other, err := w.g.Create(ctx, zen.TypeBoard, w.alice, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := w.q.handlers[pinlater.TypeFanout]
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		pin, err := w.g.Create(ctx, zen.TypePin, w.travel, map[string]any{"author": w.alice.String(), "board": w.travel.String(),
			"created_ms": w.clk.now().UnixMilli()})
		if err != nil {
			b.Fatal(err)
		}
		// On two boards, with a pin of the other board: the saver gets a related pin.
		w.edge(b, w.travel, zen.EdgeBoardPins, pin.ID)
		w.edge(b, other.ID, zen.EdgeBoardPins, pin.ID)
		w.edge(b, other.ID, zen.EdgeBoardPins, w.pins[1])
		w.edge(b, pin.ID, zen.EdgePinInterests, w.cats)
		task, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(pin.ID), Author: uint64(w.alice), Board: uint64(w.travel),
			CreatedMs: w.clk.now().UnixMilli(), Interests: []uint64{uint64(w.cats)}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := h.ProcessTask(ctx, task); err != nil {
			b.Fatal(err)
		}
	}
}
