package zentest

import (
	"context"
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

type modelSP struct {
	Score float64
	Pin   uint64
	Src   zen.Source
}

func modelScorePins(es []zen.PoolEntry) []modelSP {
	out := make([]modelSP, len(es))
	for i, e := range es {
		out[i] = modelSP{e.Score, e.Pin.Local(), e.Source}
	}
	return out
}

func modelPoolsBasic(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, tb := modelPools(t, s, c)
	u := modelID(t, 3429, zen.TypeUser, 733)
	pin := func(l uint64) zen.ID { return modelID(t, 3429, zen.TypePin, l) }
	in := []zen.PoolEntry{
		{User: u, Source: zen.SourceFollowing, Score: 0.5, Pin: pin(3), Reason: "r"},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(2)},
		{User: u, Source: zen.SourceFollowing, Score: 0.93, Pin: pin(1)},
		{User: u, Source: zen.SourceFollowing, Score: -0.1, Pin: pin(4)},
		{User: u, Source: zen.SourceFollowing, Score: 1.0, Pin: pin(5)},
		{User: u, Source: zen.SourceRelated, Score: 0.2, Pin: pin(5)}, // worse: dropped
		{User: u, Source: zen.SourceRelated, Score: 0.7, Pin: pin(6), CreatedMs: 5},
	}
	// Append-only: one row per (user, source, pin); the same batch again writes the same rows.
	if n, err := p.Insert(ctx, in); err != nil || n != 7 {
		t.Fatalf("Insert = %d, %v; want 7", n, err)
	}
	rows := func() int {
		kvs, err := tb.Scan(ctx, userRange(u))
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}
	if n, err := p.Insert(ctx, in); err != nil || n != 7 || rows() != 7 {
		t.Fatalf("re-Insert = %d, %v, %d rows; want 7 rows written, 7 stored", n, err, rows())
	}
	top := func(src zen.Source) []modelSP {
		es, err := p.Top(ctx, u, src, 100)
		if err != nil {
			t.Fatal(err)
		}
		return modelScorePins(es)
	}
	if diff := cmp.Diff([]modelSP{{1, 5, 1}, {0.93, 1, 1}, {0.93, 2, 1}, {0.5, 3, 1}, {-0.1, 4, 1}}, top(zen.SourceFollowing)); diff != "" {
		t.Errorf("Top (-want +got):\n%s", diff)
	}
	// Pin 3 moves to related with a better score.
	if n, _ := p.Insert(ctx, []zen.PoolEntry{{User: u, Source: zen.SourceRelated, Score: 0.8, Pin: pin(3)}}); n != 1 {
		t.Errorf("improving insert = %d", n)
	}
	if diff := cmp.Diff([]modelSP{{0.8, 3, 3}, {0.7, 6, 3}, {0.2, 5, 3}}, top(zen.SourceRelated)); diff != "" {
		t.Errorf("Top related (-want +got):\n%s", diff)
	}
	// Across sources a pin's best row wins: 5 stays in following, 3 moved to related.
	if diff := cmp.Diff([][]modelSP{{{1, 5, 1}, {0.93, 1, 1}, {0.93, 2, 1}, {-0.1, 4, 1}}, {{0.8, 3, 3}, {0.7, 6, 3}}}, modelBestTops(ctx, t, p, u)); diff != "" {
		t.Errorf("best across sources (-want +got):\n%s", diff)
	}
	if n, err := p.Size(ctx, u, zen.SourceRelated); err != nil || n != 2 {
		t.Errorf("Size related = %d, %v; want 2", n, err)
	}
	modelPoolsTakeAndRemove(ctx, t, p, u, pin)
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got := top(zen.SourceFollowing); len(got) != 0 {
		t.Errorf("Top after DeleteUser = %v", got)
	}
	if _, err := p.Insert(ctx, []zen.PoolEntry{{User: u, Source: 1, Score: math.NaN(), Pin: pin(1)}}); err == nil {
		t.Error("NaN score accepted")
	}
}

// modelBestTops is the best of u's following and related pools across the two sources.
func modelBestTops(ctx context.Context, t *testing.T, p *zen.Pools, u zen.ID) [][]modelSP {
	t.Helper()
	var lists [][]zen.PoolEntry
	for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceRelated} {
		es, err := p.Top(ctx, u, src, 100)
		if err != nil {
			t.Fatal(err)
		}
		lists = append(lists, es)
	}
	var out [][]modelSP
	for _, l := range zen.BestAcrossSources(lists) {
		out = append(out, modelScorePins(l))
	}
	return out
}

// modelPoolsTakeAndRemove continues modelPoolsBasic on its pools: Take, Trim, Expire, Remove and
// RemoveWhere, until the pools are empty.
func modelPoolsTakeAndRemove(ctx context.Context, t *testing.T, p *zen.Pools, u zen.ID, pin func(uint64) zen.ID) {
	t.Helper()
	got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(5)}, {Pin: pin(3)}, {Pin: pin(5)}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]modelSP{{1, 5, 1}, {0.8, 3, 3}}, modelScorePins(got)); diff != "" {
		t.Errorf("Take (-want +got):\n%s", diff)
	}
	if n, _ := p.Size(ctx, u, zen.SourceFollowing); n != 3 {
		t.Errorf("Size = %d, want 3", n)
	}
	if n, err := p.Trim(ctx, u, zen.SourceFollowing, 2); err != nil || n != 1 {
		t.Errorf("Trim = %d, %v", n, err)
	}
	if n, err := p.Expire(ctx, u, 6); err != nil || n != 1 {
		t.Errorf("Expire = %d, %v", n, err)
	}
	if n, err := p.Remove(ctx, u, []zen.ID{pin(1)}); err != nil || n != 1 {
		t.Errorf("Remove = %d, %v", n, err)
	}
	if n, err := p.RemoveWhere(ctx, u, 0, func(e zen.PoolEntry) bool { return e.Pin == pin(2) }); err != nil || n != 1 {
		t.Errorf("RemoveWhere = %d, %v", n, err)
	}
	if n, _ := p.Size(ctx, u, 0); n != 0 {
		t.Errorf("Size after removing all = %d", n)
	}
}

