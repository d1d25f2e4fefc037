package main

import "testing"

func TestMaxProcs(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		want, def, cpus, out int
		env                  bool
	}{
		{"auto doubles Go's default", 0, 2, 2, 4, false},
		{"auto adds at most 8", 0, 32, 32, 40, false},
		{"auto leaves a cgroup limit", 0, 2, 8, 2, false},
		{"auto leaves GOMAXPROCS set", 0, 3, 3, 3, true},
		{"explicit", 6, 2, 2, 6, false},
		{"explicit over the environment", 1, 2, 2, 1, true},
		{"Go's default", -1, 2, 2, 2, false},
	} {
		if got := maxProcs(tc.want, tc.def, tc.cpus, tc.env); got != tc.out {
			t.Errorf("%s: maxProcs(%d, %d, %d, %v) = %d, want %d", tc.name, tc.want, tc.def, tc.cpus, tc.env, got, tc.out)
		}
	}
}
