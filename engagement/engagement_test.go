package engagement

import (
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func newStore(t *testing.T, now func() time.Time) *Store {
	t.Helper()
	tab, err := zenmem.New().Table(t.Context(), Table)
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(tab, 24*time.Hour, now)
}

var (
	alice  = mustID(1, zen.TypeUser, 1)
	author = mustID(1, zen.TypeUser, 2)
	board  = mustID(1, zen.TypeBoard, 3)
	pin1   = mustID(1, zen.TypePin, 4)
	pin2   = mustID(1, zen.TypePin, 5)
)

// TestApplyOnce: a batch applied twice (a retried task) changes the affinities once, and the
// impression log row carries its labels.
func TestApplyOnce(t *testing.T) {
	t0 := time.UnixMilli(1_000_000_000)
	s := newStore(t, func() time.Time { return t0 })
	ctx := t.Context()
	b := Batch{User: alice, RequestID: "r1", Arm: ArmLearned, Model: "m@v1", Events: []Event{
		{Action: "impression", Pin: pin1, Position: 3, AtMs: t0.UnixMilli(), Author: author, Board: board, Inputs: Inputs{Saves: 2}},
		{Action: "save", Pin: pin1, AtMs: t0.UnixMilli(), Author: author, Board: board},
		{Action: "impression", Pin: pin2, AtMs: t0.UnixMilli(), Author: author},
	}}
	for i, want := range []bool{true, false} {
		got, err := s.Apply(ctx, b)
		if err != nil || got != want {
			t.Fatalf("apply #%d = %v, %v; want %v", i+1, got, err, want)
		}
	}
	p, err := s.Profile(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Affinity(KindAuthor, uint64(author), t0.UnixMilli(), s.HalfLife()); got != ActionWeight("save") {
		t.Errorf("author affinity %v, want %v (once)", got, ActionWeight("save"))
	}
	if got := p.Affinity(KindAuthor, uint64(author), t0.Add(24*time.Hour).UnixMilli(), s.HalfLife()); got != ActionWeight("save")/2 {
		t.Errorf("author affinity a half-life later %v, want half", got)
	}
	var rows []LogRow
	if err := s.ScanLog(ctx, func(r LogRow) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []LogRow{
		{User: uint64(alice), Pin: uint64(pin1), AtMs: t0.UnixMilli(), Arm: ArmLearned, Model: "m@v1", Position: 3, Inputs: Inputs{Saves: 2}, Labels: []string{"save"}},
		{User: uint64(alice), Pin: uint64(pin2), AtMs: t0.UnixMilli(), Arm: ArmLearned, Model: "m@v1"},
	}
	if d := cmp.Diff(want, rows); d != "" {
		t.Errorf("log rows (-want +got):\n%s", d)
	}
	if !rows[0].Engaged() || rows[1].Engaged() {
		t.Errorf("labels: engaged %v %v, want true false", rows[0].Engaged(), rows[1].Engaged())
	}
}

// TestHide: a hide puts the pin in the hide set and its author among the hidden authors.
func TestHide(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	if err := s.Hide(ctx, alice, pin1, author); err != nil {
		t.Fatal(err)
	}
	if err := s.Hide(ctx, alice, pin1, author); err != nil { // idempotent
		t.Fatal(err)
	}
	pins, authors, err := s.Hidden(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[zen.ID]bool{pin1: true}, pins); d != "" {
		t.Errorf("hidden pins (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[zen.ID]bool{author: true}, authors); d != "" {
		t.Errorf("hidden authors (-want +got):\n%s", d)
	}
	other, _, err := s.Hidden(ctx, author)
	if err != nil || len(other) != 0 {
		t.Errorf("another user's hide set: %v, %v", other, err)
	}
}

func goodModel() *Model {
	w := make([]float64, len(FeatureNames))
	w[0] = -1
	return &Model{Version: 1, Name: "m", Features: slices.Clone(FeatureNames), Weights: w, RecencyHalfLifeHours: 24}
}

// TestModelRefused: a model file with other features, a NaN weight (as JSON cannot carry it,
// the word NaN is a decode error), a weight count that does not match, or a bad half-life is
// refused with an error naming the problem.
func TestModelRefused(t *testing.T) {
	ok, err := goodModel().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseModel(ok); err != nil {
		t.Fatalf("good model refused: %v", err)
	}
	s := string(ok)
	for _, tc := range []struct{ name, file, want string }{
		{"wrong features", strings.Replace(s, `"eng_author"`, `"clicks"`, 1), "features"},
		{"NaN weight", strings.Replace(s, "-1,", "NaN,", 1), "invalid character"},
		{"too few weights", strings.Replace(s, "-1,", "", 1), "14 weights for 15 features"},
		{"zero half-life", strings.Replace(s, `"recency_half_life_hours": 24`, `"recency_half_life_hours": 0`, 1), "recency_half_life_hours"},
		{"unknown field", strings.Replace(s, `"version"`, `"verzion"`, 1), "unknown field"},
	} {
		_, err := ParseModel([]byte(tc.file))
		if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrBadModel mentioning %q", tc.name, err, tc.want)
		}
	}
	m := goodModel()
	m.Weights[3] = math.NaN()
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "source_related is NaN") {
		t.Errorf("NaN weight in memory: %v", err)
	}
}

// TestLiveKeepsServing: a refused file leaves the model in use serving; a good one replaces it.
func TestLiveKeepsServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.json")
	write := func(b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m1 := goodModel()
	b, _ := m1.Marshal()
	write(b)
	l, err := NewLive(path)
	if err != nil {
		t.Fatal(err)
	}
	write([]byte(strings.Replace(string(b), `"bias"`, `"bais"`, 1)))
	if err := l.Reload(); !errors.Is(err, ErrBadModel) {
		t.Fatalf("reload of a file with wrong features: %v, want ErrBadModel", err)
	}
	if got := l.Model(); got == nil || got.Version != 1 {
		t.Fatalf("after a refused file the model is %+v, want version 1 still", got)
	}
	m2 := goodModel()
	m2.Version = 2
	b, _ = m2.Marshal()
	write(b)
	if err := l.Reload(); err != nil || l.Model().Version != 2 {
		t.Fatalf("reload of a good file: %v, version %d", err, l.Model().Version)
	}
}

// TestArmsStable: a user's arm is a function of the salt and the user only, pinned by these
// vectors, so every process (and every release) agrees; the split follows the percentage.
func TestArmsStable(t *testing.T) {
	e := Experiment{Salt: "exp1", LearnedPercent: 10}
	got := []int{e.Bucket(1), e.Bucket(alice), e.Bucket(author), e.Bucket(241294492511762325)}
	if d := cmp.Diff([]int{bucketOf("exp1:1"), bucketOf("exp1:" + alice.String()), bucketOf("exp1:" + author.String()), bucketOf("exp1:241294492511762325")}, got); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{goldenBuckets[0], goldenBuckets[1]}, []int{e.Bucket(1), e.Bucket(241294492511762325)}); d != "" {
		t.Errorf("golden buckets changed (-want +got):\n%s", d)
	}
	learned := 0
	for u := range 10000 {
		if e.ArmOf(zen.ID(u+1)) == ArmLearned {
			learned++
		}
	}
	if learned < 850 || learned > 1150 {
		t.Errorf("%d of 10000 users in the learned arm, want about 1000", learned)
	}
}

// TestFitLearns: on impressions whose engagement depends on the author affinity and not on
// popularity, the fitted model ranks them better than the default-like model, on newer data.
func TestFitLearns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ex []Example
	for i := range 4000 {
		in := Inputs{Source: "following", Saves: int64(r.IntN(100)), EngAuthor: r.Float64()*6 - 3, AgeHours: r.Float64() * 48}
		p := 1 / (1 + math.Exp(-(2*slog(in.EngAuthor) - 1)))
		y := 0.0
		if r.Float64() < p {
			y = 1
		}
		ex = append(ex, Example{In: in, Y: y, AtMs: int64(i)})
	}
	cur := goodModel()
	cur.Weights[6] = 0.3 // popularity only
	res, err := Train(ex, cur, TrainOptions{Version: 2, Name: "learned"})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.String())
	if res.Learned.AUC < 0.75 || res.Current.AUC > 0.6 || !res.Better {
		t.Errorf("learned AUC %.3f (want ≥ 0.75), current %.3f (want ≤ 0.6)", res.Learned.AUC, res.Current.AUC)
	}
	if res.Learned.LogLoss >= res.Current.LogLoss {
		t.Errorf("learned log-loss %.3f not below current %.3f", res.Learned.LogLoss, res.Current.LogLoss)
	}
	if err := res.Model.Validate(); err != nil {
		t.Error(err)
	}
}

func TestAUC(t *testing.T) {
	for _, tc := range []struct {
		s, y []float64
		want float64
	}{
		{[]float64{0.1, 0.9}, []float64{0, 1}, 1},
		{[]float64{0.9, 0.1}, []float64{0, 1}, 0},
		{[]float64{0.5, 0.5}, []float64{0, 1}, 0.5},
		{[]float64{0.1, 0.4, 0.35, 0.8}, []float64{0, 0, 1, 1}, 0.75},
	} {
		if got := AUC(tc.s, tc.y); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("AUC(%v, %v) = %v, want %v", tc.s, tc.y, got, tc.want)
		}
	}
}

func bucketOf(s string) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum64() % 100)
}

// goldenBuckets are the buckets of users 1 and 241294492511762325 under salt "exp1".
var goldenBuckets = [2]int{74, 72}

func mustID(shard uint16, typ zen.Type, local uint64) zen.ID {
	id, err := zen.NewID(shard, typ, local)
	if err != nil {
		panic(err)
	}
	return id
}
