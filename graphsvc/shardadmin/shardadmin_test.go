package shardadmin

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestShardAdminLockWaitsForRecovery checks the one-move-at-a-time lock: a move asked for while
// the startup recovery runs waits for it (CI once saw a dry run refused as "another shard move"
// because it came in while the recovery held the lock), a move asked for while another move runs
// is refused, and a wait that outlives its context says the recovery is still running.
func TestShardAdminLockWaitsForRecovery(t *testing.T) {
	t.Run("recovery", func(t *testing.T) {
		var s Server
		s.recovering.Store(true)
		s.mu.Lock()
		got := make(chan error, 1)
		go func() { got <- s.lock(t.Context()) }()
		select {
		case err := <-got:
			t.Fatalf("lock returned %v while the recovery held it", err)
		case <-time.After(100 * time.Millisecond):
		}
		s.recovering.Store(false)
		s.mu.Unlock()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("lock after the recovery: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("lock still waiting after the recovery ended")
		}
		if s.mu.TryLock() {
			t.Fatal("lock returned nil without holding the mutex")
		}
	})
	t.Run("move", func(t *testing.T) {
		var s Server
		s.mu.Lock()
		if err := s.lock(t.Context()); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("lock while a move runs: %v, want FailedPrecondition", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		var s Server
		s.recovering.Store(true)
		s.mu.Lock()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := s.lock(ctx); status.Code(err) != codes.Unavailable {
			t.Fatalf("lock past its deadline during recovery: %v, want Unavailable", err)
		}
	})
}
