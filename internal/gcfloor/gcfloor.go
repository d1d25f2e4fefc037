// Package gcfloor keeps the Go collector's heap goal at or above a floor.
//
// With GOGC=100 the collector runs each time the heap doubles its live part. SmartFeed's live
// Go heap is small (10–20 MiB in the bench: Pebble's caches and memtables are outside it), so
// under load it collected 30–40 times a second. Each cycle takes a processor's worth of mark
// work for a few milliseconds, and on two cores a request that arrives then waits for it: an
// execution trace of the bench's slowest GetFeeds showed the server's transport reader not
// scheduled for 6.8 ms while the mark worker ran (docs/read-path.md, "The collector's heap
// floor").
//
// A Tuner raises GOGC after each collection so that the next one starts no sooner than the
// heap reaches the floor: GOGC = max(base, (floor/live − 1) × 100), where live is the heap the
// collection found live. Once the live heap is past floor/2 the base GOGC is back in force, so
// the floor costs at most its own size in memory, never a multiple of the live heap. This is
// what Go's memory limit does from above (GOMEMLIMIT) done from below, the approach of TiDB's
// and Uber's GC tuners.
package gcfloor

import (
	"errors"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// MaxPercent bounds the GOGC a Tuner sets: with a live heap under floor/MaxPercent×100 the goal
// is below the floor.
const MaxPercent = 5000

// Options configure a Tuner.
type Options struct {
	// Floor is the least heap goal, in bytes. Required. It is capped at half the memory limit
	// (GOMEMLIMIT) and a quarter of the container's (cgroup v2 memory.max): the rest of the
	// process (Pebble's caches, off the Go heap) needs the room.
	Floor uint64
	// CgroupMax is the file holding the container's memory limit (tests); empty means cgroup
	// v2's /sys/fs/cgroup/memory.max, or v1's memory/memory.limit_in_bytes.
	CgroupMax string
	// Registerer, when set (it may be nil), receives smartfeed_gc_heap_floor_bytes. The GOGC
	// in force is the Go collector's go_gc_gogc_percent (the registry's collectors.NewGoCollector).
	Registerer prometheus.Registerer
}

// Tuner adjusts GOGC after each collection. Stop it to restore the GOGC it found.
type Tuner struct {
	floor   uint64
	base    int // the GOGC in force at Start (GOGC's environment value, or 100)
	mu      sync.Mutex
	stopped bool
	current int
	samples []metrics.Sample
}

// ErrOff is returned by Start when the collector is off (GOGC=off): there is nothing to raise.
var ErrOff = errors.New("gcfloor: the collector is off (GOGC=off)")

// ErrRunning is returned by Start while another Tuner runs in the process.
var ErrRunning = errors.New("gcfloor: a tuner already runs in this process")

// running guards GOGC, which is the process's: a second Tuner would take the first one's
// raised value for the base it restores.
var running atomic.Bool

// Start starts tuning: at most one Tuner runs in a process at a time (ErrRunning).
func Start(o Options) (*Tuner, error) {
	if o.Floor == 0 {
		return nil, errors.New("gcfloor: no floor")
	}
	if !running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	t, err := start(o)
	if err != nil {
		running.Store(false)
	}
	return t, err
}

func start(o Options) (*Tuner, error) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 {
		return nil, ErrOff
	}
	floor := o.Floor
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		floor = min(floor, uint64(lim)/2)
	}
	if c := cgroupMax(o.CgroupMax); c > 0 {
		floor = min(floor, c/4)
	}
	t := &Tuner{floor: floor, base: base, current: base,
		samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	promauto.With(o.Registerer).NewGauge(prometheus.GaugeOpts{Name: "smartfeed_gc_heap_floor_bytes",
		Help: "The least heap goal the GC tuner keeps (gc_heap_floor_mb)."}).Set(float64(t.floor))
	t.tune()
	t.arm()
	return t, nil
}

// sentinel is an object kept by nobody: the collection that finds it dead runs its cleanup,
// which tunes and makes the next one. It holds a pointer so that it is not a tiny allocation
// (whose cleanups may never run).
type sentinel struct {
	_ *int
	_ [16]byte
}

func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// Percent is the GOGC for a live heap of live bytes: the base, or more while the heap is small.
func Percent(floor, live uint64, base int) int {
	if live == 0 {
		return max(base, MaxPercent)
	}
	p := (float64(floor)/float64(live) - 1) * 100
	return max(base, min(MaxPercent, int(math.Ceil(p))))
}

// tune sets GOGC for the live heap the last collection found, and reports whether the Tuner
// still runs.
func (t *Tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	var live uint64
	if v := t.samples[0].Value; v.Kind() == metrics.KindUint64 {
		live = v.Uint64()
	}
	if p := Percent(t.floor, live, t.base); p != t.current {
		debug.SetGCPercent(p)
		t.current = p
	}
	return true
}

// Floor is the floor in force, after the memory limits' caps.
func (t *Tuner) Floor() uint64 { return t.floor }

// cgroupMax reads the container's memory limit from path, or from cgroup v2's memory.max
// or v1's memory.limit_in_bytes when path is empty: 0 when absent or "max" (v1's "no limit" is
// a number near 2^63, which caps nothing).
func cgroupMax(path string) uint64 {
	paths := []string{path}
	if path == "" {
		paths = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return v
		}
		return 0
	}
	return 0
}

// Current is the GOGC the Tuner set last.
func (t *Tuner) Current() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

// Stop stops tuning and restores the GOGC in force at Start.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	defer running.Store(false)
	debug.SetGCPercent(t.base)
	t.current = t.base
}
