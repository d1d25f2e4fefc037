package zen_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// TestSourceNames: one spelling of each source, read back by ParseSource; anything else is
// refused, and an unknown number still prints.
func TestSourceNames(t *testing.T) {
	type row struct {
		Name string
		Src  zen.Source
		OK   bool
	}
	var got []row
	for _, name := range []string{"following", "interest", "related", "Following", "source 4", ""} {
		s, err := zen.ParseSource(name)
		got = append(got, row{name, s, err == nil})
	}
	want := []row{
		{"following", zen.SourceFollowing, true},
		{"interest", zen.SourceInterest, true},
		{"related", zen.SourceRelated, true},
		{"Following", 0, false},
		{"source 4", 0, false},
		{"", 0, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSource (-want +got):\n%s", diff)
	}
	for _, s := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
		if back, err := zen.ParseSource(s.String()); err != nil || back != s {
			t.Errorf("ParseSource(%q) = %v, %v", s.String(), back, err)
		}
	}
	if got := zen.Source(9).String(); got != "source 9" {
		t.Errorf("Source(9).String() = %q", got)
	}
}
