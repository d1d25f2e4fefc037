package slowtrace

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
)

// A call over the bound writes the trace window to a file, named for the call; a call under it,
// or within the gap after the last file, or past the file bound, writes nothing.
func TestRecorder(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	r, err := Start(Options{Dir: filepath.Join(dir, "traces"), Over: 20 * time.Millisecond, Gap: time.Hour, MaxFiles: 5, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// Something in the window: a goroutine that blocks and wakes.
	done := make(chan struct{})
	go func() {
		// sleep: a timer's block and wake, for the trace window to hold.
		time.Sleep(5 * time.Millisecond)
		close(done)
	}()
	<-done

	call := r.UnaryInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/smartfeed.feed.v1.FeedService/GetFeed"}
	fast := func(context.Context, any) (any, error) { return "ok", nil }
	slow := func(context.Context, any) (any, error) {
		// sleep: the call takes 30 ms, over the 20 ms bound.
		time.Sleep(30 * time.Millisecond)
		return "ok", nil
	}
	if resp, err := call(t.Context(), nil, info, fast); resp != "ok" || err != nil {
		t.Fatalf("interceptor answered %v, %v", resp, err)
	}
	r.wg.Wait()
	if files, _ := filepath.Glob(filepath.Join(dir, "traces", "*")); len(files) != 0 {
		t.Fatalf("a call under the bound wrote %v", files)
	}
	if _, err := call(t.Context(), nil, info, slow); err != nil {
		t.Fatal(err)
	}
	r.Observe("/x/Again", time.Second) // within the gap: skipped
	r.Close()

	files, _ := filepath.Glob(filepath.Join(dir, "traces", "*"))
	if len(files) != 1 {
		t.Fatalf("traces written: %v, want one", files)
	}
	name := filepath.Base(files[0])
	if !strings.HasPrefix(name, "slow-") || !strings.Contains(name, "-GetFeed-") || !strings.HasSuffix(name, "ms.trace") {
		t.Errorf("trace file name %q, want slow-<time>-GetFeed-<ms>ms.trace", name)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1000 {
		t.Errorf("trace file of %d bytes starting %q, want a Go execution trace", len(b), b[:min(len(b), 16)])
	}
	if got := testutil.ToFloat64(r.writes.WithLabelValues("written")); got != 1 {
		t.Errorf("written = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.writes.WithLabelValues("skipped")); got != 1 {
		t.Errorf("skipped = %v, want 1", got)
	}
}

// Past MaxFiles nothing more is written, however far apart the slow calls.
func TestMaxFiles(t *testing.T) {
	dir := t.TempDir()
	r, err := Start(Options{Dir: dir, Over: time.Millisecond, Gap: time.Nanosecond, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r.Observe("/x/Slow", time.Second)
		r.wg.Wait()
		time.Sleep(2 * time.Millisecond) // distinct file names
	}
	r.Close()
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 2 {
		t.Errorf("traces written: %d, want MaxFiles 2", len(files))
	}
}

// A second recorder in the process is refused (the runtime allows one flight recorder), and a
// missing directory is an error.
func TestStartRefusals(t *testing.T) {
	if _, err := Start(Options{}); err == nil {
		t.Error("no directory accepted")
	}
	r, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r2, err := Start(Options{Dir: t.TempDir()}); err == nil {
		r2.Close()
		t.Error("a second flight recorder started")
	}
}
