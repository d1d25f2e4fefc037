package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine is what the generator ran on: the same for every kind of call of a run, since the
// kinds share the process.
type Machine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Affinity   string `json:"cpu_affinity"` // the CPUs the process may run on, "0-1"
	Go         string `json:"go"`
	PID        int    `json:"pid"`
}

// Describe is the running process's Machine.
func Describe() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), PID: os.Getpid()}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		var cpus []int
		for c := range 1024 {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		m.Affinity = FormatCPUList(cpus)
	}
	return m
}

// SetAffinity pins every thread of the process to cpus (new threads inherit it from the thread
// that makes them).
func SetAffinity(cpus []int) error {
	if len(cpus) == 0 {
		return errors.New("no CPUs")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("cpu affinity: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("cpu affinity of thread %d: %w", tid, err)
		}
	}
	return nil
}

// ParseCPUList reads a CPU list such as "0-1,3".
func ParseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= 1024 {
			return nil, fmt.Errorf("cpu list: %q is not a CPU number", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= 1024 {
				return nil, fmt.Errorf("cpu list: %q is not a range of CPUs", part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("cpu list: empty")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatCPUList writes cpus (sorted) as a CPU list, "0-1,3".
func FormatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}

// ProcLoadAvg reads the 1-minute load average from /proc/loadavg.
func ProcLoadAvg() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("/proc/loadavg: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}

// sampleLoad records the load average into la at once and every second until the returned
// function is called, which records the end.
func sampleLoad(read func() (float64, error), la *LoadAvg) (stop func()) {
	v, _ := read()
	la.Start, la.Max = v, v
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if v, err := read(); err == nil {
					la.Max = max(la.Max, v)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		v, _ := read()
		la.End, la.Max = v, max(la.Max, v)
	}
}

// ZipfPicker draws users with a Zipf-skewed visit rate: the users are shuffled by seed, and
// the k-th of them (from 0) is drawn with a probability proportional to 1/(1+k)^s (s > 1), so
// a few come back often and most rarely, as people visit a site. s ≤ 1 draws them uniformly.
// It is not safe for concurrent use (the generator draws from one goroutine).
func ZipfPicker(users []uint64, s float64, seed uint64) (func() uint64, error) {
	if len(users) == 0 {
		return nil, errors.New("no users to read")
	}
	order := slices.Clone(users)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if s <= 1 {
		return func() uint64 { return order[r.IntN(len(order))] }, nil
	}
	z := rand.NewZipf(r, s, 1, uint64(len(order)-1))
	return func() uint64 { return order[z.Uint64()] }, nil
}
