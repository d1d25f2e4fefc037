package testenv_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestWaitFor shows WaitFor returning once the condition holds, having polled it until then,
// and failing, with what it waited for, when it never does.
func TestWaitFor(t *testing.T) {
	calls := 0
	testenv.WaitFor(t, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
	ft := &fatalRecorder{T: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.WaitFor(ft, 30*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if want := "timed out after 30ms waiting for nothing"; ft.msg != want {
		t.Errorf("failure %q, want %q", ft.msg, want)
	}
}

// fatalRecorder records a Fatalf and ends its goroutine, as testing.T does.
type fatalRecorder struct {
	*testing.T
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
