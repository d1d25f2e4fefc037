package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/bench"
)

// TestLearnLoop runs `smartfeed bench --profile learn`: over the rounds of serve → engage →
// train → serve on simulated users with latent interests, the model learned from the
// impression log ranks the newest impressions far better than the fixed weights without
// engagement terms (held-out AUC ≥ 0.80 against ≤ 0.65), and engagement per session in the last
// round is at least 1.3× the first's; the command writes learn.json, learn.md and learn.png.
func TestLearnLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of a few thousand sessions; skipped with -short")
	}
	t.Parallel() // it computes while the other parallel tests mostly wait on timers and processes
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"bench", "--profile", "learn", "--out", dir}, &out, io.Discard); err != nil {
		t.Fatalf("bench --profile learn: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	b, err := os.ReadFile(filepath.Join(dir, "learn.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Rounds []bench.LearnRound `json:"rounds"`
		Lift   float64            `json:"engagement_lift_last_vs_first"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) == 0 {
		t.Fatal("learn.json has no rounds")
	}
	last := res.Rounds[len(res.Rounds)-1]
	if last.LearnedAUC < 0.80 || last.BaselineAUC > 0.65 {
		t.Errorf("learned AUC %.4f (want ≥ 0.80), the weights without engagement %.4f (want ≤ 0.65)", last.LearnedAUC, last.BaselineAUC)
	}
	if res.Lift < 1.3 {
		t.Errorf("engagement per session rose %.2f× from the first round to the last, want ≥ 1.3×", res.Lift)
	}
	for _, f := range []string{"learn.md", "learn.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if !strings.Contains(out.String(), "last/first") {
		t.Errorf("the command printed no lift:\n%s", out.String())
	}
}
