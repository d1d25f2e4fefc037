package engagementsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// funcQueue is an Enqueuer that calls fn.
type funcQueue func(ctx context.Context, t *pinlater.Task) (*pinlater.Info, error)

func (f funcQueue) Enqueue(ctx context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	return f(ctx, t)
}

func page(n int) []Impression {
	out := make([]Impression, n)
	for i := range out {
		out[i] = Impression{Pin: id(zen.TypePin, uint64(100+i)), Position: i, Fresh: i == 0, Source: zen.SourceInterest}
	}
	return out
}

// recorder is an Enqueuer that keeps the impressions tasks it is given, in order, and signals
// each on done; it holds the first until release is closed (nil: holds none).
type recorder struct {
	mu      sync.Mutex
	tasks   []pinlater.ImpressionsPayload
	ids     []string
	done    chan struct{}
	started chan struct{}
	release chan struct{}
}

func newRecorder(hold bool) *recorder {
	r := &recorder{done: make(chan struct{}, 1024), started: make(chan struct{}, 1)}
	if hold {
		r.release = make(chan struct{})
	}
	return r
}

func (r *recorder) Enqueue(ctx context.Context, task *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	if task.Type() != pinlater.TypeImpressions {
		return nil, fmt.Errorf("task type %s, want %s", task.Type(), pinlater.TypeImpressions)
	}
	p, err := pinlater.Decode[pinlater.ImpressionsPayload](task)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	first := len(r.tasks) == 0
	r.tasks, r.ids = append(r.tasks, p), append(r.ids, task.ID())
	r.mu.Unlock()
	if first && r.release != nil {
		r.started <- struct{}{}
		select {
		case <-r.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.done <- struct{}{}
	return &pinlater.Info{ID: task.ID()}, nil
}

func (r *recorder) got() []pinlater.ImpressionsPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tasks)
}

// servedBatch is the engagement batch of a page of at most MaxEngagementEvents items served to
// user with cursor at now, the user being in arm.
func servedBatch(user zen.ID, cursor string, items []Impression, now time.Time, arm string) pinlater.EngagementPayload {
	p := pinlater.EngagementPayload{V: pinlater.PayloadVersion, User: uint64(user), RequestID: PageRequestID(user, cursor, items), Arm: arm}
	for _, it := range items {
		p.Events = append(p.Events, pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(it.Pin),
			Position: it.Position, Fresh: it.Fresh, Source: sourceName(it.Source), AtMs: now.UnixMilli()})
	}
	return p
}

// TestImpressionLogEnqueuesPage: a page served to an idle log becomes one impressions task of
// that page alone, at once: its impressions with the page's positions, fresh status, source and
// the user's arm, under a request ID derived from the user, cursor and pins; a page of more than
// MaxEngagementEvents is split into several batches, and one of more than MaxImpressionEvents
// into several tasks.
func TestImpressionLogEnqueuesPage(t *testing.T) {
	q := newRecorder(false)
	reg := prometheus.NewRegistry()
	now := time.UnixMilli(1_700_000_000_000)
	l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: -1, Registerer: reg, Now: func() time.Time { return now },
		Experiment: engagement.Experiment{LearnedPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	user := id(zen.TypeUser, 7)
	items := page(3)
	l.Log(user, "", items)
	<-q.done
	rid := PageRequestID(user, "", items)
	wantPage := pinlater.EngagementPayload{V: pinlater.PayloadVersion, User: uint64(user), RequestID: rid, Arm: engagement.ArmLearned}
	for i, it := range items {
		wantPage.Events = append(wantPage.Events, pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(it.Pin),
			Position: i, Fresh: i == 0, Source: "interest", AtMs: now.UnixMilli()})
	}
	if diff := cmp.Diff(wantPage, servedBatch(user, "", items, now, engagement.ArmLearned)); diff != "" {
		t.Fatalf("servedBatch (-want +got):\n%s", diff)
	}
	want := []pinlater.ImpressionsPayload{{V: pinlater.PayloadVersion, Pages: []pinlater.EngagementPayload{wantPage}}}
	if diff := cmp.Diff(want, q.got()); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	if rid != PageRequestID(user, "", page(3)) || rid == PageRequestID(user, "c", items) || rid == PageRequestID(user, "", items[:2]) {
		t.Errorf("request ID %s: not derived from the user, cursor and pins alone", rid)
	}
	big := page(pinlater.MaxEngagementEvents + 1)
	l.Log(user, "x", big)
	<-q.done
	huge := page(pinlater.MaxImpressionEvents + 1)
	l.Log(user, "y", huge)
	<-q.done
	<-q.done
	got := q.got()
	type shape struct {
		Events     []int
		RequestIDs []string
	}
	shapes := make([]shape, len(got))
	for i, task := range got {
		for _, p := range task.Pages {
			shapes[i].Events = append(shapes[i].Events, len(p.Events))
			shapes[i].RequestIDs = append(shapes[i].RequestIDs, p.RequestID)
		}
	}
	bigID, hugeID := PageRequestID(user, "x", big), PageRequestID(user, "y", huge)
	const m = pinlater.MaxEngagementEvents
	wantShapes := []shape{{[]int{3}, []string{rid}},
		{[]int{m, 1}, []string{bigID, bigID + ":1"}},
		{[]int{m, m, m, m}, []string{hugeID, hugeID + ":1", hugeID + ":2", hugeID + ":3"}},
		{[]int{1}, []string{hugeID + ":4"}}}
	if diff := cmp.Diff(wantShapes, shapes); diff != "" {
		t.Errorf("tasks: events and request ID of each page (-want +got):\n%s", diff)
	}
	// The sender counts a task after its enqueue returns, just after the fake queue signalled it.
	total := float64(len(items) + len(big) + len(huge))
	logged := func() float64 { return testutil.ToFloat64(l.logged.WithLabelValues(engagement.ArmLearned)) }
	testenv.WaitFor(t, testenv.WaitTimeout, "every impression of the pages counted", func() bool { return logged() >= total })
	if v := logged(); v != total {
		t.Errorf("logged %v impressions, want %v", v, total)
	}
}

