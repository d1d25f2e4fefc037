package engagement

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// armsOf lists the arms of users 1..n under e, one character each.
func armsOf(e Experiment, n int) string {
	var b strings.Builder
	for u := 1; u <= n; u++ {
		b.WriteByte(e.ArmOf(zen.ID(u))[0])
	}
	return b.String()
}

// TestArmsStableAcrossProcesses: another process (this test binary, run again) puts every user
// in the same arm as this one.
func TestArmsStableAcrossProcesses(t *testing.T) {
	e := Experiment{Salt: "rollout-7", LearnedPercent: 10}
	if os.Getenv("ENGAGEMENT_ARMS_CHILD") == "1" {
		fmt.Print("ARMS:" + armsOf(e, 2000) + ":END")
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestArmsStableAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ENGAGEMENT_ARMS_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	_, rest, ok := strings.Cut(string(out), "ARMS:")
	got, _, ok2 := strings.Cut(rest, ":END")
	if !ok || !ok2 {
		t.Fatalf("child printed no arms: %s", out)
	}
	if want := armsOf(e, 2000); got != want {
		t.Errorf("another process assigned other arms:\n got %s\nwant %s", got, want)
	}
	if n := strings.Count(got, "l"); n < 150 || n > 250 {
		t.Errorf("%d of 2000 users in the learned arm at 10%%", n)
	}
}
