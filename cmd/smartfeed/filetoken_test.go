package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFileTokenRereadsAtMostOncePerSecond: a rewritten token file is picked up within
// tokenRecheck, calls in between use the token in hand (no system call), and a missing file is
// an error, not an empty token.
func TestFileTokenRereadsAtMostOncePerSecond(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(tok string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fileToken{path: path, now: func() time.Time { return now }}
	get := func() string {
		t.Helper()
		md, err := f.GetRequestMetadata(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return md["authorization"]
	}
	write("one", now)
	if got := get(); got != "Bearer one" {
		t.Fatalf("first call sends %q, want Bearer one", got)
	}
	write("two", now.Add(time.Minute))
	now = now.Add(tokenRecheck / 2)
	if got := get(); got != "Bearer one" {
		t.Errorf("within the recheck interval: %q, want the token in hand (Bearer one)", got)
	}
	now = now.Add(tokenRecheck)
	if got := get(); got != "Bearer two" {
		t.Errorf("after the recheck interval: %q, want the rewritten token (Bearer two)", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tokenRecheck)
	if _, err := f.GetRequestMetadata(context.Background()); err == nil {
		t.Error("a removed token file gave no error")
	}
}
