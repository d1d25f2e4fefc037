package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func TestWorkerBatches(t *testing.T) {
	for _, tc := range []struct {
		name      string
		receivers [][]uint64
		authors   []uint64
		chunk     int
		want      [][]uint64
	}{
		{"a short list is one batch", [][]uint64{{1, 2, 3}}, []uint64{9}, 1000, [][]uint64{{1, 2, 3}}},
		{"the author is left out", [][]uint64{{1, 9, 3}}, []uint64{9}, 1000, [][]uint64{{1, 3}}},
		{"a long list in chunks", [][]uint64{{1, 2, 3, 4, 5}}, []uint64{9}, 2, [][]uint64{{1, 2}, {3, 4}, {5}}},
		{"each event its own batches", [][]uint64{{1, 2}, {3}}, []uint64{8, 9}, 2, [][]uint64{{1, 2}, {3}}},
		{"no receivers, no batch", [][]uint64{{}, {7}}, []uint64{8, 7}, 2, nil},
	} {
		got := workerBatches(tc.receivers, tc.authors, tc.chunk)
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

// slotBaseline is a Redis peer whose Push holds each call until `together` are in flight at
// once, and records the batches it was given.
type slotBaseline struct {
	meeting
	mu      sync.Mutex
	batches [][]uint64
}

func (b *slotBaseline) Push(ctx context.Context, recv []uint64, _ uint64, _ float64) (int, error) {
	b.mu.Lock()
	b.batches = append(b.batches, append([]uint64(nil), recv...))
	b.mu.Unlock()
	if err := b.arrive(ctx); err != nil {
		return 0, err
	}
	return len(recv), nil
}

func (b *slotBaseline) Read(context.Context, uint64, int) ([]uint64, error) { return nil, nil }

// recordTable is a zen.Table recording the size of each batch applied; a batch of at most
// small rows (the measured ones, not the pre-fill's) is held until `together` are in flight.
type recordTable struct {
	zen.Table
	meeting
	small int
	mu    sync.Mutex
	sizes []int
}

func (r *recordTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(muts))
	r.mu.Unlock()
	if len(muts) <= r.small {
		if err := r.arrive(ctx); err != nil {
			return err
		}
	}
	return r.Table.Apply(ctx, muts)
}

// rawSystem is a System with a raw table and a flush counter.
type rawSystem struct {
	System
	table   *recordTable
	flushes float64
}

func (s *rawSystem) RawTable(context.Context) (zen.Table, error) { return s.table, nil }
func (s *rawSystem) Flushes() (float64, bool) {
	s.flushes++
	return s.flushes, true
}

// The peers write the worker's batches on as many clients as the worker has task slots: the
// Redis peer's Push is held until that many are in flight at once (one client never gets past
// it), and the raw store gets the same batches, pool-sized rows, after a pre-fill.
func TestEqualWorkRunsTheWorkersBatchesOnItsSlots(t *testing.T) {
	// A peer with fewer clients never has `slots` pushes in flight: the deadline fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const slots, chunk = 4, 3
	var receivers [][]uint64
	var authors []uint64
	for a := range 8 {
		var rs []uint64
		for f := range 2 + a {
			rs = append(rs, uint64(1000+10*a+f))
		}
		receivers, authors = append(receivers, rs), append(authors, uint64(a+1))
	}
	base := &slotBaseline{meeting: meeting{together: slots}}
	st, err := zenmem.New().Table(ctx, "raw")
	if err != nil {
		t.Fatal(err)
	}
	sys := &rawSystem{table: &recordTable{Table: st, meeting: meeting{together: slots}, small: chunk}}
	opts := Options{WorkerSlots: slots, ChunkSize: chunk, TrimEvery: 1024, RawPrefillBytes: 2500 * int64(poolRowKeyLen+poolRowValueLen)}
	eq, err := equalWork(ctx, sys, []RedisPeer{{Base: base, Durability: "AOF appendfsync always", Synced: true, TrimEvery: 1024}},
		receivers, authors, opts, func(string, ...any) {})
	if err != nil {
		t.Fatal(err)
	}
	want := workerBatches(receivers, authors, chunk)
	wantRows := 0
	for _, b := range want {
		wantRows += len(b)
	}
	if eq.Rows != wantRows || eq.Batches != len(want) || eq.Slots != slots {
		t.Errorf("equal work: %d rows in %d batches on %d slots; want %d in %d on %d", eq.Rows, eq.Batches, eq.Slots, wantRows, len(want), slots)
	}
	if d := cmp.Diff(len(want), len(base.batches)); d != "" {
		t.Errorf("Redis pushes (-want +got):\n%s", d)
	}
	for _, b := range base.batches {
		if len(b) > chunk {
			t.Errorf("a Redis push of %d receivers, over the chunk of %d", len(b), chunk)
		}
	}
	if len(eq.Redis) != 1 || eq.Redis[0].InsertsPerSec <= 0 || eq.Redis[0].Durability != "AOF appendfsync always" {
		t.Errorf("Redis results %+v", eq.Redis)
	}
	raw := sys.table
	if eq.Raw == nil || eq.Raw.PrefillRows != 2500 || eq.Raw.RowsPerSec <= 0 || eq.Raw.Flushes != 1 {
		t.Fatalf("raw result %+v", eq.Raw)
	}
	// The pre-fill's batches of 1,000, then the worker's batches.
	measured := raw.sizes[3:]
	var wantSizes, gotSizes []int
	for _, b := range want {
		wantSizes = append(wantSizes, len(b))
	}
	gotSizes = append(gotSizes, measured...)
	sortInts(wantSizes)
	sortInts(gotSizes)
	if d := cmp.Diff(wantSizes, gotSizes); d != "" {
		t.Errorf("raw batch sizes (-want +got):\n%s", d)
	}
	rows, err := st.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 2500+wantRows {
		t.Errorf("the raw table holds %d rows, want the pre-fill's 2500 and the %d measured", len(rows), wantRows)
	}
	for _, r := range rows {
		if len(r.Key) != poolRowKeyLen || len(r.Value) != poolRowValueLen {
			t.Fatalf("a raw row of %d+%d bytes, want a pool row's %d+%d", len(r.Key), len(r.Value), poolRowKeyLen, poolRowValueLen)
		}
	}
}

func sortInts(v []int) {
	for i := range v {
		for j := i + 1; j < len(v); j++ {
			if v[j] < v[i] {
				v[i], v[j] = v[j], v[i]
			}
		}
	}
}

func TestEqualWorkRatios(t *testing.T) {
	for _, tc := range []struct {
		name      string
		redis     []RedisEqual
		raw       *RawEqual
		wantRedis float64
		wantRaw   float64
		against   string
		note      bool
	}{
		{"the synced Redis is the peer", []RedisEqual{{Durability: "AOF appendfsync everysec", InsertsPerSec: 100}, {Durability: "AOF appendfsync always", Synced: true, InsertsPerSec: 50}},
			&RawEqual{RowsPerSec: 400}, 1.6, 0.2, "AOF appendfsync always", false},
		{"without one, the first, with a note", []RedisEqual{{Durability: "AOF appendfsync everysec", InsertsPerSec: 100}}, nil, 0.8, 0, "AOF appendfsync everysec", true},
		{"no peer", nil, nil, 0, 0, "", false},
	} {
		res := &Results{Ratios: map[string]float64{}, Fanout: FanoutResult{BurstInsertsPerSec: 80}}
		eq := &EqualWork{Redis: tc.redis, Raw: tc.raw}
		eq.setRatios(res)
		got := map[string]float64{"redis": res.Ratios["fanout_vs_redis_equal"], "raw": res.Ratios["fanout_vs_raw_store_equal"]}
		if d := cmp.Diff(map[string]float64{"redis": tc.wantRedis, "raw": tc.wantRaw}, got); d != "" {
			t.Errorf("%s: ratios (-want +got):\n%s", tc.name, d)
		}
		if eq.RatioRedis != tc.against || (len(eq.Notes) > 0) != tc.note {
			t.Errorf("%s: against %q (notes %q), want %q (a note: %v)", tc.name, eq.RatioRedis, eq.Notes, tc.against, tc.note)
		}
		for _, k := range []string{"fanout_vs_redis_equal", "fanout_vs_raw_store_equal"} {
			if _, ok := res.Ratios[k]; !ok {
				t.Errorf("%s: no %s", tc.name, k)
			}
		}
	}
}

func TestHedgeRatios(t *testing.T) {
	res := &Results{Ratios: map[string]float64{}, Hedging: []HedgeResult{
		{Hedging: false, GetFeed: Summary{P999: 500}, ExtraLoad: 0},
		{Hedging: true, GetFeed: Summary{P999: 50}, ExtraLoad: 0.025, CutoffMs: 20, StandbyP999: 5},
	}}
	res.setHedgeRatios()
	want := map[string]float64{"hedged_p999_vs_unhedged": 0.1, "hedge_extra_load": 0.025}
	if d := cmp.Diff(want, res.Ratios); d != "" {
		t.Errorf("ratios (-want +got):\n%s", d)
	}
	res = &Results{Ratios: map[string]float64{}, Hedging: []HedgeResult{{Hedging: true, GetFeed: Summary{P999: 50}, ExtraLoad: 0.02}}}
	res.setHedgeRatios()
	if res.Ratios["hedged_p999_vs_unhedged"] != 0 {
		t.Errorf("without a run with hedging off: %v, want 0", res.Ratios["hedged_p999_vs_unhedged"])
	}
	for _, k := range RatioKeys {
		if strings.Contains(k, "vs_bound") {
			t.Errorf("ratio %s compares with its own formula", k)
		}
	}
}
