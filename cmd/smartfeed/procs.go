package main

import (
	"runtime"
)

// maxProcs is the GOMAXPROCS that config.Config.MaxProcs asks for, given Go's default (def),
// the machine's CPUs and whether the GOMAXPROCS environment variable is set: 0 (auto) is
// twice def, at most def+8 (what was measured is small machines; a large one seldom has every
// processor held, and the garbage collector's workers grow with GOMAXPROCS), unless the
// variable is set or def is below the CPUs (a cgroup CPU limit: more threads than the quota
// only get the process throttled); -1 is def. It returns def when nothing is to change.
func maxProcs(want, def, cpus int, envSet bool) int {
	switch {
	case want > 0:
		return want
	case want < 0, envSet, def < cpus:
		return def
	}
	return def + min(def, 8)
}

// setMaxProcs applies config.Config.MaxProcs to the runtime and returns GOMAXPROCS before and
// after.
func setMaxProcs(want int, getenv func(string) string) (before, after int) {
	before = runtime.GOMAXPROCS(0)
	after = maxProcs(want, before, runtime.NumCPU(), getenv("GOMAXPROCS") != "")
	if after != before {
		runtime.GOMAXPROCS(after)
	}
	return before, after
}
