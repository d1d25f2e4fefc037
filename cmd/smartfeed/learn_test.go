package main

import (
	"testing"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/worker"
)

// TestLearnLoop: on simulated users whose engagement follows latent interests, the model
// learned from the impression log ranks the newest impressions far better than the fixed
// weights without engagement terms (the baseline), and serving it raises engagement per
// session. The default weights' AUC, with their engagement terms, is reported beside them.
func TestLearnLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation of a few thousand sessions; skipped with -short")
	}
	c := bench.DefaultLearnConfig(worker.DefaultWeights().Model())
	base := worker.DefaultWeights()
	base.EngAuthor, base.EngBoard, base.EngInterest, base.EngSource, base.HiddenAuthor = 0, 0, 0, 0, 0
	c.Baseline = base.Model()
	res, err := bench.RunLearn(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.String())
	last := res.Rounds[len(res.Rounds)-1]
	if last.LearnedAUC < 0.80 || last.BaselineAUC > 0.65 {
		t.Errorf("learned AUC %.4f (want ≥ 0.80), the weights without engagement %.4f (want ≤ 0.65)", last.LearnedAUC, last.BaselineAUC)
	}
	if res.Lift() < 1.3 {
		t.Errorf("engagement per session rose %.2f× from the first round to the last, want ≥ 1.3×", res.Lift())
	}
}
