package quiet

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestLanesBound: n lanes let n holders in; the next one waits until one is released, and
// TryAcquire gives up after its wait or when its context ends.
func TestLanesBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := NewLanes(2)
		if got := l.Cap(); got != 2 {
			t.Fatalf("Cap = %d, want 2", got)
		}
		for range 2 {
			if err := l.Acquire(ctx); err != nil {
				t.Fatalf("Acquire with a free lane: %v", err)
			}
		}
		if got := l.InUse(); got != 2 {
			t.Fatalf("InUse = %d, want 2", got)
		}
		start := time.Now()
		if l.TryAcquire(ctx, 50*time.Millisecond) {
			t.Fatal("TryAcquire with every lane taken = true")
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Errorf("TryAcquire waited %v, want 50ms", waited)
		}
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- l.Acquire(cctx) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("Acquire with every lane taken returned %v", err)
		default:
		}
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire after its context ended = %v, want context.Canceled", err)
		}

		go func() { got <- l.Acquire(ctx) }()
		synctest.Wait()
		l.Release()
		if err := <-got; err != nil {
			t.Fatalf("Acquire after a Release = %v", err)
		}
		if got := l.InUse(); got != 2 {
			t.Errorf("InUse = %d, want 2", got)
		}
		l.Release()
		if !l.TryAcquire(ctx, 0) {
			t.Error("TryAcquire with a free lane = false")
		}
	})
}

// TestNilLanes: nil Lanes bound nothing.
func TestNilLanes(t *testing.T) {
	var l *Lanes
	for range 3 {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !l.TryAcquire(context.Background(), 0) || l.Cap() != 0 || l.InUse() != 0 {
		t.Fatal("nil Lanes bound something")
	}
	l.Release()
}

// TestNewLanesAtLeastOne: fewer than one lane asked for is one.
func TestNewLanesAtLeastOne(t *testing.T) {
	if got := NewLanes(0).Cap(); got != 1 {
		t.Fatalf("NewLanes(0).Cap() = %d, want 1", got)
	}
}

// TestLanesDoBound: Do runs its work only in a lane: while every lane is held it waits, and
// fails without running the work when its context ends first; TryDo gives up after its wait.
func TestLanesDoBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := NewLanes(1)
		if err := l.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		ran := 0
		if l.TryDo(ctx, 10*time.Millisecond, func() { ran++ }) {
			t.Fatal("TryDo with every lane held = true")
		}
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- l.Do(cctx, func() { ran++ }) }()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("Do after its context ended = %v, want context.Canceled", err)
		}
		go func() { got <- l.Do(ctx, func() { ran++ }) }()
		synctest.Wait()
		if ran != 0 {
			t.Fatalf("work ran %d times while every lane was held", ran)
		}
		l.Release()
		if err := <-got; err != nil || ran != 1 {
			t.Fatalf("Do once the lane was free = %v, ran %d times; want nil, 1", err, ran)
		}
		if got := l.InUse(); got != 0 {
			t.Errorf("InUse after Do = %d, want 0", got)
		}
	})
}