// TestImpressionLogBatches: pages that queue up while a sender is busy go out together, as few
// tasks as the bounds allow (MaxImpressionPages pages, MaxImpressionEvents impressions), each
// page once, whole, under its own request ID; the same page queued twice is sent once and
// counted as a duplicate.
func TestImpressionLogBatches(t *testing.T) {
	tests := []struct {
		name      string
		pages     int // logged while the sender is busy, each of pins pins (a different cursor)
		pins      int
		repeat    int // how many of them are the first page again
		wantPages []int
	}{
		{"one page", 1, 3, 0, []int{1, 1}},
		{"many small pages", 100, 3, 0, []int{1, 64, 36}},
		{"bounded by the impressions", 60, 40, 0, []int{1, 50, 10}},
		{"a page queued twice", 5, 3, 2, []int{1, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newRecorder(true)
			reg := prometheus.NewRegistry()
			now := time.UnixMilli(1_700_000_000_000)
			l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: -1, Registerer: reg, Drain: time.Minute,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]pinlater.EngagementPayload{} // by request ID
			log := func(user zen.ID, cursor string, items []Impression) {
				l.Log(user, cursor, items)
				p := servedBatch(user, cursor, items, now, engagement.ArmDefault)
				want[p.RequestID] = p
			}
			log(id(zen.TypeUser, 1), "", page(2)) // taken by the sender, which waits for release
			<-q.started
			for i := range tc.pages {
				user, cursor := id(zen.TypeUser, uint64(10+i%7)), "c"+strconv.Itoa(i)
				if i < tc.repeat {
					user, cursor = id(zen.TypeUser, 10), "c0"
				}
				log(user, cursor, page(tc.pins))
			}
			close(q.release)
			l.Close() // returns once the senders have enqueued every queued page
			got := map[string]pinlater.EngagementPayload{}
			var pages []int
			for _, task := range q.got() {
				pages = append(pages, len(task.Pages))
				for _, p := range task.Pages {
					if _, ok := got[p.RequestID]; ok {
						t.Errorf("page %s sent twice", p.RequestID)
					}
					got[p.RequestID] = p
				}
			}
			if diff := cmp.Diff(tc.wantPages, pages); diff != "" {
				t.Errorf("pages per task (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pages sent (-logged +sent):\n%s", diff)
			}
			impressions := 2 + tc.pages*tc.pins
			dup := tc.repeat * tc.pins
			if tc.repeat > 0 {
				dup = (tc.repeat - 1) * tc.pins // the first of them is the page itself
			}
			if v := testutil.ToFloat64(l.logged.WithLabelValues(engagement.ArmDefault)); v != float64(impressions-dup) {
				t.Errorf("logged %v impressions, want %d", v, impressions-dup)
			}
			if v := testutil.ToFloat64(l.dup); v != float64(dup) {
				t.Errorf("duplicate %v impressions, want %d", v, dup)
			}
			tasks, sent := histogram(t, reg, "smartfeed_impressions_task_pages")
			if tasks != uint64(len(pages)) || sent != float64(len(got)) {
				t.Errorf("pages per task: %d tasks, %v pages observed; want %d, %d", tasks, sent, len(pages), len(got))
			}
		})
	}
}

