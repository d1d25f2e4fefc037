package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// burstSystem's Pin holds each call until `together` calls are in flight at once, records the
// authors and whether a follower was watched, and fails the authors in fail.
type burstSystem struct {
	System
	together int
	fail     map[uint64]bool

	mu      sync.Mutex
	authors map[uint64]int
	watched int
	gate    chan struct{}
	waiting int
}

func (f *burstSystem) Pin(ctx context.Context, author uint64, watch []uint64) (uint64, error) {
	f.mu.Lock()
	f.authors[author]++
	if len(watch) > 0 {
		f.watched++
	}
	f.waiting++
	if f.waiting == f.together {
		close(f.gate)
	}
	gate := f.gate
	f.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if f.fail[author] {
		return 0, errors.New("unavailable")
	}
	return author, nil
}

func TestBurstPublishesEveryEventAtOnce(t *testing.T) {
	w := &World{M: &Model{}, IDs: make([]uint64, 200)}
	for i := range w.IDs {
		w.IDs[i] = uint64(1000 + i)
	}
	authors := make([]int, 200)
	for i := range authors {
		authors[i] = i
	}
	sys := &burstSystem{together: 64, fail: map[uint64]bool{1003: true, 1100: true},
		authors: map[uint64]int{}, gate: make(chan struct{})}
	// With fewer than 64 publishers in flight, or calls waiting on a pace, the first 64 calls
	// never meet and the context ends them.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := burst(ctx, sys, w, authors)
	if ctx.Err() != nil {
		t.Fatalf("burst did not have 64 events in flight at once: %v", ctx.Err())
	}
	if n != 200 {
		t.Errorf("published %d events, want 200", n)
	}
	if err == nil || err.Error() != "2 of 200 events failed to publish" {
		t.Errorf("err = %v, want 2 of 200 failed", err)
	}
	if len(sys.authors) != 200 {
		t.Errorf("%d authors published, want 200", len(sys.authors))
	}
	for a, c := range sys.authors {
		if c != 1 {
			t.Errorf("author %d published %d times", a, c)
		}
	}
	if sys.watched != 0 {
		t.Errorf("%d events watched followers: the burst must not poll", sys.watched)
	}
}
