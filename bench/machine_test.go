package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseProc(t *testing.T) {
	busy, err := parseStatBusy("cpu  100 5 50 1000 20 3 2 1 0 0")
	if err != nil || busy != 1610*time.Millisecond { // (100+5+50+3+2+1) ticks of 10 ms
		t.Errorf("busy = %v, %v; want 1.61s", busy, err)
	}
	if _, err := parseStatBusy("intr 1 2 3"); err == nil {
		t.Error("a line not cpu's: no error")
	}
	// The command may hold spaces and parentheses.
	stat := "4242 (redis (x) srv) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 4 0 100 0 0"
	cpu, err := parseProcStatCPU(stat)
	if err != nil || cpu != 3250*time.Millisecond {
		t.Errorf("cpu = %v, %v; want 3.25s", cpu, err)
	}
	if la, err := parseLoadAvg("1.50 0.80 0.40 2/300 1234\n"); err != nil || la != 1.5 {
		t.Errorf("load avg = %v, %v", la, err)
	}
}

// fakeClock advances by step at each reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.t = c.t.Add(c.step)
	return c.t
}

// The monitor reports the machine's CPU, the run's and the rest per phase, and warns when
// other processes took CPU or the load average rose over the cores.
func TestPhaseMonitor(t *testing.T) {
	for _, tc := range []struct {
		name             string
		machine, run     time.Duration // spent over the phase
		load             float64
		want             PhaseLoad
		warn, notWarning string
	}{
		{"alone", 15 * time.Second, 14 * time.Second, 1.2,
			PhaseLoad{Phase: "p", Seconds: 10, LoadAvgStart: 1.2, LoadAvgMax: 1.2, LoadAvgEnd: 1.2, MachineCores: 1.5, RunCores: 1.4, OtherCores: 0.1}, "", ""},
		{"shared", 18 * time.Second, 10 * time.Second, 1.5,
			PhaseLoad{Phase: "p", Seconds: 10, LoadAvgStart: 1.5, LoadAvgMax: 1.5, LoadAvgEnd: 1.5, MachineCores: 1.8, RunCores: 1, OtherCores: 0.8},
			"other processes took 0.80 cores", ""},
		{"loaded", 15 * time.Second, 15 * time.Second, 6,
			PhaseLoad{Phase: "p", Seconds: 10, LoadAvgStart: 6, LoadAvgMax: 6, LoadAvgEnd: 6, MachineCores: 1.5, RunCores: 1.5, OtherCores: 0},
			"load average reached 6.0 on 2 cores", "other processes"},
	} {
		clk := &fakeClock{t: time.Unix(0, 0), step: 10 * time.Second}
		var mcalls, rcalls int
		m := &phaseMonitor{probe: machineProbe{cores: 2, now: clk.now,
			loadAvg: func() (float64, error) { return tc.load, nil },
			machineCPU: func() (time.Duration, error) {
				mcalls++
				return time.Duration(mcalls-1) * tc.machine, nil
			},
			runCPU: func() time.Duration {
				rcalls++
				return time.Duration(rcalls-1) * tc.run
			}}}
		m.begin("p")()
		got := m.results()
		if len(got) != 1 {
			t.Fatalf("%s: %d phases", tc.name, len(got))
		}
		w := got[0].Warning
		got[0].Warning = ""
		if d := cmp.Diff(tc.want, got[0], cmpopts.EquateApprox(0, 1e-9)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
		if (tc.warn == "") != (w == "") || !strings.Contains(w, tc.warn) || tc.notWarning != "" && strings.Contains(w, tc.notWarning) {
			t.Errorf("%s: warning %q, want one with %q", tc.name, w, tc.warn)
		}
	}
}

func TestMachineReport(t *testing.T) {
	r := &Results{PhaseLoad: []PhaseLoad{{Phase: "burst", Seconds: 4, LoadAvgStart: 1, LoadAvgMax: 3, LoadAvgEnd: 2, MachineCores: 2, RunCores: 1, OtherCores: 1,
		Warning: "other processes took 1.00 cores on average"}},
		Processes: []ProcessRSS{{Name: "redis-server", PID: 7, PeakMiB: 30, Source: "VmHWM"}}}
	md := machineMarkdown(r)
	for _, want := range []string{"| burst | 4 | 1.0 / 3.0 / 2.0 | 2.00 | 1.00 | 1.00 |", "**Warning** (burst): other processes took 1.00 cores",
		"| redis-server | 30 MiB | VmHWM |"} {
		if !strings.Contains(md, want) {
			t.Errorf("machine report lacks %q:\n%s", want, md)
		}
	}
}

// TestRunCPUCountsTheOtherProcesses: the run's CPU is this process's plus each other process's
// of the run that can be read, and a process that cannot (gone) adds nothing. Listing this
// process as another one counts its CPU twice, which shows the other processes are added.
func TestRunCPUCountsTheOtherProcesses(t *testing.T) {
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); { // burn CPU, well over the slack below
	}
	own := cpuTime()
	gone := runCPU([]Process{{Name: "gone", PID: 1 << 30}})
	twice := runCPU([]Process{{Name: "self", PID: os.Getpid()}})
	after := cpuTime()
	if gone < own || gone > after {
		t.Errorf("runCPU with a gone process = %v, want this process's alone (%v..%v)", gone, own, after)
	}
	// /proc/PID/stat counts user and system time in clock ticks (10 ms) each, and lags the
	// running threads' time: allow 50 ms each way, a fraction of the 200 ms burnt above.
	if lo, hi := 2*own-50*time.Millisecond, 2*after+50*time.Millisecond; twice < lo || twice > hi {
		t.Errorf("runCPU listing this process = %v, want about twice its CPU (%v..%v)", twice, lo, hi)
	}
}