func modelPoolsConcurrentTake(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, _ := modelPools(t, s, c)
	u := modelID(t, 1, zen.TypeUser, 1)
	const pins = 60
	var in []zen.PoolEntry
	for i := range pins {
		in = append(in, zen.PoolEntry{User: u, Pin: modelID(t, 1, zen.TypePin, uint64(i+1)), Source: zen.SourceFollowing, Score: float64(i % 7)})
	}
	if _, err := p.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		won = map[zen.ID]int{}
		wg  sync.WaitGroup
	)
	for range 6 {
		wg.Go(func() {
			for {
				es, err := p.Top(ctx, u, zen.SourceFollowing, 8)
				if err != nil {
					t.Error(err)
					return
				}
				if len(es) == 0 {
					return
				}
				got, err := p.Take(ctx, u, es)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range got {
					won[e.Pin]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(won) != pins {
		t.Errorf("%d pins taken, want %d", len(won), pins)
	}
	for pin, n := range won {
		if n != 1 {
			t.Errorf("pin %d taken %d times", pin, n)
		}
	}
}

// modelPoolsTombstones: a pin taken or forgotten stays out of the pools for later Inserts (a
// late fanout), Restore gives back only a taken pin, and Expire and DeleteUser drop tombstones.
func modelPoolsTombstones(t *testing.T, s zen.Store) {
	ctx, c := modelCtx(t), newModelClock()
	p, tb := modelPools(t, s, c)
	u := modelID(t, 7, zen.TypeUser, 77)
	pin := func(l uint64) zen.ID { return modelID(t, 7, zen.TypePin, l) }
	nowMs := c.Now().UnixMilli()
	e := func(l uint64, score float64) zen.PoolEntry {
		return zen.PoolEntry{User: u, Source: zen.SourceFollowing, Score: score, Pin: pin(l), CreatedMs: nowMs}
	}
	pins := func() []uint64 {
		es, err := p.Top(ctx, u, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, e := range es {
			out = append(out, e.Pin.Local())
		}
		return out
	}
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(1, 0.9), e(2, 0.8)}); err != nil || n != 2 {
		t.Fatalf("Insert = %d, %v", n, err)
	}
	if got, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(1)}}); err != nil || len(got) != 1 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	if n, err := p.Forget(ctx, u, []zen.ID{pin(3)}); err != nil || n != 1 {
		t.Errorf("Forget(absent) = %d, %v; want 1 (an absent pin is remembered too)", n, err)
	}
	// Inserts are blind: the rows are written, and readers leave the pins out.
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(1, 5), e(3, 5)}); err != nil || n != 2 {
		t.Errorf("Insert of taken and forgotten pins = %d, %v; want 2 rows written", n, err)
	}
	if n, err := p.Size(ctx, u, 0); err != nil || n != 1 {
		t.Errorf("Size after late inserts = %d, %v; want 1", n, err)
	}
	if diff := cmp.Diff([]uint64{2}, pins()); diff != "" {
		t.Errorf("after late inserts (-want +got):\n%s", diff)
	}
	if n, err := p.Restore(ctx, []zen.PoolEntry{e(1, 0.9), e(3, 0.9)}); err != nil || n != 1 {
		t.Errorf("Restore = %d, %v; want 1 (the taken pin only)", n, err)
	}
	if diff := cmp.Diff([]uint64{1, 2}, pins()); diff != "" {
		t.Errorf("after Restore (-want +got):\n%s", diff)
	}
	if n, err := p.Size(ctx, u, 0); err != nil || n != 2 {
		t.Errorf("Size = %d, %v; want 2", n, err)
	}
	// Tombstones older than Expire's cut-off go (uncounted); then the pin may come again.
	c.Add(time.Hour)
	if n, err := p.Expire(ctx, u, c.Now().UnixMilli()); err != nil || n != 2 {
		t.Errorf("Expire = %d, %v; want 2", n, err)
	}
	if rows, err := tb.Scan(ctx, userRange(u)); err != nil || len(rows) != 0 {
		t.Errorf("rows after Expire: %d, %v; want none", len(rows), err)
	}
	if n, err := p.Insert(ctx, []zen.PoolEntry{e(3, 0.5)}); err != nil || n != 1 {
		t.Errorf("Insert after expiry = %d, %v; want 1", n, err)
	}
	if _, err := p.Take(ctx, u, []zen.PoolEntry{{Pin: pin(3)}}); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if rows, err := tb.Scan(ctx, userRange(u)); err != nil || len(rows) != 0 {
		t.Errorf("rows after DeleteUser: %d, %v; want none", len(rows), err)
	}
}

// userRange is the scan range of every pools row of user (all are led by the user ID).
func userRange(u zen.ID) zen.ScanOptions {
	return zen.ScanOptions{Start: binary.BigEndian.AppendUint64(nil, uint64(u)), Stop: binary.BigEndian.AppendUint64(nil, uint64(u)+1)}
}
