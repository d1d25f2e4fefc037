package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// RedisPeer is the Redis sorted-set feed on one Redis server, with the durability that server
// runs with, for the equal-work fanout comparison.
type RedisPeer struct {
	Base Baseline
	// Durability is how the server makes writes durable, as it reports it ("AOF appendfsync
	// always", "AOF appendfsync everysec", "none").
	Durability string
	// Synced is true when the server acknowledges a write only after its fsync (AOF always),
	// as the worker's synced pool writes are: the peer of equal durability.
	Synced bool
	// TrimEvery is the peer's trim schedule (its sets are trimmed after 1 in TrimEvery inserts).
	TrimEvery int
}

// RawTabler is a System that opens a fresh table of the store holding the worker's pools, for
// the raw-store peer: the same rows the worker writes, with none of its logic.
type RawTabler interface {
	RawTable(ctx context.Context) (zen.Table, error)
}

// Flusher is a System that counts the flushes of the memtable of the store holding the pools,
// so that the report can show the equal-work writes ran on a data set spilling out of memory.
// Flushes reports false when the store counts none.
type Flusher interface {
	Flushes() (float64, bool)
}

// flushes is sys's flush count, and whether it counts them.
func flushes(sys System) (float64, bool) {
	if f, ok := sys.(Flusher); ok {
		return f.Flushes()
	}
	return 0, false
}

// EqualWork is the fanout's capacity against its peers doing the same work: the same rows in
// the same batches (the worker's: one batch per fanout chunk of at most ChunkSize receivers),
// written by as many concurrent clients as the worker has task slots, trimmed on the same
// schedule.
type EqualWork struct {
	Slots     int     `json:"slots"`
	ChunkSize int     `json:"chunk_size"`
	TrimEvery int     `json:"trim_every"`
	Batches   int     `json:"batches"`
	Rows      int     `json:"rows"`
	MeanBatch float64 `json:"mean_batch_rows"`
	// SmartFeedInsertsPerSec is the burst's pool inserts per second (FanoutResult).
	SmartFeedInsertsPerSec float64 `json:"smartfeed_inserts_per_sec"`
	// SmartFeedFlushes are the memtable flushes of the pools' store during the burst (-1: not
	// counted).
	SmartFeedFlushes float64      `json:"smartfeed_flushes"`
	Redis            []RedisEqual `json:"redis"`
	Raw              *RawEqual    `json:"raw_store,omitempty"`
	Notes            []string     `json:"notes,omitempty"`
	// RatioRedis names the Redis peer fanout_vs_redis_equal compares with (its durability).
	RatioRedis string `json:"fanout_vs_redis_equal_durability"`

	schedule [][]uint64 // the batches, in the order the writers take them
}

// RedisEqual is one Redis server's run of the equal-work fanout.
type RedisEqual struct {
	Durability    string  `json:"durability"`
	Synced        bool    `json:"synced"`
	TrimEvery     int     `json:"trim_every"`
	InsertsPerSec float64 `json:"inserts_per_sec"`
	Seconds       float64 `json:"seconds"`
}

// RawEqual is the store's raw batched writes of the same rows.
type RawEqual struct {
	RowsPerSec float64 `json:"rows_per_sec"`
	Seconds    float64 `json:"seconds"`
	// PrefillRows (PrefillMiB of keys and values) were written to the table, unsynced, before
	// the measurement, so that the store holds more than its memtable; Flushes are the
	// memtable flushes during the measurement (-1: not counted).
	PrefillRows int     `json:"prefill_rows"`
	PrefillMiB  float64 `json:"prefill_mib"`
	Flushes     float64 `json:"flushes"`
}

// poolRowKeyLen and poolRowValueLen are the sizes of a pool row the worker writes for a followed
// user's pin: zen's pool key, and a row value with the reason "followed user".
const (
	poolRowKeyLen   = 8 + 1 + 8 + 8
	poolRowValueLen = 8 + 8 + 8 + 8 + len("followed user")
)

// workerBatches splits each event's receivers as the worker writes them: one batch per chunk of
// at most chunk receivers (a list of at most chunk receivers is one batch, delivered inline),
// the author left out.
func workerBatches(receivers [][]uint64, authors []uint64, chunk int) [][]uint64 {
	chunk = max(chunk, 1)
	var out [][]uint64
	for i, recv := range receivers {
		var rs []uint64
		for _, r := range recv {
			if i < len(authors) && r == authors[i] {
				continue
			}
			rs = append(rs, r)
		}
		for start := 0; start < len(rs); start += chunk {
			out = append(out, rs[start:min(start+chunk, len(rs))])
		}
	}
	return out
}

// runBatches calls write for every batch (with its index) on slots goroutines, each taking the
// next batch when it is done with one, and returns the time from the first call until the
// last returned. The first error stops the others from taking more.
func runBatches(ctx context.Context, batches [][]uint64, slots int, write func(ctx context.Context, i int, b []uint64) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	start := time.Now()
	for range max(slots, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) || ctx.Err() != nil {
					return
				}
				if err := write(ctx, i, batches[i]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(len(batches))) // the others take no more
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return time.Since(start), first
}

