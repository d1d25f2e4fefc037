package zen_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestDeletionLog: deletions from two Graphs on one store (two processes) each take one row of
// the log, without gaps; a second Delete of a deleted object and a Delete of an absent one log
// nothing; DeletionsAfter pages through the rows in order and returns none past the last.
func TestDeletionLog(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	a, b := newGraph(t, s, nil), newGraph(t, s, nil)
	const n = 40
	ids := make([]zen.ID, n)
	for i := range ids {
		o, err := a.Create(ctx, zen.TypePin, 0, map[string]any{"title": "p"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = o.ID
	}
	var wg sync.WaitGroup
	for i, g := range []*zen.Graph{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < n; j += 2 {
				if err := g.Delete(ctx, ids[j]); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := a.Delete(ctx, ids[0]); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if err := a.Delete(ctx, mustID(t, 9, zen.TypePin, 999)); err == nil {
		t.Fatal("delete of an absent pin succeeded")
	}
	var got []zen.ID
	for after := uint64(0); ; {
		page, err := b.DeletionsAfter(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after += uint64(len(page))
	}
	seen := map[zen.ID]int{}
	for _, id := range got {
		seen[id]++
	}
	want := map[zen.ID]int{}
	for _, id := range ids {
		want[id] = 1
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("deletions logged (-want +got):\n%s", diff)
	}
	if _, err := b.DeletionsAfter(ctx, 0, zen.MaxDeletionsPage+1); err == nil {
		t.Error("DeletionsAfter took a limit past MaxDeletionsPage")
	}
}

// claimStore is a Store whose counters table holds the first compare-and-set of one key until
// release is closed, saying when it arrived on held.
type claimStore struct {
	zen.Store
	key     []byte
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *claimStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil || name != zen.TableCounters {
		return t, err
	}
	return &claimTable{Table: t, s: s}, nil
}

type claimTable struct {
	zen.Table
	s *claimStore
}

func (t *claimTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if bytes.Equal(key, t.s.key) {
		t.s.once.Do(func() {
			t.s.held <- struct{}{}
			<-t.s.release
		})
	}
	return t.Table.CheckAndSet(ctx, key, expected, value)
}

// TestDeletionClaimAfterTrim: a deletion finds the log's last row 3 and claims row 4, but its
// claim is held while another process logs rows 4-6 and compacts the log at 6, trimming rows
// 1-5. Row 4 is absent again, so the held claim succeeds; the snapshot at 6 does not name that
// deletion, and a reader starting from it would never see it. The deletion finds the snapshot
// past its row and logs itself again: a reader that starts afterwards knows it.
func TestDeletionClaimAfterTrim(t *testing.T) {
	ctx := context.Background()
	mem := zenmem.New()
	row4 := binary.BigEndian.AppendUint64([]byte{0, 0, 0, 0, 0, 0, 0, 0, 'x'}, 4)
	held := &claimStore{Store: mem, key: row4, held: make(chan struct{}), release: make(chan struct{})}
	other, slow := newGraph(t, mem, nil), newGraph(t, held, nil)
	pins := make([]zen.ID, 7)
	for i := range pins {
		o, err := other.Create(ctx, zen.TypePin, 0, map[string]any{"title": "p"})
		if err != nil {
			t.Fatal(err)
		}
		pins[i] = o.ID
	}
	for _, p := range pins[:3] {
		if err := other.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	deleted := make(chan error, 1)
	go func() { deleted <- slow.Delete(ctx, pins[6]) }()
	<-held.held
	for _, p := range pins[3:6] {
		if err := other.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if pos, err := other.CompactDeletions(ctx, 1); err != nil || pos != 6 {
		t.Fatalf("compaction: %d, %v; want 6", pos, err)
	}
	close(held.release)
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	pos, ids, err := newGraph(t, mem, nil).DeletionSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[zen.ID]bool{}
	for _, id := range ids {
		got[id] = true
	}
	tail, err := other.DeletionsAfter(ctx, pos, zen.MaxDeletionsPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range tail {
		got[id] = true
	}
	want := map[zen.ID]bool{}
	for _, p := range pins {
		want[p] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a reader from the snapshot at %d and its %d rows past it (-want +got):\n%s", pos, len(tail), diff)
	}
}
