package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// meeting holds each call of arrive until `together` calls have arrived: a burst that does not
// have that many in flight at once never gets past it.
type meeting struct {
	together int

	mu      sync.Mutex
	arrived int
	gate    chan struct{}
}

func (m *meeting) arrive(ctx context.Context) error {
	m.mu.Lock()
	if m.gate == nil {
		m.gate = make(chan struct{})
	}
	m.arrived++
	if m.arrived == m.together {
		close(m.gate)
	}
	gate := m.gate
	m.mu.Unlock()
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// burstSystem's Pin holds each call until `together` calls are in flight at once, records the
// authors and whether a follower was watched, and fails the authors in fail.
type burstSystem struct {
	System
	meeting
	fail map[uint64]bool

	mu      sync.Mutex
	authors map[uint64]int
	watched int
}

func (f *burstSystem) Pin(ctx context.Context, author uint64, watch []uint64) (uint64, error) {
	f.mu.Lock()
	f.authors[author]++
	if len(watch) > 0 {
		f.watched++
	}
	f.mu.Unlock()
	if err := f.arrive(ctx); err != nil {
		return 0, err
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
	sys := &burstSystem{meeting: meeting{together: 64}, fail: map[uint64]bool{1003: true, 1100: true},
		authors: map[uint64]int{}}
	// With fewer than 64 publishers in flight, or calls waiting on a pace, the first 64 calls
	// never meet and the context ends them.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := burst(ctx, sys, w, authors, nil)
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

// prepinSystem makes pins (author+1e6) and records their publishing, holding each publish until
// `together` are in flight at once; Pin fails the test.
type prepinSystem struct {
	System
	meeting
	t        *testing.T
	failMake map[uint64]bool

	mu        sync.Mutex
	made      map[uint64]uint64 // pin → author
	published map[uint64]int
}

func (f *prepinSystem) Pin(context.Context, uint64, []uint64) (uint64, error) {
	f.t.Error("Pin called: the burst's pins were made before it")
	return 0, errors.New("no")
}

func (f *prepinSystem) MakePin(_ context.Context, author uint64) (uint64, error) {
	if f.failMake[author] {
		return 0, errors.New("unavailable")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made[author+1e6] = author
	return author + 1e6, nil
}

func (f *prepinSystem) PublishPin(ctx context.Context, author, pin uint64) error {
	f.mu.Lock()
	if f.made[pin] != author {
		f.mu.Unlock()
		return errors.New("not a pin made for that author")
	}
	f.published[pin]++
	f.mu.Unlock()
	return f.arrive(ctx)
}

// TestBurstPublishesPinsMadeBefore: with a Prepinner, makePins makes one pin per author and the
// burst publishes each made pin's event once, 64 at a time, making none itself; a pin that could
// not be made counts as an event that failed to publish.
func TestBurstPublishesPinsMadeBefore(t *testing.T) {
	w := &World{M: &Model{}, IDs: make([]uint64, 150)}
	for i := range w.IDs {
		w.IDs[i] = uint64(1000 + i)
	}
	authors := make([]int, 150)
	for i := range authors {
		authors[i] = i
	}
	sys := &prepinSystem{t: t, meeting: meeting{together: 64}, failMake: map[uint64]bool{1007: true},
		made: map[uint64]uint64{}, published: map[uint64]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pins, err := makePins(ctx, sys, w, authors)
	if err == nil || err.Error() != "1 of 150 pins failed to make" {
		t.Errorf("makePins err = %v, want 1 of 150 failed", err)
	}
	if len(sys.made) != 149 || pins[7] != 0 || pins[8] != 1e6+1008 {
		t.Fatalf("made %d pins (pins[7] %d, pins[8] %d), want 149, 0 and %d", len(sys.made), pins[7], pins[8], uint64(1e6+1008))
	}
	n, err := burst(ctx, sys, w, authors, pins)
	if ctx.Err() != nil {
		t.Fatalf("burst did not have 64 events in flight at once: %v", ctx.Err())
	}
	if n != 150 || err == nil || err.Error() != "1 of 150 events failed to publish" {
		t.Errorf("burst = %d, %v; want 150 and 1 of 150 failed", n, err)
	}
	if len(sys.published) != 149 {
		t.Errorf("%d pins published, want 149", len(sys.published))
	}
	for p, c := range sys.published {
		if c != 1 {
			t.Errorf("pin %d published %d times", p, c)
		}
	}
}
