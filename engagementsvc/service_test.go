package engagementsvc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	engagementv1 "github.com/smartfeed/smartfeed/proto/engagement/v1"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

type fakeQueue struct {
	tasks []*pinlater.Task
	err   error
	seen  map[string]bool
	order *[]string
}

func (q *fakeQueue) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	if q.err != nil {
		return nil, q.err
	}
	*q.order = append(*q.order, "enqueue")
	dup := q.seen[t.ID()]
	q.seen[t.ID()] = true
	if !dup {
		q.tasks = append(q.tasks, t)
	}
	return &pinlater.Info{ID: t.ID(), Duplicate: dup}, nil
}

type fakeHides struct {
	got   []string
	order *[]string
}

func (h *fakeHides) Hide(_ context.Context, user, pin, author zen.ID) error {
	*h.order = append(*h.order, "hide")
	h.got = append(h.got, user.String()+"/"+pin.String()+"/"+author.String())
	return nil
}

type fakeAuthors map[zen.ID]zen.ID

func (a fakeAuthors) Author(_ context.Context, pin zen.ID) (zen.ID, error) { return a[pin], nil }

func id(t zen.Type, local uint64) zen.ID {
	v, err := zen.NewID(2, t, local)
	if err != nil {
		panic(err)
	}
	return v
}

var (
	bob    = id(zen.TypeUser, 1)
	ann    = id(zen.TypeUser, 2)
	pin1   = id(zen.TypePin, 3)
	pin2   = id(zen.TypePin, 4)
	nowFix = time.UnixMilli(1_700_000_000_000)
)

func newService(t *testing.T) (*Service, *fakeQueue, *fakeHides) {
	t.Helper()
	var order []string
	q := &fakeQueue{seen: map[string]bool{}, order: &order}
	h := &fakeHides{order: &order}
	s, err := New(q, Options{Hides: h, Authors: fakeAuthors{pin2: ann}, Experiment: engagement.Experiment{Salt: "s", LearnedPercent: 100},
		Now: func() time.Time { return nowFix }})
	if err != nil {
		t.Fatal(err)
	}
	return s, q, h
}

// TestReport: a batch becomes one engagement task tagged with the user's arm, hides are written
// before it is enqueued, and a retry with the same request ID is a duplicate.
func TestReport(t *testing.T) {
	s, q, h := newService(t)
	req := &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r1", Events: []*engagementv1.Event{
		{Action: engagementv1.Action_ACTION_IMPRESSION, PinId: uint64(pin1), Position: 2, Fresh: true, Source: feedv1.Source_SOURCE_INTEREST, AtMs: 5},
		{Action: engagementv1.Action_ACTION_HIDE, PinIdStr: pin2.String()},
	}}
	r, err := s.Report(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&engagementv1.ReportResponse{Accepted: 2, Arm: engagement.ArmLearned}, r, cmpProto); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
	if len(q.tasks) != 1 {
		t.Fatalf("%d tasks enqueued, want 1", len(q.tasks))
	}
	var p pinlater.EngagementPayload
	if err := json.Unmarshal(q.tasks[0].Payload(), &p); err != nil {
		t.Fatal(err)
	}
	want := pinlater.EngagementPayload{V: 1, User: uint64(bob), RequestID: "r1", Arm: engagement.ArmLearned, Events: []pinlater.EngagementEvent{
		{Action: "impression", Pin: uint64(pin1), Position: 2, Fresh: true, Source: "interest", AtMs: 5},
		{Action: "hide", Pin: uint64(pin2), Source: "following", AtMs: nowFix.UnixMilli()},
	}}
	if d := cmp.Diff(want, p); d != "" {
		t.Errorf("payload (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{bob.String() + "/" + pin2.String() + "/" + ann.String()}, h.got); d != "" {
		t.Errorf("hides (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"hide", "enqueue"}, *h.order); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
	if r, err := s.Report(t.Context(), req); err != nil || !r.GetDuplicate() {
		t.Errorf("retry: %v, %v; want a duplicate", r, err)
	}
}

var cmpProto = cmp.Comparer(func(a, b *engagementv1.ReportResponse) bool {
	return a.GetAccepted() == b.GetAccepted() && a.GetDuplicate() == b.GetDuplicate() && a.GetArm() == b.GetArm()
})

// TestReportRefused: bad batches are InvalidArgument with nothing hidden or enqueued, and the
// message quotes no unbounded input; a queue failure is Unavailable.
func TestReportRefused(t *testing.T) {
	ev := func(a engagementv1.Action, pin uint64) *engagementv1.Event {
		return &engagementv1.Event{Action: a, PinId: pin}
	}
	ok := []*engagementv1.Event{ev(engagementv1.Action_ACTION_HIDE, uint64(pin1))}
	many := make([]*engagementv1.Event, pinlater.MaxEngagementEvents+1)
	for i := range many {
		many[i] = ev(engagementv1.Action_ACTION_IMPRESSION, uint64(pin1))
	}
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		name string
		req  *engagementv1.ReportRequest
		want string
	}{
		{"no user", &engagementv1.ReportRequest{RequestId: "r", Events: ok}, "user_id"},
		{"a pin as user", &engagementv1.ReportRequest{UserId: uint64(pin1), RequestId: "r", Events: ok}, "user_id"},
		{"no request id", &engagementv1.ReportRequest{UserId: uint64(bob), Events: ok}, "request_id"},
		{"long request id", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: long, Events: ok}, "request_id"},
		{"no events", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r"}, "0 events"},
		{"too many events", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: many}, "501 events: want 1 to 500"},
		{"unknown action", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: []*engagementv1.Event{ev(0, uint64(pin1))}}, "unknown action"},
		{"a user as pin", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: []*engagementv1.Event{ev(engagementv1.Action_ACTION_CLICK, uint64(bob))}}, "events[0].pin_id"},
		{"bad pin string", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: []*engagementv1.Event{{Action: engagementv1.Action_ACTION_CLICK, PinIdStr: long}}}, "events[0].pin_id"},
		{"far future", &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: []*engagementv1.Event{{Action: engagementv1.Action_ACTION_CLICK, PinId: uint64(pin1), AtMs: nowFix.Add(48 * time.Hour).UnixMilli()}}}, "at_ms"},
	} {
		s, q, h := newService(t)
		_, err := s.Report(t.Context(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument mentioning %q", tc.name, err, tc.want)
		}
		if err != nil && len(err.Error()) > 600 {
			t.Errorf("%s: the error quotes %d bytes", tc.name, len(err.Error()))
		}
		if len(q.tasks) != 0 || len(h.got) != 0 {
			t.Errorf("%s: refused, yet %d tasks and %d hides were written", tc.name, len(q.tasks), len(h.got))
		}
	}
	s, q, _ := newService(t)
	q.err = errors.New("redis down and the outbox unwritable")
	if _, err := s.Report(t.Context(), &engagementv1.ReportRequest{UserId: uint64(bob), RequestId: "r", Events: ok}); status.Code(err) != codes.Unavailable {
		t.Errorf("queue failure: %v, want Unavailable", err)
	}
}
