package lowprio

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// niceOf is the calling thread's nice value.
func niceOf(t *testing.T) int {
	t.Helper()
	n, err := ThreadNice()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLowerThread: LowerThread raises the nice value of the calling goroutine's thread alone,
// by delta and at most to MaxNice, and Probe says it works.
func TestLowerThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := unix.Gettid()
	base := niceOf(t)
	if base+3 > MaxNice {
		t.Skipf("the test runs at nice %d: no room to lower it", base)
	}
	if err := Probe(3); err != nil {
		t.Fatalf("Probe(3) = %v", err)
	}
	for _, tc := range []struct{ delta, want int }{{3, base + 3}, {100, MaxNice}, {0, base}} {
		got := make(chan [2]int, 1)
		go func() {
			err := LowerThread(tc.delta)
			if err != nil {
				t.Error(err)
			}
			n, _ := ThreadNice()
			got <- [2]int{unix.Gettid(), n}
		}()
		r := <-got
		if r[0] == me {
			t.Fatal("the lowered goroutine ran on the test's locked thread")
		}
		if r[1] != tc.want {
			t.Errorf("LowerThread(%d): nice %d, want %d", tc.delta, r[1], tc.want)
		}
	}
	if got := niceOf(t); got != base {
		t.Errorf("the caller's nice = %d, want %d (unchanged)", got, base)
	}
}
