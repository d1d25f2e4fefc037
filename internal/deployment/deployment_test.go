package deployment

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestIDCreatedOnce: the first call creates the ID, every later one reads the same.
func TestIDCreatedOnce(t *testing.T) {
	meta, err := zenmem.New().Table(t.Context(), MetaTable)
	if err != nil {
		t.Fatal(err)
	}
	first, err := ID(t.Context(), meta)
	if err != nil || !strings.HasPrefix(first, "dep-") {
		t.Fatalf("ID = %q, %v; want dep-…", first, err)
	}
	again, err := ID(t.Context(), meta)
	if err != nil || again != first {
		t.Errorf("second ID = %q, %v; want %q", again, err, first)
	}
}

type claimer struct{ err error }

func (c claimer) ClaimNamespace(context.Context, string, bool) (string, error) { return "", c.err }

// TestClaimTry: an owned namespace is an error naming the way out; an unreachable Redis leaves
// the claim pending.
func TestClaimTry(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantPending bool
		wantErr     string
	}{
		{"claimed", nil, false, ""},
		{"owned", pinlater.ErrNamespaceOwned, false, "--redis-namespace-takeover"},
		{"unreachable", errors.New("dial tcp: refused"), true, ""},
	}
	for _, tc := range tests {
		pending, err := Claim{Admin: claimer{tc.err}, Deployment: "dep-1"}.Try(t.Context())
		if pending != tc.wantPending || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Try = %v, %v; want pending %v, error containing %q", tc.name, pending, err, tc.wantPending, tc.wantErr)
		}
	}
}