// histogram is the sample count and sum of the histogram name in reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// TestImpressionLogNeverBlocksOrFails: with the enqueue failing, and then stuck, Log returns at
// once every time; the impressions are counted as dropped, by reason.
func TestImpressionLogNeverBlocksOrFails(t *testing.T) {
	user := id(zen.TypeUser, 7)
	t.Run("failing", func(t *testing.T) {
		tried := make(chan struct{}, 4)
		q := funcQueue(func(context.Context, *pinlater.Task) (*pinlater.Info, error) {
			tried <- struct{}{}
			return nil, errors.New("outbox write failed")
		})
		l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: -1, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(user, "", page(4))
		<-tried
		l.Close()
		if v := testutil.ToFloat64(l.dropped.WithLabelValues(dropEnqueue)); v != 4 {
			t.Errorf("dropped (enqueue_failed) %v, want 4", v)
		}
	})
	t.Run("stuck", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		q := funcQueue(func(ctx context.Context, _ *pinlater.Task) (*pinlater.Info, error) {
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, errors.New("stuck")
		})
		l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: -1, Queue: 2, Registerer: prometheus.NewRegistry(), Drain: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(user, "", page(1)) // taken by the sender, which is stuck
		<-started
		for range 5 { // two fill the queue, three find it full
			l.Log(user, "", page(1))
		}
		if v := testutil.ToFloat64(l.dropped.WithLabelValues(dropQueueFull)); v != 3 {
			t.Errorf("dropped (queue_full) %v, want 3", v)
		}
		close(release)
		l.Close()
		l.Log(user, "", page(1))
		if v := testutil.ToFloat64(l.dropped.WithLabelValues(dropClosed)); v < 1 {
			t.Errorf("dropped (closed) %v, want the page logged after Close at least", v)
		}
	})
}

// BenchmarkImpressionLogLog is what a page of 25 pins costs GetFeed: Log's queueing alone
// (the senders enqueue into a queue that answers at once).
func BenchmarkImpressionLogLog(b *testing.B) {
	q := funcQueue(func(_ context.Context, task *pinlater.Task) (*pinlater.Info, error) {
		return &pinlater.Info{ID: task.ID()}, nil
	})
	l, err := NewImpressionLog(q, ImpressionOptions{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	user := id(zen.TypeUser, 7)
	items := page(25)
	b.ReportAllocs()
	for b.Loop() {
		l.Log(user, "", items)
	}
}

// TestImpressionLogLingers: a sender waits up to Linger for more pages after a task's first, so
// pages served one after another share a task; a full task goes at once, and Close sends a
// lingering task without waiting out the linger.
func TestImpressionLogLingers(t *testing.T) {
	q := newRecorder(false)
	l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: time.Hour, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pinlater.MaxImpressionPages + 1 {
		l.Log(id(zen.TypeUser, uint64(i+1)), "", page(2))
	}
	<-q.done // the full task, long before the linger's end
	if got := q.got(); len(got) != 1 || len(got[0].Pages) != pinlater.MaxImpressionPages {
		t.Fatalf("tasks before Close: %d, want one of %d pages", len(got), pinlater.MaxImpressionPages)
	}
	l.Close() // the last page lingers in its own task: sent now
	got := q.got()
	if len(got) != 2 || len(got[1].Pages) != 1 {
		t.Fatalf("tasks after Close: %d, want 2, the second of 1 page", len(got))
	}
	if got[1].Pages[0].User != uint64(id(zen.TypeUser, pinlater.MaxImpressionPages+1)) {
		t.Errorf("lingering task holds user %d, want the last page's", got[1].Pages[0].User)
	}
}

// TestImpressionLogSkipsRepeatedPage: a page that is the user's last logged page again (a
// refresh that found nothing new) is not sent, and is counted as duplicate; the same page after
// another one is sent again (the worker applies it once).
func TestImpressionLogSkipsRepeatedPage(t *testing.T) {
	q := newRecorder(false)
	reg := prometheus.NewRegistry()
	l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Linger: -1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	user := id(zen.TypeUser, 7)
	a, b := page(3), page(4)
	l.Log(user, "", a)
	<-q.done
	l.Log(user, "", a) // skipped: b's task is the next one sent
	l.Log(user, "", b)
	<-q.done
	l.Log(user, "", a)
	<-q.done
	l.Close()
	var got []string
	for _, task := range q.got() {
		for _, pg := range task.Pages {
			got = append(got, pg.RequestID)
		}
	}
	ra, rb := PageRequestID(user, "", a), PageRequestID(user, "", b)
	if diff := cmp.Diff([]string{ra, rb, ra}, got); diff != "" {
		t.Errorf("pages sent (-want +got):\n%s", diff)
	}
	if n := testutil.ToFloat64(l.dup); n != 3 {
		t.Errorf("duplicate impressions %v, want 3 (the repeated page's)", n)
	}
}
