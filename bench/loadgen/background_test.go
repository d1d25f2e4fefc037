package loadgen

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestMain makes the test binary stand in for `smartfeed loadgen` when called as
// "BINARY loadgen ...": it writes a window and a summary once interrupted, and exits 1, as the
// generator does when its context is cancelled.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "loadgen" && os.Getenv("LOADGEN_TEST_FAKE") == "1" {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		os.Stderr.WriteString("loadgen: running\n")
		<-sig
		enc := json.NewEncoder(os.Stdout)
		_ = enc.Encode(Record{Window: &Window{Kind: KindGetFeed, Offered: 1000, Achieved: 997}})
		peak, _ := PeakRSSMiB(0) // as Main reports its own
		_ = enc.Encode(Record{Summary: &Summary{Kinds: []string{KindGetFeed}, PeakRSSMiB: peak}})
		os.Exit(1)
	}
	goleak.VerifyTestMain(m) // fails the tests when a goroutine they started outlives them
}

// Start runs the generator in the background and Stop interrupts it: the window it was in is
// reported, and the exit the interrupt caused is not an error.
func TestStartStop(t *testing.T) {
	t.Setenv("LOADGEN_TEST_FAKE", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Kinds, o.GRPCAddr = []string{KindGetFeed}, "127.0.0.1:1"
	ready := &firstWrite{c: make(chan struct{})}
	r, err := Start(context.Background(), exe, o, []uint64{1, 2}, t.TempDir(), "read-load", ready)
	if err != nil {
		t.Fatal(err)
	}
	<-ready.c // the generator is running (its first line logged)
	rep, err := r.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if len(rep.Windows) != 1 || rep.Windows[0].Achieved != 997 || rep.Summary == nil {
		t.Errorf("report %+v", rep)
	}
	if rep.PeakRSSMiB <= 0 {
		t.Errorf("peak RSS %v, want the process's", rep.PeakRSSMiB)
	}
}

// firstWrite closes c at its first write.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(p), nil
}
