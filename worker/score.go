package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/zen"
)

// Features are the inputs of a score: everything a Scorer may look at. They are read from the
// event and the store once per (receiver, pin); a Scorer is a pure function of them, so a retried
// task with the same inputs writes the same pool row.
type Features struct {
	Source zen.Source
	// AgeHours is the pin's age at the moment of the event that brought it to the receiver (0 for
	// a fresh fanout; the time between the pin's creation and the follow for a backfill). It is
	// measured against the event, never against the wall clock, so a retry scores the same.
	AgeHours float64
	// Affinity is how many of the author's pins the receiver saved or liked before.
	Affinity float64
	// Saves and Likes are the pin's popularity: the boards holding it and its likers.
	Saves, Likes int64
	// InterestMatch is the fraction (0..1) of the pin's interests the receiver follows.
	InterestMatch float64
	// CoOccurrence is, for related pins, the number of boards the candidate shares with the pin
	// the receiver saved (0 for other sources).
	CoOccurrence float64
	// Repin is set when the pin reached the receiver through a repin rather than a new pin.
	Repin bool
	// User is the receiver (a Scorer may pick its model by the user's experiment arm).
	User zen.ID
	// EngAuthor, EngBoard, EngInterest and EngSource are the receiver's decayed engagement
	// affinities (engagement.Profile) for the pin's author, board, strongest interest and
	// source; negative after hides, 0 without engagement.
	EngAuthor, EngBoard, EngInterest, EngSource float64
	// HiddenAuthor is set when the receiver hid a pin of the pin's author.
	HiddenAuthor bool
}

// Inputs are the features as the engagement package keeps and scores them.
func (f Features) Inputs() engagement.Inputs {
	return engagement.Inputs{Source: f.Source.String(), AgeHours: f.AgeHours, Affinity: f.Affinity,
		Saves: f.Saves, Likes: f.Likes, InterestMatch: f.InterestMatch, CoOccurrence: f.CoOccurrence,
		Repin: f.Repin, EngAuthor: f.EngAuthor, EngBoard: f.EngBoard, EngInterest: f.EngInterest,
		EngSource: f.EngSource, HiddenAuthor: f.HiddenAuthor}
}

// Scorer turns features into a score: higher is better. It must be deterministic and never
// return NaN.
type Scorer interface {
	Score(f Features) float64
}

// Weights are the coefficients of the default logistic model:
//
//	z = Bias + Source[src]
//	  + Recency · 2^(−AgeHours / RecencyHalfLifeHours)
//	  + Affinity · ln(1 + affinity)
//	  + Popularity · ln(1 + saves + likes)
//	  + InterestMatch · match
//	  + CoOccurrence · ln(1 + co-occurrence)
//	  + Repin · [repin]
//	  + EngAuthor · slog(eng_author) + EngBoard · slog(eng_board)
//	  + EngInterest · slog(eng_interest) + EngSource · slog(eng_source)
//	  + HiddenAuthor · [hidden author]
//	score = 1 / (1 + e^−z)
//
// where slog(v) = sign(v)·ln(1 + |v|). The engagement terms are 0 for a user without
// engagement, so such a user's scores are those of the model without them.
//
// The score lies in (0, 1). Weights are read from a JSON file (LoadWeights); fields absent from
// the file keep their defaults (DefaultWeights).
type Weights struct {
	Bias                 float64            `json:"bias"`
	Source               map[string]float64 `json:"source"` // keys: following, interest, related
	Recency              float64            `json:"recency"`
	RecencyHalfLifeHours float64            `json:"recency_half_life_hours"`
	Affinity             float64            `json:"affinity"`
	Popularity           float64            `json:"popularity"`
	InterestMatch        float64            `json:"interest_match"`
	CoOccurrence         float64            `json:"co_occurrence"`
	Repin                float64            `json:"repin"`
	EngAuthor            float64            `json:"eng_author"`
	EngBoard             float64            `json:"eng_board"`
	EngInterest          float64            `json:"eng_interest"`
	EngSource            float64            `json:"eng_source"`
	HiddenAuthor         float64            `json:"hidden_author"`
}

