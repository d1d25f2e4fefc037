package feedsvc

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// countingTable counts the compare-and-sets that reach a table: one by one, and in batches.
type countingTable struct {
	zen.Table
	singles, batches atomic.Int64
}

func (c *countingTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	c.singles.Add(1)
	return c.Table.CheckAndSet(ctx, key, expected, value)
}

func (c *countingTable) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	c.batches.Add(1)
	out := make([]bool, len(conds))
	for i, cd := range conds {
		ok, err := c.Table.CheckAndSet(ctx, cd.Key, cd.Expected, cd.Value)
		if err != nil {
			return nil, err
		}
		out[i] = ok
	}
	return out, nil
}

// TestClaimAll claims a chunk's pins in the pin index in one batch: a pin held elsewhere in the
// feed, or earlier in the chunk, is not ours; a pin this position claimed before (a retry) is;
// a pin whose entry a trim removed between the batch and the check is claimed again.
func TestClaimAll(t *testing.T) {
	ctx := t.Context()
	inner, _ := zenmem.New().Table(ctx, "feed")
	ct := &countingTable{Table: inner}
	standby, _ := zenmem.New().Table(ctx, "feed")
	svc, err := New(Deps{Primary: ct, Standby: standby, Generator: newFakeGen(1), Enqueuer: &fakeQueue{}}, queuedConfig())
	if err != nil {
		t.Fatal(err)
	}
	u := userID(t, 1)
	a, b, c := pinID(1), pinID(2), pinID(3)
	elsewhere := position{Seq: 7, Pos: 1}
	if err := inner.Apply(ctx, []zen.Mutation{{Key: pinKey(u, a), Value: encodePosition(elsewhere)}}); err != nil {
		t.Fatal(err)
	}
	pins := []zen.ID{a, b, b, c}
	ats := []position{{Seq: 9, Pos: 1}, {Seq: 9, Pos: 2}, {Seq: 9, Pos: 3}, {Seq: 9, Pos: 4}}
	want := []bool{false, true, false, true}
	for run := range 2 { // the second run is a retry of the same chunk
		got, err := svc.claimAll(ctx, u, pins, ats)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("run %d: mine (-want +got):\n%s", run, diff)
		}
	}
	if n := ct.singles.Load(); n != 0 {
		t.Errorf("%d compare-and-sets one by one, want every claim in a batch", n)
	}
	// Run 1: one batch, nothing lost. Run 2: one batch (every claim there already), then a read.
	if n := ct.batches.Load(); n != 2 {
		t.Errorf("%d batches of compare-and-sets, want 2", n)
	}

	// The entry of c trimmed away after the batch lost on it: claimed again, in a second batch.
	trim := &trimBetween{countingTable: ct, key: pinKey(u, c)}
	svc.primary = trim
	if err := inner.Apply(ctx, []zen.Mutation{{Key: pinKey(u, c), Value: encodePosition(elsewhere)}}); err != nil {
		t.Fatal(err)
	}
	got, err := svc.claimAll(ctx, u, []zen.ID{c}, []position{{Seq: 10, Pos: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !got[0] {
		t.Error("a pin whose entry was trimmed after the batch is not claimed")
	}
	if v, err := inner.Get(ctx, pinKey(u, c)); err != nil || string(v) != string(encodePosition(position{Seq: 10, Pos: 1})) {
		t.Errorf("pin index of c: %x, %v", v, err)
	}
}

// trimBetween deletes key after the first batch of compare-and-sets, as a trim could.
type trimBetween struct {
	*countingTable
	key  []byte
	done bool
}

func (t *trimBetween) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	out, err := t.countingTable.CheckAndSetMany(ctx, conds)
	if err == nil && !t.done {
		t.done = true
		err = t.Table.Apply(ctx, []zen.Mutation{{Key: t.key, Delete: true}})
	}
	return out, err
}
