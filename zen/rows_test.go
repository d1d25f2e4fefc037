package zen_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// plainTable hides every optional extension of the table it wraps.
type plainTable struct{ zen.Table }

// shortBatcher answers CheckAndSetMany with one result too few.
type shortBatcher struct{ zen.Table }

func (s shortBatcher) CheckAndSetMany(_ context.Context, conds []zen.Cond) ([]bool, error) {
	return make([]bool, len(conds)-1), nil
}

// TestCheckAndSetMany: without a CondBatcher, conditions run in order, each against what the
// earlier ones left (the CondBatcher contract); a batcher's wrong result count is an error.
func TestCheckAndSetMany(t *testing.T) {
	tb, err := zenmem.New().Table(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	k := []byte("k")
	conds := []zen.Cond{
		{Key: k, Expected: nil, Value: []byte("a")},         // absent: writes a
		{Key: k, Expected: []byte("a"), Value: []byte("b")}, // sees a: writes b
		{Key: k, Expected: []byte("a"), Value: []byte("c")}, // sees b: does not write
		{Key: []byte("other"), Expected: []byte("x"), Value: []byte("y")},
	}
	got, err := zen.CheckAndSetMany(t.Context(), plainTable{tb}, conds)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true, false, false}, got); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if v, err := tb.Get(t.Context(), k); err != nil || string(v) != "b" {
		t.Errorf("Get(k) = %q, %v; want b", v, err)
	}
	if got, err := zen.CheckAndSetMany(t.Context(), plainTable{tb}, nil); got != nil || err != nil {
		t.Errorf("no conditions: %v, %v; want nil, nil", got, err)
	}
	if _, err := zen.CheckAndSetMany(t.Context(), shortBatcher{tb}, conds); err == nil || !strings.Contains(err.Error(), "3 results for 4 conditions") {
		t.Errorf("short batcher: err = %v; want one naming 3 results for 4 conditions", err)
	}
}
