package main

import (
	"runtime/debug"
	"testing"
)

// TestStampedCommit: the binary's own VCS stamp names the commit in results.json, short, with
// -dirty for a modified tree; none gives "" (commit then asks git in the working directory).
func TestStampedCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: "35ac31a0123456789"}, {Key: "vcs.modified", Value: "false"}}, "35ac31a"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "bf3c5190abcdef"}}, "bf3c519-dirty"},
		{"short revision", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
		{"no stamp", []debug.BuildSetting{{Key: "GOOS", Value: "linux"}}, ""},
	} {
		if got := stampedCommit(tc.settings); got != tc.want {
			t.Errorf("%s: stampedCommit = %q, want %q", tc.name, got, tc.want)
		}
	}
}
