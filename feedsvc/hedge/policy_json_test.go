package hedge

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPolicyJSON: the written form round-trips, names durations as strings, and a partial
// document changes only what it names.
func TestPolicyJSON(t *testing.T) {
	p := DefaultPolicy()
	p.Mode, p.Delay, p.BreakerOpenFor = ModeFixed, 25*time.Millisecond, 3*time.Second
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mode":"fixed"`, `"delay":"25ms"`, `"breaker_open_for":"3s"`, `"budget_burst":10`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name    string
		doc     string
		change  func(*Policy)
		wantErr string
	}{
		{"empty", `{}`, func(*Policy) {}, ""},
		{"two knobs", `{"budget": 0.05, "max": "250ms"}`, func(p *Policy) { p.Budget, p.Max = 0.05, 250*time.Millisecond }, ""},
		{"breaker", `{"breaker_failures": 0}`, func(p *Policy) { p.BreakerFailures = 0 }, ""},
		{"number as duration", `{"max": 10}`, nil, "duration"},
		{"bad duration", `{"min": "fast"}`, nil, "fast"},
		{"unknown key", `{"cutoff": "5ms"}`, nil, "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := DefaultPolicy()
			err := json.Unmarshal([]byte(tt.doc), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultPolicy()
			tt.change(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
