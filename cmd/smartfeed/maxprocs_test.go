package main

import (
	"runtime"
	"testing"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestSetMaxProcs: max_procs wins; 0 doubles the runtime's default unless the GOMAXPROCS
// environment variable chose it.
func TestSetMaxProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name     string
		env      string
		maxProcs int
		from     int
		want     int
	}{
		{"set", "", 3, 2, 3},
		{"set, over the environment", "5", 3, 5, 3},
		{"default: twice the runtime's", "", 0, 2, 2 * def},
		{"default: twice the runtime's, not twice the value in force", "", 0, 4 * def, 2 * def},
		{"default: the environment's", "5", 0, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tc.env)
			runtime.GOMAXPROCS(tc.from)
			cfg := config.DefaultConfig()
			cfg.MaxProcs = tc.maxProcs
			if got := setMaxProcs(cfg); got != tc.want || runtime.GOMAXPROCS(0) != tc.want {
				t.Fatalf("setMaxProcs = %d, GOMAXPROCS %d; want %d", got, runtime.GOMAXPROCS(0), tc.want)
			}
		})
	}
}