// pushEqual writes the batches to a Redis peer on slots clients, event i's batches as pin
// pinBase+i: one pipelined Push per batch, as the worker writes one batch per chunk. It returns
// the inserts per second.
func pushEqual(ctx context.Context, base Baseline, batches [][]uint64, slots int, pinBase uint64) (RedisEqual, error) {
	var inserts atomic.Int64
	took, err := runBatches(ctx, batches, slots, func(ctx context.Context, i int, b []uint64) error {
		n, err := base.Push(ctx, b, pinBase+uint64(i), float64(i))
		inserts.Add(int64(n))
		return err
	})
	if err != nil {
		return RedisEqual{}, err
	}
	return RedisEqual{InsertsPerSec: float64(inserts.Load()) / took.Seconds(), Seconds: took.Seconds()}, nil
}

// poolRows are batch's rows as the worker writes them for a pin: zen's pool key of each
// receiver (source following, the pin's score) and a value of a pool row's size, key-sorted.
func poolRows(b []uint64, pin zen.ID, score float64, val []byte) ([]zen.Mutation, error) {
	muts := make([]zen.Mutation, 0, len(b))
	for _, u := range b {
		k, err := zen.PoolKey(zen.ID(u), zen.SourceFollowing, score, pin)
		if err != nil {
			return nil, err
		}
		muts = append(muts, zen.Mutation{Key: k, Value: val})
	}
	slices.SortFunc(muts, func(a, b zen.Mutation) int { return bytes.Compare(a.Key, b.Key) })
	return muts, nil
}

// rawPin is the i-th pin ID of the raw peer's rows (local IDs far above any the run makes).
func rawPin(i int) zen.ID {
	id, _ := zen.NewID(uint16(i%4096), zen.TypePin, uint64(1)<<35+uint64(i))
	return id
}

// rawEqual writes the batches' pool rows to t on slots writers, synced, one Apply per batch,
// and returns the rows per second.
func rawEqual(ctx context.Context, t zen.Table, batches [][]uint64, slots int, pinBase int) (float64, time.Duration, error) {
	val := make([]byte, poolRowValueLen)
	var rows atomic.Int64
	took, err := runBatches(ctx, batches, slots, func(ctx context.Context, i int, b []uint64) error {
		muts, err := poolRows(b, rawPin(pinBase+i), 0.5, val)
		if err != nil {
			return err
		}
		if err := t.Apply(ctx, muts); err != nil {
			return fmt.Errorf("raw store: %w", err)
		}
		rows.Add(int64(len(muts)))
		return nil
	})
	if err != nil {
		return 0, took, err
	}
	return float64(rows.Load()) / took.Seconds(), took, nil
}

// rawPeerBound bounds the raw store peer's pre-fill and measurement as a whole.
const rawPeerBound = 30 * time.Minute

// prefill writes at least size bytes of pool-sized rows for users (random pins) to t, unsynced, in
// batches of 1,000, and returns the rows written: the data set the raw peer's measurement then
// adds to is larger than the store's memtable.
func prefill(ctx context.Context, t zen.Table, users []uint64, size int64, seed uint64) (int, error) {
	if len(users) == 0 {
		return 0, errors.New("prefill: no users")
	}
	const batch = 1000
	rows := int((size + int64(poolRowKeyLen+poolRowValueLen) - 1) / int64(poolRowKeyLen+poolRowValueLen))
	r := rand.New(rand.NewPCG(seed, 0xf111))
	val := make([]byte, poolRowValueLen)
	lazy := zen.Lazily(ctx)
	done := 0
	for done < rows {
		muts := make([]zen.Mutation, 0, min(batch, rows-done))
		for i := range cap(muts) {
			// Each row its own pin: no two rows of the pre-fill share a key.
			k, err := zen.PoolKey(zen.ID(users[r.IntN(len(users))]), zen.SourceFollowing, r.Float64(), rawPin(1<<30+done+i))
			if err != nil {
				return done, err
			}
			muts = append(muts, zen.Mutation{Key: k, Value: val})
		}
		slices.SortFunc(muts, func(a, b zen.Mutation) int { return bytes.Compare(a.Key, b.Key) })
		if err := t.Apply(lazy, muts); err != nil {
			return done, fmt.Errorf("prefill: %w", err)
		}
		done += len(muts)
	}
	return done, nil
}

