package loadgen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PeakRSSMiB is process pid's peak resident set in MiB (VmHWM of /proc/PID/status; pid 0: this
// process). A child's rusage is no substitute on Linux: a child started by fork or vfork and
// exec reports the larger of its own peak and its parent's at the exec.
func PeakRSSMiB(pid int) (float64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	if pid == 0 {
		path = "/proc/self/status"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return ParseVmHWM(string(b))
}

// ParseVmHWM reads VmHWM ("VmHWM:    12345 kB") from /proc/PID/status's text, in MiB.
func ParseVmHWM(s string) (float64, error) {
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, errors.New("/proc/PID/status: VmHWM not in kB")
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/status: %w", err)
		}
		return kb / 1024, nil
	}
	return 0, errors.New("/proc/PID/status: no VmHWM")
}
