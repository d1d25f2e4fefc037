package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// WriteLearn writes the learn profile's results into dir: learn.json (every round's figures and
// the lift), learn.md (the table and the bar chart of String) and learn.png (engagement per
// session and the AUCs by round).
func WriteLearn(dir string, r LearnResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench out: %w", err)
	}
	b, err := json.MarshalIndent(struct {
		Rounds []LearnRound `json:"rounds"`
		Lift   float64      `json:"engagement_lift_last_vs_first"`
	}{r.Rounds, r.Lift()}, "", "  ")
	if err != nil {
		return fmt.Errorf("learn.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "learn.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("learn.json: %w", err)
	}
	md := "# SmartFeed bench, learn profile\n\n![engagement and AUC by round](learn.png)\n\n```text\n" + r.String() + "```\n"
	if err := os.WriteFile(filepath.Join(dir, "learn.md"), []byte(md), 0o644); err != nil {
		return fmt.Errorf("learn.md: %w", err)
	}
	return plotLearn(filepath.Join(dir, "learn.png"), r)
}

func plotLearn(path string, r LearnResult) error {
	p := plot.New()
	p.Title.Text = "Serve, engage, train: by round"
	p.X.Label.Text, p.Y.Label.Text = "round", "engaged pins per session / AUC × 10"
	var eng, learned, def plotter.XYs
	for _, x := range r.Rounds {
		eng = append(eng, plotter.XY{X: float64(x.Round), Y: x.EngagedPerSession})
		learned = append(learned, plotter.XY{X: float64(x.Round), Y: 10 * x.LearnedAUC})
		def = append(def, plotter.XY{X: float64(x.Round), Y: 10 * x.DefaultAUC})
	}
	if len(eng) > 0 {
		if err := plotutil.AddLinePoints(p, "engaged per session", eng, "learned model AUC ×10", learned,
			"serving model AUC ×10", def); err != nil {
			return err
		}
	}
	return save(p, path)
}