// equalWork runs the peers of the fanout on the burst's receivers, split and written as the
// worker writes them: each Redis peer, then the raw store (its table pre-filled past the
// memtable first). It leaves the SmartFeed side (the burst) to the caller.
func equalWork(ctx context.Context, sys System, peers []RedisPeer, receivers [][]uint64, authors []uint64, opts Options, say func(string, ...any)) (*EqualWork, error) {
	slots, chunk := max(opts.WorkerSlots, 1), max(opts.ChunkSize, 1)
	eq := &EqualWork{Slots: slots, ChunkSize: chunk, TrimEvery: opts.TrimEvery, SmartFeedFlushes: -1}
	eq.schedule = workerBatches(receivers, authors, chunk)
	for _, b := range eq.schedule {
		eq.Rows += len(b)
	}
	eq.Batches = len(eq.schedule)
	eq.MeanBatch = ratio(float64(eq.Rows), float64(eq.Batches))
	if eq.Rows == 0 {
		return eq, errors.New("equal work: the burst has no receivers")
	}
	for i, p := range peers {
		r, err := pushEqual(ctx, p.Base, eq.schedule, slots, uint64(1e12)+uint64(i)*uint64(1e9))
		if err != nil {
			return eq, fmt.Errorf("redis peer (%s): %w", p.Durability, err)
		}
		r.Durability, r.Synced, r.TrimEvery = p.Durability, p.Synced, p.TrimEvery
		eq.Redis = append(eq.Redis, r)
		say("equal work: Redis sorted sets (%s, trimmed 1 in %d inserts): %.0f inserts/s on %d clients, %d batches of %.0f rows on average",
			p.Durability, p.TrimEvery, r.InsertsPerSec, slots, eq.Batches, eq.MeanBatch)
	}
	rt, ok := sys.(RawTabler)
	if !ok {
		eq.Notes = append(eq.Notes, "the raw store was not measured: the system opens no raw table")
		return eq, nil
	}
	// The raw peer is a batch job: its writes wait for the store as long as it takes, not the
	// store's per-call bound for a context without a deadline (5 s on HBase, which a region
	// server still opening the new table's regions can exceed).
	ctx, cancel := context.WithTimeout(ctx, rawPeerBound)
	defer cancel()
	t, err := rt.RawTable(ctx)
	if err != nil {
		return eq, fmt.Errorf("raw store: %w", err)
	}
	raw := &RawEqual{Flushes: -1}
	var users []uint64
	for _, b := range eq.schedule {
		users = append(users, b...)
	}
	if opts.RawPrefillBytes > 0 {
		st := time.Now()
		if raw.PrefillRows, err = prefill(ctx, t, users, opts.RawPrefillBytes, opts.Seed); err != nil {
			return eq, err
		}
		raw.PrefillMiB = float64(raw.PrefillRows*(poolRowKeyLen+poolRowValueLen)) / (1 << 20)
		say("equal work: raw store pre-filled with %d rows (%.0f MiB) in %.1f s", raw.PrefillRows, raw.PrefillMiB, time.Since(st).Seconds())
	}
	f0, counts := flushes(sys)
	rate, took, err := rawEqual(ctx, t, eq.schedule, slots, 0)
	if err != nil {
		return eq, err
	}
	raw.RowsPerSec, raw.Seconds = rate, took.Seconds()
	if f1, ok := flushes(sys); ok && counts {
		raw.Flushes = f1 - f0
	}
	eq.Raw = raw
	fl := "the store counts no memtable flushes"
	if raw.Flushes >= 0 {
		fl = fmt.Sprintf("%.0f memtable flushes during it", raw.Flushes)
	}
	say("equal work: raw store %.0f rows/s on %d writers, synced batches as the worker's (%s)", rate, slots, fl)
	return eq, nil
}

// setRatios puts the equal-work ratios into res: SmartFeed's burst against the Redis peer whose
// durability is the worker's (synced: AOF always) when one ran, the first peer otherwise, and
// against the raw store.
func (eq *EqualWork) setRatios(res *Results) {
	eq.SmartFeedInsertsPerSec = res.Fanout.BurstInsertsPerSec
	var peer *RedisEqual
	for i := range eq.Redis {
		if eq.Redis[i].Synced {
			peer = &eq.Redis[i]
			break
		}
	}
	if peer == nil && len(eq.Redis) > 0 {
		peer = &eq.Redis[0]
		eq.Notes = append(eq.Notes, "no Redis peer acknowledging writes only once fsynced (appendfsync always), as the worker's pool writes are, ran: "+
			"fanout_vs_redis_equal compares with one of weaker durability ("+peer.Durability+")")
	}
	res.Ratios["fanout_vs_redis_equal"] = 0
	if peer != nil {
		res.Ratios["fanout_vs_redis_equal"] = ratio(eq.SmartFeedInsertsPerSec, peer.InsertsPerSec)
		eq.RatioRedis = peer.Durability
	}
	res.Ratios["fanout_vs_raw_store_equal"] = 0
	if eq.Raw != nil {
		res.Ratios["fanout_vs_raw_store_equal"] = ratio(eq.SmartFeedInsertsPerSec, eq.Raw.RowsPerSec)
	}
}
