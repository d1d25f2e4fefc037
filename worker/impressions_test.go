package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/quiet"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// failingTable fails every compare-and-set of the rows of user fail (0: none), as a store
// that is down for them would.
type failingTable struct {
	zen.Table
	fail atomic.Uint64
}

var errTableDown = errors.New("engagement table down")

func (t *failingTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	if u := t.fail.Load(); u != 0 && bytes.HasPrefix(key, binary.BigEndian.AppendUint64(nil, u)) {
		return false, errTableDown
	}
	return t.Table.CheckAndSet(ctx, key, expected, value)
}

// impressionsWorld is engagementWorldN with 3 followers of alice, over an engagement table
// that can be made to fail.
func impressionsWorld(t *testing.T) (*world, *engagement.Store, *failingTable) {
	t.Helper()
	s := zenmem.New()
	w := newWorld(t, s, Config{FeatureTTL: -1, ActiveTTL: -1}, 3, nil)
	et, err := s.Table(t.Context(), engagement.Table)
	if err != nil {
		t.Fatal(err)
	}
	ft := &failingTable{Table: et}
	store := engagement.NewStore(ft, 0, w.clk.now)
	q := newInlineQueue()
	wk, err := New(w.g, w.pools, w.state, q, Config{FeatureTTL: -1, ActiveTTL: -1},
		Options{Now: w.clk.now, Engagement: store, Experiment: engagement.Experiment{Salt: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	wk.Register(q)
	w.w, w.q = wk, q
	return w, store, ft
}

// servedPage is a page of impressions of pins for user, as the feed's impression log writes it.
func (w *world) servedPage(user zen.ID, rid, source string, pins ...zen.ID) pinlater.EngagementPayload {
	p := pinlater.EngagementPayload{V: pinlater.PayloadVersion, User: uint64(user), RequestID: rid, Arm: engagement.ArmDefault}
	for i, pin := range pins {
		p.Events = append(p.Events, pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(pin),
			Position: i, Fresh: i == 0, Source: source, AtMs: w.clk.now().UnixMilli()})
	}
	return p
}

func (w *world) runImpressions(t *testing.T, pages ...pinlater.EngagementPayload) error {
	t.Helper()
	task, err := pinlater.NewImpressions(pinlater.ImpressionsPayload{Pages: pages})
	if err != nil {
		t.Fatal(err)
	}
	return handler(t, w.q, pinlater.TypeImpressions).ProcessTask(t.Context(), task)
}

// logRows is the impression log: "user pin" -> its row.
func logRows(t *testing.T, store *engagement.Store) map[[2]uint64]engagement.LogRow {
	t.Helper()
	out := map[[2]uint64]engagement.LogRow{}
	if err := store.ScanLog(t.Context(), func(r engagement.LogRow) error {
		out[[2]uint64{r.User, r.Pin}] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHandleImpressions: each page of an impressions task is applied once, with the features
// the user's scores see (those of the user's profile read for the pin, as a fanout reads it);
// run again, the task changes nothing. A deleted or unknown pin is skipped and counted, and an
// invalid page (a board as the user, an unknown source) is skipped and counted without holding
// up the others.
func TestHandleImpressions(t *testing.T) {
	w, store, et := impressionsWorld(t)
	ctx := t.Context()
	f0, f1, f2 := w.followers[0], w.followers[1], w.followers[2]
	writeProfile(t, et, f0, engagement.Profile{HiddenAuthors: []uint64{uint64(w.alice)}, Affinities: []engagement.AffinityEntry{
		{Kind: engagement.KindAuthor, ID: uint64(w.alice), V: 2, T: w.clk.now().UnixMilli()},
		{Kind: engagement.KindBoard, ID: uint64(w.travel), V: 1, T: w.clk.now().UnixMilli()},
		{Kind: engagement.KindInterest, ID: uint64(w.cats), V: 0.5, T: w.clk.now().UnixMilli()},
		{Kind: engagement.KindSource, ID: uint64(zen.SourceInterest), V: 3, T: w.clk.now().UnixMilli()},
		{Kind: engagement.KindAuthor, ID: 1 << 40, V: 9, T: w.clk.now().UnixMilli()}}})
	unknown, err := zen.NewID(w.pins[0].Shard(), zen.TypePin, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	pages := []pinlater.EngagementPayload{
		w.servedPage(f0, "feed:a", "interest", w.pins[0], w.pins[1]),
		w.servedPage(w.travel, "feed:board", "", w.pins[2]), // a board is no user
		w.servedPage(f1, "feed:b", "", w.pins[2], unknown),
		w.servedPage(f2, "feed:c", "nowhere", w.pins[3]), // no such source
		w.servedPage(f2, "feed:d", "", w.pins[0]),
	}
	// The rows as the handler wrote them before it read the whole profile once per batch:
	// the features of each pin scored for the user through receivers (the wanted entries).
	want := map[[2]uint64]engagement.LogRow{}
	for _, pg := range []pinlater.EngagementPayload{pages[0], pages[2], pages[4]} {
		for _, e := range pg.Events {
			pi, err := w.w.engagedPin(ctx, zen.ID(e.Pin))
			if err != nil {
				t.Fatal(err)
			}
			if pi == nil {
				continue
			}
			rs, err := w.w.receivers(ctx, []zen.ID{zen.ID(pg.User)}, pi, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			src := zen.SourceFollowing
			if e.Source != "" {
				src, _ = zen.ParseSource(e.Source)
			}
			f := w.w.features(rs[0], pi, src, e.AtMs-pi.createdMs, 0)
			want[[2]uint64{pg.User, e.Pin}] = engagement.LogRow{User: pg.User, Pin: e.Pin, AtMs: e.AtMs, Arm: pg.Arm,
				Model: "weights", Position: e.Position, Fresh: e.Fresh, Inputs: f.Inputs()}
		}
	}
	if r := want[[2]uint64{uint64(f0), uint64(w.pins[0])}]; r.Inputs.EngAuthor == 0 || r.Inputs.EngSource == 0 || !r.Inputs.HiddenAuthor {
		t.Fatalf("features of f0's first impression %+v: want online features, or the test compares nothing", r.Inputs)
	}
	impressions := func() float64 {
		return testutil.ToFloat64(w.w.em.events.WithLabelValues(engagement.ArmDefault, pinlater.ActionImpression))
	}
	for run := range 2 {
		if err := w.runImpressions(t, pages...); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if diff := cmp.Diff(want, logRows(t, store)); diff != "" {
			t.Errorf("run %d: impression log (-want +got):\n%s", run, diff)
		}
		if got := impressions(); got != 4 {
			t.Errorf("run %d: %v impressions recorded, want 4 (once each)", run, got)
		}
		if got := testutil.ToFloat64(w.w.em.skipped); got != 1 {
			t.Errorf("run %d: %v events skipped, want the unknown pin's, once", run, got)
		}
		if got := testutil.ToFloat64(w.w.em.pagesSkipped); got != float64(2*(run+1)) {
			t.Errorf("run %d: %v pages skipped, want the 2 invalid ones per run", run, got)
		}
	}
}

// TestHandleImpressionsRetry: a page that fails for a transient reason fails the task after the
// pages before it were applied; the retry applies the rest, each page once.
func TestHandleImpressionsRetry(t *testing.T) {
	w, store, ft := impressionsWorld(t)
	f0, f1 := w.followers[0], w.followers[1]
	pages := []pinlater.EngagementPayload{
		w.servedPage(f0, "feed:a", "", w.pins[0]),
		w.servedPage(f1, "feed:b", "", w.pins[1], w.pins[2]),
	}
	ft.fail.Store(uint64(f1))
	err := w.runImpressions(t, pages...)
	if !errors.Is(err, errTableDown) || errors.Is(err, pinlater.ErrInvalidPayload) {
		t.Fatalf("with f1's rows failing: %v, want the table's error, to retry", err)
	}
	if got := len(logRows(t, store)); got != 1 {
		t.Errorf("after the failed run: %d log rows, want f0's page's 1", got)
	}
	ft.fail.Store(0)
	if err := w.runImpressions(t, pages...); err != nil {
		t.Fatal(err)
	}
	got := logRows(t, store)
	for _, pg := range pages {
		if done, err := store.Applied(t.Context(), zen.ID(pg.User), pg.RequestID); err != nil || !done {
			t.Errorf("page %s: applied %v, %v", pg.RequestID, done, err)
		}
		for _, e := range pg.Events {
			if _, ok := got[[2]uint64{pg.User, e.Pin}]; !ok {
				t.Errorf("page %s: no log row of pin %d", pg.RequestID, e.Pin)
			}
		}
	}
	if n := testutil.ToFloat64(w.w.em.events.WithLabelValues(engagement.ArmDefault, pinlater.ActionImpression)); n != 3 || len(got) != 3 {
		t.Errorf("%v impressions recorded, %d log rows: want 3 of each", n, len(got))
	}
}

// writeProfile writes user's engagement profile row (engagement.Table's user|'p', JSON).
func writeProfile(t *testing.T, et zen.Table, user zen.ID, p engagement.Profile) {
	t.Helper()
	v, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	k := append(binary.BigEndian.AppendUint64(nil, uint64(user)), 'p')
	if err := et.Apply(t.Context(), []zen.Mutation{{Key: k, Value: v}}); err != nil {
		t.Fatal(err)
	}
}

// TestImpressionsTakeALane: with background lanes (a process that serves pages too), each page
// of an impressions task is recorded in a lane: while other background work holds the only
// lane, nothing is recorded; once it is given back, every page is.
func TestImpressionsTakeALane(t *testing.T) {
	w, store, _ := impressionsWorld(t)
	lanes := quiet.NewLanes(1)
	w.w.lanes = lanes
	if err := lanes.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.runImpressions(t, w.servedPage(w.followers[0], "feed:a", "", w.pins[0]),
			w.servedPage(w.followers[1], "feed:b", "", w.pins[1]))
	}()
	select {
	case err := <-done:
		t.Fatalf("the task ended (%v) while the only lane was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	if rows := logRows(t, store); len(rows) != 0 {
		t.Errorf("%d impressions recorded while the only lane was held, want 0", len(rows))
	}
	lanes.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rows := logRows(t, store); len(rows) != 2 {
		t.Errorf("%d impressions recorded once the lane was free, want 2", len(rows))
	}
	if got := lanes.InUse(); got != 0 {
		t.Errorf("%d lanes held after the task, want 0", got)
	}
}
