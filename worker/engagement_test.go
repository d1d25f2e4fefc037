package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// engagementWorld is newWorld with a worker that reads and writes an engagement store.
func engagementWorld(t *testing.T, opts ...func(*Options)) (*world, *engagement.Store) {
	t.Helper()
	w, store, _ := engagementWorldN(t, 2, opts...)
	return w, store
}

// engagementWorldN is engagementWorld with n followers of alice; it also returns the
// engagement table.
func engagementWorldN(t *testing.T, n int, opts ...func(*Options)) (*world, *engagement.Store, zen.Table) {
	t.Helper()
	s := zenmem.New()
	w := newWorld(t, s, Config{FeatureTTL: -1, ActiveTTL: -1}, n, nil)
	et, err := s.Table(t.Context(), engagement.Table)
	if err != nil {
		t.Fatal(err)
	}
	store := engagement.NewStore(et, 0, w.clk.now)
	q := newInlineQueue()
	o := Options{Now: w.clk.now, Engagement: store, Experiment: engagement.Experiment{Salt: "t", LearnedPercent: 0}}
	for _, f := range opts {
		f(&o)
	}
	wk, err := New(w.g, w.pools, w.state, q, Config{FeatureTTL: -1, ActiveTTL: -1}, o)
	if err != nil {
		t.Fatal(err)
	}
	wk.Register(q)
	w.w, w.q = wk, q
	return w, store, et
}

func (w *world) scoreOf(t *testing.T, user, pin zen.ID) (float64, bool) {
	t.Helper()
	es, err := w.w.Pools().Top(t.Context(), user, zen.SourceFollowing, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Pin == pin {
			return e.Score, true
		}
	}
	return 0, false
}

