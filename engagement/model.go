package engagement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// Inputs are the raw features of one (user, pin) at scoring time: the worker's scoring
// features, and the user's online features for the pin. They are what the impression log keeps,
// so a model can be trained on them with any transformation.
type Inputs struct {
	Source        string  `json:"source"` // a zen source name
	AgeHours      float64 `json:"age_hours"`
	Affinity      float64 `json:"affinity"`
	Saves         int64   `json:"saves"`
	Likes         int64   `json:"likes"`
	InterestMatch float64 `json:"interest_match"`
	CoOccurrence  float64 `json:"co_occurrence"`
	Repin         bool    `json:"repin,omitempty"`
	// The user's decayed engagement affinities for the pin's author, board, interests (the
	// strongest of them) and source; negative after hides.
	EngAuthor   float64 `json:"eng_author"`
	EngBoard    float64 `json:"eng_board"`
	EngInterest float64 `json:"eng_interest"`
	EngSource   float64 `json:"eng_source"`
	// HiddenAuthor: the user hid a pin of the pin's author.
	HiddenAuthor bool `json:"hidden_author,omitempty"`
}

// FeatureNames names the entries of Vector, in order: a model file lists exactly these.
var FeatureNames = []string{
	"bias", "source_following", "source_interest", "source_related", "recency", "affinity",
	"popularity", "interest_match", "co_occurrence", "repin",
	"eng_author", "eng_board", "eng_interest", "eng_source", "hidden_author",
}

// Vector is the feature vector of in (see FeatureNames):
//
//	bias                 1
//	source_<s>           1 for the pin's source, else 0
//	recency              2^(−age_hours / half-life)
//	affinity             ln(1 + affinity)
//	popularity           ln(1 + saves + likes)
//	interest_match       the fraction of the pin's interests the user follows, in [0, 1]
//	co_occurrence        ln(1 + co_occurrence)
//	repin                1 for a repin
//	eng_<x>              sign(v)·ln(1 + |v|) of the engagement affinity v
//	hidden_author        1 when the user hid a pin of the author
func Vector(in Inputs, halfLifeHours float64) []float64 {
	x := make([]float64, len(FeatureNames))
	x[0] = 1
	switch in.Source {
	case "interest":
		x[2] = 1
	case "related":
		x[3] = 1
	default:
		x[1] = 1
	}
	x[4] = math.Exp2(-math.Max(0, in.AgeHours) / halfLifeHours)
	x[5] = math.Log1p(math.Max(0, in.Affinity))
	x[6] = math.Log1p(float64(max(0, in.Saves) + max(0, in.Likes)))
	x[7] = clamp01(in.InterestMatch)
	x[8] = math.Log1p(math.Max(0, in.CoOccurrence))
	x[9] = b2f(in.Repin)
	x[10], x[11], x[12], x[13] = slog(in.EngAuthor), slog(in.EngBoard), slog(in.EngInterest), slog(in.EngSource)
	x[14] = b2f(in.HiddenAuthor)
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			x[i] = 0
		}
	}
	return x
}

func slog(v float64) float64 {
	if v < 0 {
		return -math.Log1p(-v)
	}
	return math.Log1p(v)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func clamp01(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	return math.Min(1, x)
}

// Metrics are a model's offline figures on a held-out set.
type Metrics struct {
	AUC      float64 `json:"auc"`
	LogLoss  float64 `json:"log_loss"`
	TestRows int     `json:"test_rows"`
}

// Model is a logistic model over Vector: score = 1 / (1 + e^−(w·x)). Its file is JSON:
//
//	{"version": 3, "name": "learned-3", "features": [FeatureNames...], "weights": [...],
//	 "recency_half_life_hours": 24, "trained_at_ms": ..., "metrics": {"auc": ..., ...}}
type Model struct {
	Version              int64     `json:"version"`
	Name                 string    `json:"name"`
	Features             []string  `json:"features"`
	Weights              []float64 `json:"weights"`
	RecencyHalfLifeHours float64   `json:"recency_half_life_hours"`
	TrainedAtMs          int64     `json:"trained_at_ms,omitempty"`
	Metrics              *Metrics  `json:"metrics,omitempty"`
}

// ErrBadModel is wrapped by every refusal of a model (file).
var ErrBadModel = errors.New("bad model")

// Validate refuses a model whose features are not FeatureNames in order, whose weights do not
// match them or are NaN or infinite, or whose half-life is not positive.
func (m *Model) Validate() error {
	if !slices.Equal(m.Features, FeatureNames) {
		return fmt.Errorf("%w: features %s, want %s", ErrBadModel, listOf(m.Features), strings.Join(FeatureNames, ","))
	}
	if len(m.Weights) != len(m.Features) {
		return fmt.Errorf("%w: %d weights for %d features", ErrBadModel, len(m.Weights), len(m.Features))
	}
	for i, w := range m.Weights {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("%w: weight of %s is %v", ErrBadModel, m.Features[i], w)
		}
	}
	if !(m.RecencyHalfLifeHours > 0) || math.IsInf(m.RecencyHalfLifeHours, 0) {
		return fmt.Errorf("%w: recency_half_life_hours %v must be > 0", ErrBadModel, m.RecencyHalfLifeHours)
	}
	if m.Version < 0 {
		return fmt.Errorf("%w: version %d", ErrBadModel, m.Version)
	}
	return nil
}

// listOf names at most 20 features, for an error message.
func listOf(fs []string) string {
	if len(fs) > 20 {
		return fmt.Sprintf("%s,... (%d)", strings.Join(fs[:20], ","), len(fs))
	}
	if len(fs) == 0 {
		return "(none)"
	}
	s := strings.Join(fs, ",")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// ParseModel decodes and validates a model file's content. Unknown fields are refused, and a
// weight written as NaN (which JSON cannot carry) is a decode error.
func ParseModel(b []byte) (*Model, error) {
	var m Model
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrBadModel)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// LoadModel reads and validates a model file.
func LoadModel(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	m, err := ParseModel(b)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	return m, nil
}

// Marshal encodes the model as its file's content (indented JSON).
func (m *Model) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode model: %w", err)
	}
	return append(b, '\n'), nil
}

// Label is how metrics and logs name the model: its name and version.
func (m *Model) Label() string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%s@v%d", m.Name, m.Version)
}

// Score is the model's score of in, in (0, 1).
func (m *Model) Score(in Inputs) float64 {
	return sigmoid(dot(m.Weights, Vector(in, m.RecencyHalfLifeHours)))
}

func dot(w, x []float64) float64 {
	var z float64
	for i := range w {
		z += w[i] * x[i]
	}
	return z
}

func sigmoid(z float64) float64 {
	s := 1 / (1 + math.Exp(-z))
	if math.IsNaN(s) {
		return 0
	}
	return s
}
