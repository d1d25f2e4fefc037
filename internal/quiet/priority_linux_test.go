package quiet

import (
	"context"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/smartfeed/smartfeed/internal/lowprio"
)

// threadNice is the calling thread's nice value.
func threadNice(t *testing.T) int {
	t.Helper()
	n, err := lowprio.ThreadNice()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLanesRunAtLowerPriority: work run with Do on lanes made with Nice runs on a thread whose
// nice value is the process's plus the delta, while the caller's thread keeps its own; lanes
// without Nice run the work on the caller's thread.
func TestLanesRunAtLowerPriority(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base := threadNice(t)
	if base+5 > 19 {
		t.Skipf("the test runs at nice %d: no room to lower it", base)
	}
	l := NewLanes(2, Nice(5))
	if delta, err := l.Priority(); delta != 5 || err != nil {
		t.Fatalf("Priority() = %d, %v; want 5, nil", delta, err)
	}
	var inLane, laneTID int
	if err := l.Do(context.Background(), func() { inLane, laneTID = threadNice(t), unix.Gettid() }); err != nil {
		t.Fatal(err)
	}
	if inLane != base+5 {
		t.Errorf("nice in the lane = %d, want %d", inLane, base+5)
	}
	if laneTID == unix.Gettid() {
		t.Error("the lane's work ran on the caller's thread")
	}
	if got := threadNice(t); got != base {
		t.Errorf("the caller's nice after Do = %d, want %d", got, base)
	}

	plain := NewLanes(1)
	var plainTID int
	if !plain.TryDo(context.Background(), time.Second, func() { plainTID = unix.Gettid() }) {
		t.Fatal("TryDo with a free lane = false")
	}
	if plainTID != unix.Gettid() {
		t.Error("lanes without Nice ran the work on another thread")
	}
}

// TestLanesDoPanics: a panic in the work is raised again in Do's caller, and the lane is given
// back.
func TestLanesDoPanics(t *testing.T) {
	l := NewLanes(1, Nice(1))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want boom", r)
			}
		}()
		_ = l.Do(context.Background(), func() { panic("boom") })
		t.Error("Do returned after its work panicked")
	}()
	if got := l.InUse(); got != 0 {
		t.Errorf("InUse after the panic = %d, want 0", got)
	}
	ran := false
	if err := l.Do(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Errorf("Do after a panic = %v, ran %v", err, ran)
	}
}
