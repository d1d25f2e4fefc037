package loadgen

import (
	"os/exec"
	"strconv"
	"testing"
)

// TestParseVmHWM reads the peak from /proc/PID/status's text, and refuses text without it.
func TestParseVmHWM(t *testing.T) {
	hwm, err := ParseVmHWM("Name:\tredis-server\nVmPeak:\t  9000 kB\nVmHWM:\t    20480 kB\nVmRSS:\t 1024 kB\n")
	if err != nil || hwm != 20 {
		t.Errorf("VmHWM = %v MiB, %v; want 20", hwm, err)
	}
	if _, err := ParseVmHWM("Name:\tx\nVmRSS:\t 1024 kB\n"); err == nil {
		t.Error("no VmHWM: no error")
	}
}

// TestPeakRSSOfAChild: a child's own VmHWM is its own, far below a parent that holds 256 MiB,
// where the child's rusage would report the parent's peak.
func TestPeakRSSOfAChild(t *testing.T) {
	held := make([]byte, 256<<20)
	for i := range held {
		held[i] = 1
	}
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	self, err := PeakRSSMiB(0)
	if err != nil {
		t.Skip("no /proc:", err)
	}
	child, err := PeakRSSMiB(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("the child's VmHWM (pid %s): %v", strconv.Itoa(cmd.Process.Pid), err)
	}
	if self < 256 || child > 64 {
		t.Errorf("peak RSS: this process %.0f MiB (want ≥ 256), the child %.0f MiB (want its own, under 64)", self, child)
	}
	_ = held[len(held)-1]
}
