package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/smartfeed/smartfeed/bench/loadgen"
)

// Process is a process of the run besides the bench's own (a Redis server), watched for its
// CPU (so that the CPU the machine spent elsewhere is known) and its peak RSS.
type Process struct {
	Name string
	PID  int
}

// PhaseLoad is the machine during one phase: the load average, and the CPU the machine spent
// against what the run's processes spent, so that CPU taken by another process shows.
type PhaseLoad struct {
	Phase   string  `json:"phase"`
	Seconds float64 `json:"seconds"`
	// LoadAvgStart, LoadAvgMax and LoadAvgEnd are the 1-minute load average at the phase's
	// start, its highest (sampled every second) and at its end.
	LoadAvgStart float64 `json:"load_avg_start"`
	LoadAvgMax   float64 `json:"load_avg_max"`
	LoadAvgEnd   float64 `json:"load_avg_end"`
	// MachineCores is the CPU the whole machine spent (/proc/stat), in cores on average over
	// the phase; RunCores what the run spent (this process, the children it waited for — the
	// load generator — and the watched Processes); OtherCores the difference: other processes.
	MachineCores float64 `json:"machine_cpu_cores"`
	RunCores     float64 `json:"run_cpu_cores"`
	OtherCores   float64 `json:"other_cpu_cores"`
	Warning      string  `json:"warning,omitempty"`
}

// ProcessRSS is a process's peak resident set.
type ProcessRSS struct {
	Name    string  `json:"name"`
	PID     int     `json:"pid,omitempty"`
	PeakMiB float64 `json:"peak_rss_mib"`
	// Source says where the figure comes from (getrusage, /proc/PID/status VmHWM, ...).
	Source string `json:"source"`
}

// otherCoresWarn is the CPU other processes may take on average during a phase, in cores,
// before the report warns that the phase shared the machine.
const otherCoresWarn = 0.25

// machineProbe reads what phaseMonitor needs; the real one reads /proc and getrusage.
type machineProbe struct {
	cores   int
	loadAvg func() (float64, error)
	// machineCPU is the CPU the machine has spent busy since boot.
	machineCPU func() (time.Duration, error)
	// runCPU is the CPU the run's processes have spent so far.
	runCPU func() time.Duration
	now    func() time.Time
}

// phaseMonitor records a PhaseLoad for every phase it is told of.
type phaseMonitor struct {
	probe machineProbe
	mu    sync.Mutex
	loads []PhaseLoad
}

// begin starts recording phase and returns the function that ends it.
func (m *phaseMonitor) begin(phase string) func() {
	p := m.probe
	pl := PhaseLoad{Phase: phase}
	pl.LoadAvgStart, _ = p.loadAvg()
	pl.LoadAvgMax = pl.LoadAvgStart
	mc0, merr := p.machineCPU()
	rc0, start := p.runCPU(), p.now()
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
				if v, err := p.loadAvg(); err == nil {
					pl.LoadAvgMax = max(pl.LoadAvgMax, v) // read by the end only after this goroutine exited
				}
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		el := p.now().Sub(start)
		pl.Seconds = el.Seconds()
		pl.LoadAvgEnd, _ = p.loadAvg()
		pl.LoadAvgMax = max(pl.LoadAvgMax, pl.LoadAvgEnd)
		mc1, merr1 := p.machineCPU()
		rc := p.runCPU() - rc0
		if el > 0 {
			pl.RunCores = rc.Seconds() / el.Seconds()
		}
		if merr == nil && merr1 == nil && el > 0 {
			pl.MachineCores = (mc1 - mc0).Seconds() / el.Seconds()
			pl.OtherCores = max(0, pl.MachineCores-pl.RunCores)
		}
		pl.Warning = loadWarning(pl, p.cores)
		m.mu.Lock()
		m.loads = append(m.loads, pl)
		m.mu.Unlock()
	}
}

// loadWarning says when another process took CPU during the phase (over otherCoresWarn cores on
// average), or the load average rose over the cores.
func loadWarning(pl PhaseLoad, cores int) string {
	var w []string
	if pl.OtherCores > otherCoresWarn {
		w = append(w, fmt.Sprintf("other processes took %.2f cores on average (the run %.2f, the machine %.2f)", pl.OtherCores, pl.RunCores, pl.MachineCores))
	}
	if cores > 0 && pl.LoadAvgMax > float64(cores) {
		w = append(w, fmt.Sprintf("the load average reached %.1f on %d cores", pl.LoadAvgMax, cores))
	}
	return strings.Join(w, "; ")
}

// wrap chains the monitor before next (Options.Phase; nil: none).
func (m *phaseMonitor) wrap(next func(string) func()) func(string) func() {
	return func(name string) func() {
		end := m.begin(name)
		endNext := func() {}
		if next != nil {
			endNext = next(name)
		}
		return func() { endNext(); end() }
	}
}

// results is the phases recorded so far.
func (m *phaseMonitor) results() []PhaseLoad {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]PhaseLoad(nil), m.loads...)
}

// procMachineProbe reads the machine from /proc, and the run's CPU from getrusage (this process
// and its waited-for children) and /proc/PID/stat of procs.
func procMachineProbe(cores int, procs []Process) machineProbe {
	return machineProbe{cores: cores, loadAvg: procLoadAvg, machineCPU: procStatBusy, now: time.Now, runCPU: func() time.Duration {
		d := rusageCPU(syscall.RUSAGE_SELF) + rusageCPU(syscall.RUSAGE_CHILDREN)
		for _, p := range procs {
			if c, err := procCPU(p.PID); err == nil {
				d += c
			}
		}
		return d
	}}
}

func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times (100 on Linux everywhere).
const clockTick = 100

func procLoadAvg() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	return parseLoadAvg(string(b))
}

// parseLoadAvg reads the 1-minute load average of /proc/loadavg's text.
func parseLoadAvg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, errors.New("/proc/loadavg: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}

func procStatBusy() (time.Duration, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, errors.New("/proc/stat: empty")
	}
	return parseStatBusy(sc.Text())
}

// parseStatBusy reads the CPU time the machine spent busy from /proc/stat's first line ("cpu
// user nice system idle iowait irq softirq steal ..."): all but idle and iowait (guest time is
// already in user).
func parseStatBusy(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var ticks uint64
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// procCPU is the CPU pid has spent (utime + stime of /proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU reads utime + stime from /proc/PID/stat's text (fields 14 and 15; the
// command, field 2, may hold spaces, so fields are counted after its closing parenthesis).
func parseProcStatCPU(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no command")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11]; stime f[12].
	if len(f) < 13 {
		return 0, errors.New("/proc/PID/stat: short")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/PID/stat: %w", err)
	}
	return time.Duration(u+st) * time.Second / clockTick, nil
}

// processRSS is the peak RSS of the bench's own process (the server: the in-process `all` and
// the harness's clients) and of procs.
func processRSS(procs []Process) []ProcessRSS {
	out := []ProcessRSS{{Name: "smartfeed bench (server and harness)", PID: os.Getpid(), PeakMiB: peakRSSMiB(), Source: "getrusage ru_maxrss"}}
	for _, p := range procs {
		v, err := loadgen.PeakRSSMiB(p.PID)
		r := ProcessRSS{Name: p.Name, PID: p.PID, PeakMiB: v, Source: "/proc/PID/status VmHWM (since the process started)"}
		if err != nil {
			r.Source = "not read: " + err.Error()
		}
		out = append(out, r)
	}
	return out
}
