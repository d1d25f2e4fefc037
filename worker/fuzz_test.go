package worker

import (
	"math"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// FuzzParseWeights: any input is either refused or gives weights whose scores are never NaN and
// stay in [0, 1].
func FuzzParseWeights(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"bias": -1, "source": {"related": 0.9}, "recency_half_life_hours": 6}`))
	f.Add([]byte(`{"affinity": 1e308, "popularity": -1e308}`))
	f.Add([]byte(`{"recency_half_life_hours": 1e-300}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ParseWeights(b)
		if err != nil {
			return
		}
		s := &LogisticScorer{W: w}
		for _, ft := range []Features{{}, {Source: zen.SourceFollowing, AgeHours: 3, Affinity: 5, Saves: 9, Likes: 1, InterestMatch: 1, CoOccurrence: 2, Repin: true}} {
			v := s.Score(ft)
			if math.IsNaN(v) || v < 0 || v > 1 {
				t.Fatalf("weights %s: score %v", b, v)
			}
		}
	})
}
