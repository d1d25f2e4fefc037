package main

import (
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/pinlater"
)

// TestNamespaceOwned: a second deployment (another store) configured with the namespace of a
// running one refuses to start, naming the owner; the owner restarts on its own store freely;
// --redis-namespace-takeover claims it for the newcomer.
func TestNamespaceOwned(t *testing.T) {
	first := testConfig(t)
	a, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	owner := a.deployment
	a.closeAll()
	if owner == "" {
		t.Fatal("no deployment ID")
	}
	again, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatalf("the owner's restart: %v", err)
	}
	if again.deployment != owner {
		t.Errorf("deployment ID changed across restarts: %s, then %s", owner, again.deployment)
	}
	again.closeAll()

	second := first
	second.Storage.DataDir = t.TempDir()
	if _, err := newApp(t.Context(), roleAll, second, zap.NewNop(), newRegistry()); !errors.Is(err, pinlater.ErrNamespaceOwned) {
		t.Fatalf("a second deployment on the same namespace: %v, want ErrNamespaceOwned", err)
	}
	second.Redis.NamespaceTakeover = true
	b, err := newApp(t.Context(), roleAll, second, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	b.closeAll()
	if _, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry()); !errors.Is(err, pinlater.ErrNamespaceOwned) {
		t.Errorf("the old owner after the takeover: %v, want ErrNamespaceOwned", err)
	}
}