func (w *world) report(t *testing.T, user zen.ID, rid string, events ...pinlater.EngagementEvent) {
	t.Helper()
	for i := range events {
		events[i].AtMs = w.clk.now().UnixMilli()
	}
	task, err := pinlater.NewEngagement(pinlater.EngagementPayload{User: uint64(user), RequestID: rid, Arm: engagement.ArmDefault, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if err := handler(t, w.q, pinlater.TypeEngagement).ProcessTask(context.Background(), task); err != nil {
		t.Fatal(err)
	}
}

func (w *world) fanout(t *testing.T, pin int) {
	t.Helper()
	if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(context.Background(), w.fanoutTask(t, pin)); err != nil {
		t.Fatal(err)
	}
	if err := w.q.run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestEngagementHide: a user's hide takes the pin out of their pools for good (a later fanout
// does not put it back), and the author's next pins score lower for that user than for another
// follower at once; the impression log keeps the features of what was shown.
func TestEngagementHide(t *testing.T) {
	w, store := engagementWorld(t)
	f0, f1 := w.followers[0], w.followers[1]
	w.fanout(t, 1)
	before0, ok0 := w.scoreOf(t, f0, w.pins[1])
	before1, ok1 := w.scoreOf(t, f1, w.pins[1])
	if !ok0 || !ok1 || before0 != before1 {
		t.Fatalf("before any engagement: scores %v/%v %v/%v, want equal", before0, ok0, before1, ok1)
	}
	w.report(t, f0, "r1",
		pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(w.pins[1]), Position: 0},
		pinlater.EngagementEvent{Action: pinlater.ActionHide, Pin: uint64(w.pins[1])})
	if _, ok := w.scoreOf(t, f0, w.pins[1]); ok {
		t.Error("hidden pin still in the user's pool")
	}
	w.fanout(t, 1) // a retried or late fanout
	if _, ok := w.scoreOf(t, f0, w.pins[1]); ok {
		t.Error("a later fanout put the hidden pin back")
	}
	w.fanout(t, 2)
	s0, _ := w.scoreOf(t, f0, w.pins[2])
	s1, _ := w.scoreOf(t, f1, w.pins[2])
	if !(s0 < s1/4) {
		t.Errorf("the hidden author's next pin scores %v for the hider, %v for another follower: want much lower", s0, s1)
	}
	var rows []engagement.LogRow
	if err := store.ScanLog(t.Context(), func(r engagement.LogRow) error { rows = append(rows, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Engaged() || len(rows[0].Labels) != 1 || rows[0].Inputs.Source != "following" {
		t.Errorf("log rows %+v, want one hidden impression with its features", rows)
	}
}

// TestEngagementRaisesScores: saves of an author's pins raise that author's next pins for the
// saver only.
func TestEngagementRaisesScores(t *testing.T) {
	w, _ := engagementWorld(t)
	f0, f1 := w.followers[0], w.followers[1]
	w.fanout(t, 1)
	w.report(t, f0, "r1", pinlater.EngagementEvent{Action: pinlater.ActionSave, Pin: uint64(w.pins[1])})
	w.report(t, f0, "r1", pinlater.EngagementEvent{Action: pinlater.ActionSave, Pin: uint64(w.pins[1])}) // retried
	w.fanout(t, 2)
	s0, _ := w.scoreOf(t, f0, w.pins[2])
	s1, _ := w.scoreOf(t, f1, w.pins[2])
	if !(s0 > s1) {
		t.Errorf("after a save, the author's next pin scores %v for the saver, %v for another follower: want higher", s0, s1)
	}
}

// TestNoOnlineFeatures: with the profile reads off, a saver's scores are everyone's, and a
// hidden pin still leaves the hider's pools.
func TestNoOnlineFeatures(t *testing.T) {
	w, _ := engagementWorld(t, func(o *Options) { o.NoOnlineFeatures = true })
	f0, f1 := w.followers[0], w.followers[1]
	w.fanout(t, 1)
	w.report(t, f0, "r1", pinlater.EngagementEvent{Action: pinlater.ActionSave, Pin: uint64(w.pins[0])},
		pinlater.EngagementEvent{Action: pinlater.ActionHide, Pin: uint64(w.pins[1])})
	if _, ok := w.scoreOf(t, f0, w.pins[1]); ok {
		t.Error("hidden pin still in the user's pool")
	}
	w.fanout(t, 2)
	s0, _ := w.scoreOf(t, f0, w.pins[2])
	s1, _ := w.scoreOf(t, f1, w.pins[2])
	if s0 != s1 {
		t.Errorf("without online features the saver scores %v, another follower %v: want equal", s0, s1)
	}
}

// TestWeightsModelScoresAlike: the weights as an engagement.Model score every feature vector as
// LogisticScorer does, so train compares the learned model with the serving one fairly.
func TestWeightsModelScoresAlike(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	w := DefaultWeights()
	s, m := &LogisticScorer{W: w}, w.Model()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		f := Features{Source: zen.Source(1 + r.IntN(3)), AgeHours: r.Float64() * 100, Affinity: float64(r.IntN(20)),
			Saves: int64(r.IntN(1000)), Likes: int64(r.IntN(1000)), InterestMatch: r.Float64(), CoOccurrence: float64(r.IntN(9)),
			Repin: r.IntN(2) == 0, EngAuthor: r.NormFloat64() * 3, EngBoard: r.NormFloat64(), EngInterest: r.NormFloat64(),
			EngSource: r.NormFloat64(), HiddenAuthor: r.IntN(5) == 0}
		if a, b := s.Score(f), m.Score(f.Inputs()); math.Abs(a-b) > 1e-12 {
			t.Fatalf("features %+v: LogisticScorer %v, Model %v", f, a, b)
		}
	}
}

// TestExperimentScorerKeepsModel: the learned arm is scored with the live model; a model file
// with wrong features or a NaN weight is refused with an error saying so, and the model in use
// keeps scoring exactly as before; the default arm is scored with the weights throughout.
func TestExperimentScorerKeepsModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.json")
	m := DefaultWeights().Model()
	m.Name, m.Version = "learned", 1
	m.Weights[0] = 3 // a bias the weights do not have: scores tell the models apart
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := engagement.NewLive(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &ExperimentScorer{Default: &LogisticScorer{W: DefaultWeights()}, Live: live,
		Experiment: engagement.Experiment{Salt: "x", LearnedPercent: 50}}
	var learnedUser, defaultUser zen.ID
	for u := zen.ID(1); learnedUser == 0 || defaultUser == 0; u++ {
		if s.Experiment.ArmOf(u) == engagement.ArmLearned {
			learnedUser = u
		} else {
			defaultUser = u
		}
	}
	f := Features{Source: zen.SourceFollowing, AgeHours: 2, Saves: 3}
	fl, fd := f, f
	fl.User, fd.User = learnedUser, defaultUser
	want, wantDefault := m.Score(fl.Inputs()), (&LogisticScorer{W: DefaultWeights()}).Score(fd)
	if got := s.Score(fl); got != want {
		t.Fatalf("learned arm scores %v, want the model's %v", got, want)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"wrong features", `"eng_author"`, `"eng_autor"`, "features"},
		{"NaN weight", `"weights": [`, `"weights": [NaN, `, "invalid character 'N'"},
	} {
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), tc.from, tc.to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		err := live.Reload()
		if !errors.Is(err, engagement.ErrBadModel) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: reload error %v, want a bad model error mentioning %q", tc.name, err, tc.want)
		}
		if got := s.Score(fl); got != want {
			t.Errorf("%s: after the refused file the learned arm scores %v, want the old model's %v", tc.name, got, want)
		}
		if got := s.Score(fd); got != wantDefault {
			t.Errorf("%s: the default arm scores %v, want the weights' %v", tc.name, got, wantDefault)
		}
	}
}

// TestWantedProfilesScoreAsWhole: the fanout reads only the profile entries a pin's scores
// look up (Worker.receivers, engagement.Store.ProfilesWanted); every receiver's features, and
// so its score, are those of its whole profile read on its own (engagement.Store.Profile), for
// every source, for profiles with entries for the pin's author, board, interest and source
// among many others, hidden authors, and none; and the pools hold those scores after a fanout.
func TestWantedProfilesScoreAsWhole(t *testing.T) {
	w, store, et := engagementWorldN(t, 40)
	ctx := t.Context()
	r := rand.New(rand.NewPCG(5, 6))
	now := w.clk.now().UnixMilli()
	related := []engagement.Key{{Kind: engagement.KindAuthor, ID: uint64(w.alice)},
		{Kind: engagement.KindBoard, ID: uint64(w.travel)}, {Kind: engagement.KindInterest, ID: uint64(w.cats)},
		{Kind: engagement.KindSource, ID: uint64(zen.SourceFollowing)}, {Kind: engagement.KindSource, ID: uint64(zen.SourceInterest)},
		{Kind: engagement.KindSource, ID: uint64(zen.SourceRelated)}}
	var muts []zen.Mutation
	for i, u := range w.followers {
		if i%5 == 4 {
			continue // no profile
		}
		var p engagement.Profile
		for j := range r.IntN(60) {
			k := engagement.Key{Kind: engagement.Kind("abis"[r.IntN(4)]), ID: r.Uint64N(1 << 40)}
			if j%7 == 0 {
				k = related[r.IntN(len(related))]
			}
			p.Affinities = append(p.Affinities, engagement.AffinityEntry{Kind: k.Kind, ID: k.ID,
				V: r.NormFloat64() * 3, T: now - r.Int64N(30*24*3600_000)})
		}
		if i%3 == 0 {
			p.HiddenAuthors = append(p.HiddenAuthors, r.Uint64N(1<<40), uint64(w.alice))
		}
		v, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		k := binary.BigEndian.AppendUint64(nil, uint64(u))
		muts = append(muts, zen.Mutation{Key: append(k, 'p'), Value: v})
	}
	if err := et.Apply(ctx, muts); err != nil {
		t.Fatal(err)
	}
	// The pin as a fanout's delivery reads it (pinFacts.load).
	o, err := w.g.Get(ctx, w.pins[0])
	if err != nil {
		t.Fatal(err)
	}
	pinfo := pinFromObject(o, 0)
	pi := &pinfo
	if err := w.w.loadPinInfo(ctx, pi); err != nil || len(pi.interests) != 1 {
		t.Fatalf("pin facts %+v, %v: want the pin's interest", pi, err)
	}
	rs, err := w.w.receivers(ctx, w.followers, pi, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	engaged := 0
	for i, u := range w.followers {
		whole, err := store.Profile(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		ref := rs[i]
		ref.prof = &whole
		for _, src := range []zen.Source{zen.SourceFollowing, zen.SourceInterest, zen.SourceRelated} {
			got, want := w.w.features(rs[i], pi, src, 1800_000, 0), w.w.features(ref, pi, src, 1800_000, 0)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("receiver %d, source %v: features differ from the whole profile's (-whole +read):\n%s", i, src, diff)
			}
			if want.EngAuthor != 0 || want.EngSource != 0 || want.HiddenAuthor {
				engaged++
			}
		}
	}
	if engaged == 0 {
		t.Fatal("no receiver has an engagement feature: the test compares nothing")
	}
	w.fanout(t, 0)
	for i, u := range w.followers[:40] {
		whole, err := store.Profile(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		ref := rs[i]
		ref.prof = &whole
		want := w.w.scorer.Score(w.w.features(ref, pi, zen.SourceFollowing, 0, 0))
		if got, ok := w.scoreOf(t, u, w.pins[0]); !ok || got != want {
			t.Errorf("receiver %d: pool score %v (%v), want %v as scored with the whole profile", i, got, ok, want)
		}
	}
}
