package pinlater

import (
	"context"
	"errors"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// impressionPage is a valid page of n impressions of user under request ID rid.
func impressionPage(user uint64, rid string, n int) EngagementPayload {
	p := EngagementPayload{V: PayloadVersion, User: user, RequestID: rid, Arm: "default"}
	for i := range n {
		p.Events = append(p.Events, EngagementEvent{Action: ActionImpression, Pin: uint64(100 + i), Position: i, AtMs: 1})
	}
	return p
}

func TestImpressionsValidate(t *testing.T) {
	pages := func(n, events int) []EngagementPayload {
		out := make([]EngagementPayload, n)
		for i := range out {
			out[i] = impressionPage(uint64(i+1), "r", events)
		}
		return out
	}
	click := impressionPage(1, "r", 2)
	click.Events[1].Action = ActionClick
	noRequest := impressionPage(1, "", 1)
	tests := []struct {
		name    string
		p       ImpressionsPayload
		wantErr string // "" = valid
	}{
		{"one page", ImpressionsPayload{V: 1, Pages: pages(1, 1)}, ""},
		{"max pages", ImpressionsPayload{V: 1, Pages: pages(MaxImpressionPages, 1)}, ""},
		{"max events", ImpressionsPayload{V: 1, Pages: pages(MaxImpressionEvents/MaxEngagementEvents, MaxEngagementEvents)}, ""},
		{"version 0", ImpressionsPayload{Pages: pages(1, 1)}, "unknown version 0"},
		{"no pages", ImpressionsPayload{V: 1}, "0 pages"},
		{"too many pages", ImpressionsPayload{V: 1, Pages: pages(MaxImpressionPages+1, 1)}, "65 pages"},
		{"too many events", ImpressionsPayload{V: 1, Pages: append(pages(MaxImpressionEvents/MaxEngagementEvents, MaxEngagementEvents), impressionPage(9, "r", 1))}, "2001 events in all"},
		{"not an impression", ImpressionsPayload{V: 1, Pages: append(pages(1, 1), click)}, `pages[1].events[1]: action "click"`},
		{"invalid page", ImpressionsPayload{V: 1, Pages: append(pages(2, 1), noRequest)}, "pages[2]: invalid payload: engagement: request_id is 0 bytes"},
		{"page version 0", ImpressionsPayload{V: 1, Pages: []EngagementPayload{{User: 1, RequestID: "r", Events: click.Events[:1]}}}, "pages[0]: invalid payload: engagement: unknown version 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkValidate(t, tc.p, tc.wantErr) })
	}
}

// TestImpressionsDedupID: the task ID is derived from the pages' users and request IDs in
// order, and from nothing else.
func TestImpressionsDedupID(t *testing.T) {
	a, b := impressionPage(1, "feed:a", 2), impressionPage(2, "feed:b", 3)
	id := func(pages ...EngagementPayload) string {
		t.Helper()
		task, err := NewImpressions(ImpressionsPayload{Pages: pages})
		if err != nil {
			t.Fatal(err)
		}
		return task.ID()
	}
	ab := id(a, b)
	if !regexp.MustCompile(`^impressions:[0-9a-f]{32}$`).MatchString(ab) {
		t.Fatalf("ID %q, want impressions: and 32 hex digits", ab)
	}
	other := b
	other.Events = other.Events[:1]
	other.Arm = "learned"
	otherUser, otherRequest := b, b
	otherUser.User = 3
	otherRequest.RequestID = "feed:c"
	tests := []struct {
		name  string
		pages []EngagementPayload
		same  bool
	}{
		{"same pages", []EngagementPayload{a, b}, true},
		{"other events and arm", []EngagementPayload{a, other}, true},
		{"reversed", []EngagementPayload{b, a}, false},
		{"one page fewer", []EngagementPayload{a}, false},
		{"other user", []EngagementPayload{a, otherUser}, false},
		{"other request ID", []EngagementPayload{a, otherRequest}, false},
	}
	for _, tc := range tests {
		if got := id(tc.pages...); (got == ab) != tc.same {
			t.Errorf("%s: ID %s, pages a, b: %s (want same: %v)", tc.name, got, ab, tc.same)
		}
	}
	// The request ID's length is hashed: moving a byte between user and request ID, or between
	// pages, changes the ID.
	if id(impressionPage(1, "ab", 1), impressionPage(1, "c", 1)) == id(impressionPage(1, "a", 1), impressionPage(1, "bc", 1)) {
		t.Error("pages (ab, c) and (a, bc) share an ID")
	}
}

// TestImpressionsRoundTrip: NewImpressions fills in the versions, uses the engagement task's
// policy, and a handler decodes what it built.
func TestImpressionsRoundTrip(t *testing.T) {
	in := ImpressionsPayload{Pages: []EngagementPayload{impressionPage(1, "feed:a", 2), impressionPage(2, "feed:b", 1)}}
	in.Pages[0].V, in.Pages[1].V = 0, 0
	in.Pages[1].Events[0].Fresh, in.Pages[1].Events[0].Source = true, "interest"
	task, err := NewImpressions(in)
	if err != nil {
		t.Fatal(err)
	}
	if in.Pages[0].V != 0 {
		t.Error("NewImpressions changed the caller's pages")
	}
	eng, _ := DefaultPolicy(TypeEngagement)
	if task.Type() != TypeImpressions || task.Policy() != eng {
		t.Errorf("task type %s policy %+v, want impressions with the engagement policy %+v", task.Type(), task.Policy(), eng)
	}
	var got ImpressionsPayload
	h := Typed(func(_ context.Context, p ImpressionsPayload) error { got = p; return nil })
	if err := h.ProcessTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	want := in
	want.V = PayloadVersion
	want.Pages = []EngagementPayload{in.Pages[0], in.Pages[1]}
	want.Pages[0].V, want.Pages[1].V = PayloadVersion, PayloadVersion
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if _, err := Decode[EngagementPayload](task); !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("decode as engagement: %v, want ErrInvalidPayload", err)
	}
	if _, err := NewImpressions(ImpressionsPayload{}); !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("NewImpressions(no pages) = %v, want ErrInvalidPayload", err)
	}
}