// DefaultWeights are the weights used when no file is given: following beats interests beats
// related at equal features; a day-old pin has lost half of its recency bonus; each doubling of
// affinity or popularity adds a constant amount.
func DefaultWeights() Weights {
	return Weights{
		Bias:                 -2.0,
		Source:               map[string]float64{"following": 1.0, "interest": 0.5, "related": 0.3},
		Recency:              2.0,
		RecencyHalfLifeHours: 24,
		Affinity:             0.8,
		Popularity:           0.3,
		InterestMatch:        1.0,
		CoOccurrence:         0.5,
		Repin:                -0.2,
		EngAuthor:            0.6,
		EngBoard:             0.3,
		EngInterest:          0.3,
		EngSource:            0.2,
		HiddenAuthor:         -4,
	}
}

// Validate refuses weights that could produce NaN or a meaningless model.
func (w Weights) Validate() error {
	vals := map[string]float64{"bias": w.Bias, "recency": w.Recency, "recency_half_life_hours": w.RecencyHalfLifeHours,
		"affinity": w.Affinity, "popularity": w.Popularity, "interest_match": w.InterestMatch,
		"co_occurrence": w.CoOccurrence, "repin": w.Repin, "eng_author": w.EngAuthor, "eng_board": w.EngBoard,
		"eng_interest": w.EngInterest, "eng_source": w.EngSource, "hidden_author": w.HiddenAuthor}
	for k, v := range w.Source {
		if _, err := zen.ParseSource(k); err != nil {
			return fmt.Errorf("weights: %w", err)
		}
		vals["source."+k] = v
	}
	for k, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("weights: %s is %v", k, v)
		}
	}
	if w.RecencyHalfLifeHours <= 0 {
		return fmt.Errorf("weights: recency_half_life_hours %v must be > 0", w.RecencyHalfLifeHours)
	}
	return nil
}

// LoadWeights reads a JSON weights file over the defaults. Unknown fields are refused, so a typo
// does not silently leave a default in place.
func LoadWeights(path string) (Weights, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Weights{}, fmt.Errorf("load weights: %w", err)
	}
	return ParseWeights(b)
}

// ParseWeights decodes JSON weights over the defaults (see LoadWeights).
func ParseWeights(b []byte) (Weights, error) {
	w := DefaultWeights()
	src := w.Source
	w.Source = nil
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Weights{}, fmt.Errorf("parse weights: %w", err)
	}
	if dec.More() {
		return Weights{}, fmt.Errorf("parse weights: trailing data")
	}
	for k, v := range w.Source {
		src[k] = v
	}
	w.Source = src
	if err := w.Validate(); err != nil {
		return Weights{}, err
	}
	return w, nil
}

// LogisticScorer is the default Scorer: the weighted logistic model documented on Weights.
type LogisticScorer struct {
	W Weights
}

// Score implements Scorer.
func (s *LogisticScorer) Score(f Features) float64 {
	w := s.W
	z := w.Bias + w.Source[f.Source.String()]
	age := math.Max(0, f.AgeHours)
	z += w.Recency * math.Exp2(-age/w.RecencyHalfLifeHours)
	z += w.Affinity * math.Log1p(math.Max(0, f.Affinity))
	z += w.Popularity * math.Log1p(float64(max(0, f.Saves)+max(0, f.Likes)))
	z += w.InterestMatch * clamp01(f.InterestMatch)
	z += w.CoOccurrence * math.Log1p(math.Max(0, f.CoOccurrence))
	if f.Repin {
		z += w.Repin
	}
	z += w.engagementTerms(f)
	sc := 1 / (1 + math.Exp(-z))
	if math.IsNaN(sc) {
		return 0
	}
	return sc
}

func clamp01(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	return math.Min(1, x)
}
