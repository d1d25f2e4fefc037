package engagementsvc

import (
	"context"
	"encoding/json"
	"errors"
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

// TestImpressionLogEnqueuesPage: a served page becomes one engagement task of impressions with
// the page's positions, fresh status, source and the user's arm, under an ID derived from the
// user, cursor and pins; a page of more than MaxEngagementEvents is split.
func TestImpressionLogEnqueuesPage(t *testing.T) {
	var mu sync.Mutex
	var got []pinlater.EngagementPayload
	done := make(chan struct{}, 8)
	q := funcQueue(func(_ context.Context, task *pinlater.Task) (*pinlater.Info, error) {
		var p pinlater.EngagementPayload
		if err := json.Unmarshal(task.Payload(), &p); err != nil {
			return nil, err
		}
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		done <- struct{}{}
		return &pinlater.Info{ID: task.ID()}, nil
	})
	reg := prometheus.NewRegistry()
	now := time.UnixMilli(1_700_000_000_000)
	l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Registerer: reg, Now: func() time.Time { return now },
		Experiment: engagement.Experiment{LearnedPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	user := id(zen.TypeUser, 7)
	items := page(3)
	l.Log(user, "", items)
	<-done
	rid := PageRequestID(user, "", items)
	want := []pinlater.EngagementPayload{{V: pinlater.PayloadVersion, User: uint64(user), RequestID: rid, Arm: engagement.ArmLearned}}
	for i, it := range items {
		want[0].Events = append(want[0].Events, pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(it.Pin),
			Position: i, Fresh: i == 0, Source: "interest", AtMs: now.UnixMilli()})
	}
	mu.Lock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("payloads (-want +got):\n%s", diff)
	}
	mu.Unlock()
	if rid != PageRequestID(user, "", page(3)) || rid == PageRequestID(user, "c", items) || rid == PageRequestID(user, "", items[:2]) {
		t.Errorf("request ID %s: not derived from the user, cursor and pins alone", rid)
	}
	big := page(pinlater.MaxEngagementEvents + 1)
	l.Log(user, "x", big)
	<-done
	<-done
	mu.Lock()
	if len(got) != 3 || len(got[1].Events)+len(got[2].Events) != len(big) || got[1].RequestID == got[2].RequestID {
		t.Errorf("a page of %d: %d tasks", len(big), len(got)-1)
	}
	mu.Unlock()
	// The sender counts a task after its enqueue returns, just after the fake queue signalled it.
	logged := func() float64 { return testutil.ToFloat64(l.logged.WithLabelValues(engagement.ArmLearned)) }
	testenv.WaitFor(t, testenv.WaitTimeout, "every impression of both pages counted", func() bool {
		return logged() >= float64(3+len(big))
	})
	if v := logged(); v != float64(3+len(big)) {
		t.Errorf("logged %v impressions, want %d", v, 3+len(big))
	}
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
		l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Registerer: prometheus.NewRegistry()})
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
		l, err := NewImpressionLog(q, ImpressionOptions{Senders: 1, Queue: 2, Registerer: prometheus.NewRegistry(), Drain: time.Millisecond})
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
