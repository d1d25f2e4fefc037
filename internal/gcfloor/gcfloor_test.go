package gcfloor

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		name        string
		floor, live uint64
		base, want  int
	}{
		{"a small heap: the goal is the floor", 256 * mib, 16 * mib, 100, 1500},
		{"half the floor: the base", 256 * mib, 128 * mib, 100, 100},
		{"past the floor: the base", 256 * mib, 1024 * mib, 100, 100},
		{"a higher base wins", 256 * mib, 64 * mib, 400, 400},
		{"a tiny heap: capped", 256 * mib, 1 << 10, 100, MaxPercent},
		{"nothing measured yet: capped", 256 * mib, 0, 100, MaxPercent},
		{"just under half: rounded up", 100, 49, 100, 105},
	} {
		if got := Percent(tc.floor, tc.live, tc.base); got != tc.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", tc.name, tc.floor, tc.live, tc.base, got, tc.want)
		}
	}
}

// gogc reads the GOGC in force without changing it.
func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// waitFor polls cond for up to 5 s, collecting so that the sentinel's cleanup runs.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if cond() {
			return
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after 5 s: %s", what)
}

var keep []byte

// TestTunerFollowsTheLiveHeap checks that the tuner raises GOGC while the live heap is small,
// gives the base back once it is past half the floor, raises it again when the heap shrinks,
// and restores the GOGC it found when stopped.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	reg := prometheus.NewRegistry()
	tu, err := Start(Options{Floor: 256 * mib, Registerer: reg, CgroupMax: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	defer tu.Stop()
	waitFor(t, "GOGC not raised over a small heap", func() bool { return gogc() > 1000 })
	if g, c := gogc(), tu.Current(); g != c {
		t.Errorf("GOGC %d, the tuner says %d", g, c)
	}

	keep = make([]byte, 200*mib) // live: past half the floor
	for i := range keep {
		if i%4096 == 0 {
			keep[i] = 1
		}
	}
	waitFor(t, "GOGC not back to 100 with 200 MiB live", func() bool { return gogc() == 100 })
	keep = nil
	waitFor(t, "GOGC not raised again once the heap shrank", func() bool { return gogc() > 1000 })

	tu.Stop()
	if g := gogc(); g != 100 {
		t.Errorf("after Stop GOGC is %d, want the 100 it found", g)
	}
	runtime.GC()
	runtime.GC()
	// sleep: 50 ms for the collections' cleanups to run, in which none may set GOGC.
	time.Sleep(50 * time.Millisecond)
	if g := gogc(); g != 100 {
		t.Errorf("a collection after Stop set GOGC to %d", g)
	}
}

func TestTunerMetrics(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	reg := prometheus.NewRegistry()
	tu, err := Start(Options{Floor: 64 * mib, Registerer: reg, CgroupMax: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	defer tu.Stop()
	waitFor(t, "GOGC not raised", func() bool { return gogc() > 100 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	want := map[string]float64{"smartfeed_gc_heap_floor_bytes": 64 * mib}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func TestFloorCappedByLimits(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	dir := t.TempDir()
	cg := filepath.Join(dir, "memory.max")
	if err := os.WriteFile(cg, []byte("536870912\n"), 0o644); err != nil { // 512 MiB
		t.Fatal(err)
	}
	tu, err := Start(Options{Floor: 256 * mib, CgroupMax: cg})
	if err != nil {
		t.Fatal(err)
	}
	if got := tu.Floor(); got != 128*mib {
		t.Errorf("floor in a 512 MiB container = %d MiB, want 128", got/mib)
	}
	tu.Stop()

	if err := os.WriteFile(cg, []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := debug.SetMemoryLimit(200 * mib)
	defer debug.SetMemoryLimit(old)
	tu, err = Start(Options{Floor: 256 * mib, CgroupMax: cg})
	if err != nil {
		t.Fatal(err)
	}
	if got := tu.Floor(); got != 100*mib {
		t.Errorf("floor under GOMEMLIMIT 200 MiB = %d MiB, want 100", got/mib)
	}
	tu.Stop()
}

func TestStartRefuses(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if _, err := Start(Options{}); err == nil {
		t.Error("Start with no floor: no error")
	}
	tu, err := Start(Options{Floor: mib})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{Floor: mib}); err != ErrRunning {
		t.Errorf("a second Start: %v, want ErrRunning", err)
	}
	tu.Stop()
	debug.SetGCPercent(-1)
	if _, err := Start(Options{Floor: mib}); err != ErrOff {
		t.Errorf("Start with GOGC=off: %v, want ErrOff", err)
	}
	if g := gogc(); g != -1 {
		t.Errorf("Start with GOGC=off changed it to %d", g)
	}
}
