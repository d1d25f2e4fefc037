package worker

import (
	"math"
	"slices"

	"github.com/smartfeed/smartfeed/engagement"
)

// engagementTerms is the part of the logistic model's z that the receiver's engagement adds:
// 0 without engagement.
func (w Weights) engagementTerms(f Features) float64 {
	z := w.EngAuthor*slog(f.EngAuthor) + w.EngBoard*slog(f.EngBoard) + w.EngInterest*slog(f.EngInterest) +
		w.EngSource*slog(f.EngSource)
	if f.HiddenAuthor {
		z += w.HiddenAuthor
	}
	if math.IsNaN(z) {
		return 0
	}
	return z
}

func slog(v float64) float64 {
	if v < 0 {
		return -math.Log1p(-v)
	}
	return math.Log1p(v)
}

// Model is the weights as an engagement.Model over engagement.Vector: it scores every Features
// as LogisticScorer does (TestWeightsModelScoresAlike), so `smartfeed train` can compare a
// learned model with the weights in use on the same impressions.
func (w Weights) Model() *engagement.Model {
	return &engagement.Model{Name: "weights", Features: slices.Clone(engagement.FeatureNames),
		RecencyHalfLifeHours: w.RecencyHalfLifeHours,
		Weights: []float64{w.Bias, w.Source["following"], w.Source["interest"], w.Source["related"],
			w.Recency, w.Affinity, w.Popularity, w.InterestMatch, w.CoOccurrence, w.Repin,
			w.EngAuthor, w.EngBoard, w.EngInterest, w.EngSource, w.HiddenAuthor}}
}

// Scorer returns the worker's scorer.
func (w *Worker) Scorer() Scorer { return w.scorer }

// ExperimentScorer scores each receiver with the model of its experiment arm: the learned
// model (Live) for the users the Experiment puts in engagement.ArmLearned while one is loaded,
// the Default scorer for everyone else. It is safe for concurrent use; a new model file takes
// effect at the next score.
type ExperimentScorer struct {
	Default    Scorer
	Live       *engagement.Live
	Experiment engagement.Experiment
}

// Score implements Scorer.
func (s *ExperimentScorer) Score(f Features) float64 {
	if m := s.Live.Model(); m != nil && s.Experiment.ArmOf(f.User) == engagement.ArmLearned {
		return m.Score(f.Inputs())
	}
	return s.Default.Score(f)
}
