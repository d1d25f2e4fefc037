package worker

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

func TestLogisticScorer(t *testing.T) {
	s := &LogisticScorer{W: DefaultWeights()}
	base := Features{Source: zen.SourceFollowing, AgeHours: 1, Affinity: 1, Saves: 3, Likes: 2, InterestMatch: 0.5}
	b := s.Score(base)
	if b <= 0 || b >= 1 {
		t.Fatalf("score %v outside (0, 1)", b)
	}
	if s.Score(base) != b {
		t.Fatal("same features, different score")
	}
	more := map[string]func(f *Features){
		"newer":          func(f *Features) { f.AgeHours = 0 },
		"more affinity":  func(f *Features) { f.Affinity = 10 },
		"more popular":   func(f *Features) { f.Saves = 100 },
		"interest match": func(f *Features) { f.InterestMatch = 1 },
		"co-occurrence":  func(f *Features) { f.CoOccurrence = 3 },
	}
	for name, mod := range more {
		f := base
		mod(&f)
		if got := s.Score(f); !(got > b) {
			t.Errorf("%s: score %v, want > %v", name, got, b)
		}
	}
	fi, re := base, base
	fi.Source, re.Source = zen.SourceInterest, zen.SourceRelated
	if !(s.Score(base) > s.Score(fi) && s.Score(fi) > s.Score(re)) {
		t.Errorf("source order: following %v, interest %v, related %v", s.Score(base), s.Score(fi), s.Score(re))
	}
	// Hostile features never give NaN.
	for _, f := range []Features{{AgeHours: math.NaN()}, {Affinity: math.Inf(1)}, {InterestMatch: math.NaN()}, {AgeHours: -5, Saves: -3}} {
		if v := s.Score(f); math.IsNaN(v) {
			t.Errorf("Score(%+v) is NaN", f)
		}
	}
}

func TestParseWeights(t *testing.T) {
	w, err := ParseWeights([]byte(`{"bias": -1, "source": {"related": 0.9}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultWeights()
	want.Bias = -1
	want.Source["related"] = 0.9
	if d := cmp.Diff(want, w); d != "" {
		t.Errorf("weights (-want +got):\n%s", d)
	}
	for name, in := range map[string]string{
		"unknown field":  `{"bais": 1}`,
		"unknown source": `{"source": {"trending": 1}}`,
		"zero half-life": `{"recency_half_life_hours": 0}`,
		"not json":       `{`,
		"trailing":       `{} {}`,
	} {
		if _, err := ParseWeights([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p := filepath.Join(t.TempDir(), "w.json")
	if err := os.WriteFile(p, []byte(`{"affinity": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if w, err := LoadWeights(p); err != nil || w.Affinity != 2 || w.Recency != DefaultWeights().Recency {
		t.Errorf("LoadWeights = %+v, %v", w, err)
	}
}
