package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// chunkRecorder is an Enqueuer that records the fanout-chunk tasks it is given (list and
// cursor) and fails the failAt-th one (1-based; 0 = never), as a worker killed or a store
// failing mid-fanout would leave it.
type chunkRecorder struct {
	failAt int
	n      int
	got    []string // "list:cursor" of each chunk enqueued
}

var errKilled = errors.New("worker killed")

func (r *chunkRecorder) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	if t.Type() != pinlater.TypeFanoutChunk {
		return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
	}
	r.n++
	if r.n == r.failAt {
		return nil, errKilled
	}
	var p pinlater.FanoutChunkPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return nil, err
	}
	r.got = append(r.got, zen.ID(p.ListFrom).String()+":"+p.Cursor)
	return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
}

// progressRows counts the worker's fanout checkpoint rows.
func progressRows(t *testing.T, st zen.Table) int {
	t.Helper()
	rows, err := st.Scan(context.Background(), zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if len(r.Key) > 8 && r.Key[8] == rowProgress {
			n++
		}
	}
	return n
}

// TestFanoutResumesAtCheckpoint: a fanout task that dies part-way (here: its Nth chunk enqueue
// fails) runs again from the first page without a chunk task, not from the start: together the
// two runs enqueue every page exactly once (but for a list of one page, which costs one listing
// again), a list finished before the failure is not listed again, and no checkpoint row is left
// once the fanout is done.
func TestFanoutResumesAtCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failAt int
		// second is how many chunk tasks the rerun enqueues; resumed, the lists resumed.
		second  int
		resumed float64
	}{
		// alice's 10 followers are 5 pages of 2: pages 1–3 enqueued, then the run dies.
		{"mid author list", 4, 4, 1}, // alice's pages 4–5, then the board's and the interest's (one page each)
		// alice's list done (5 pages), the board's page enqueued, the interest's fails.
		{"after the author list", 7, 2, 0}, // board again (one page, no checkpoint) + interest
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := Config{ChunkSize: 2, InlineReceivers: -1}
			w := newWorld(t, zenmem.New(), cfg, 10, nil)
			task := w.fanoutTask(t, 0) // with the interest list
			var p pinlater.FanoutPayload
			if err := json.Unmarshal(task.Payload(), &p); err != nil {
				t.Fatal(err)
			}
			// The uninterrupted run's chunk tasks, from a worker over the same graph.
			clean := &chunkRecorder{}
			cw, err := New(w.g, w.pools, &zenmem.Table{}, clean, cfg, Options{Now: w.clk.now})
			if err != nil {
				t.Fatal(err)
			}
			if err := cw.HandleFanout(ctx, p); err != nil {
				t.Fatal(err)
			}

			first := &chunkRecorder{failAt: tc.failAt}
			w1, err := New(w.g, w.pools, w.state, first, cfg, Options{Now: w.clk.now})
			if err != nil {
				t.Fatal(err)
			}
			if err := w1.HandleFanout(ctx, p); !errors.Is(err, errKilled) {
				t.Fatalf("first run = %v, want the injected failure", err)
			}
			if progressRows(t, w.state) == 0 {
				t.Fatal("no checkpoint after the first run died")
			}
			second := &chunkRecorder{}
			w2, err := New(w.g, w.pools, w.state, second, cfg, Options{Now: w.clk.now})
			if err != nil {
				t.Fatal(err)
			}
			if err := w2.HandleFanout(ctx, p); err != nil {
				t.Fatal(err)
			}
			if len(second.got) != tc.second {
				t.Errorf("the rerun enqueued %d chunk tasks %v, want %d", len(second.got), second.got, tc.second)
			}
			if got := testutil.ToFloat64(w2.m.resumed); got != tc.resumed {
				t.Errorf("lists resumed %v, want %v", got, tc.resumed)
			}
			// Together: every page of the clean run, none twice, but for the page of a one-page
			// list (no checkpoint: the rerun lists it again; pinlater drops the duplicate task).
			pages := map[string]int{} // list -> pages in the clean run
			want := map[string]int{}
			for _, c := range clean.got {
				want[c] = 1
				pages[c[:strings.IndexByte(c, ':')]]++
			}
			seen := map[string]int{}
			for _, c := range append(first.got, second.got...) {
				if seen[c] > 0 && pages[c[:strings.IndexByte(c, ':')]] == 1 {
					continue
				}
				seen[c]++
			}
			if diff := cmp.Diff(want, seen); diff != "" {
				t.Errorf("pages enqueued over both runs vs an uninterrupted run (-want +got):\n%s", diff)
			}
			if n := progressRows(t, w.state); n != 0 {
				t.Errorf("%d checkpoint rows left after the fanout finished", n)
			}
		})
	}
}
