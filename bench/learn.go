package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// The learning loop's ground truth (the "learn" profile): simulated users with latent interests
// engage with pins by a probability given by them, the feed ranks with the serving model over the
// online features engagement builds, and the model is retrained from the impression log after
// every round. It measures what the issue asks of a feed that learns: the learned model's
// held-out AUC against the default weights', and engagement per session by round.

// LearnConfig shapes the simulation.
type LearnConfig struct {
	Users, Authors, Topics int
	PinsPerAuthor          int
	Candidates             int // pins offered to a session (from the followed authors)
	Served                 int // pins a session shows
	Rounds                 int
	Seed                   uint64
	// Default is the model serving before any training (the worker's weights as a model).
	Default *engagement.Model
	// Baseline, when set, is also evaluated each round: the weights without their engagement
	// terms, the fixed model of a feed that records no engagement.
	Baseline *engagement.Model
}

// DefaultLearnConfig is the profile's default shape.
func DefaultLearnConfig(def *engagement.Model) LearnConfig {
	return LearnConfig{Users: 400, Authors: 120, Topics: 12, PinsPerAuthor: 20, Candidates: 60, Served: 10,
		Rounds: 6, Seed: 61, Default: def}
}

// LearnRound is one round's figures.
type LearnRound struct {
	Round             int
	Model             string
	Sessions          int
	EngagedPerSession float64
	// AUC of the default and of the model learned after the round, on the newest 20% of the
	// impressions logged so far.
	DefaultAUC, LearnedAUC float64
	// BaselineAUC is the Baseline's (0 without one).
	BaselineAUC float64
}

// LearnResult is the outcome of RunLearn.
type LearnResult struct {
	Rounds []LearnRound
}

// Lift is the last round's engagement per session over the first's.
func (r LearnResult) Lift() float64 {
	if len(r.Rounds) == 0 || r.Rounds[0].EngagedPerSession == 0 {
		return 0
	}
	return r.Rounds[len(r.Rounds)-1].EngagedPerSession / r.Rounds[0].EngagedPerSession
}

// String is the profile's report: a table and a bar chart of engagement by round.
func (r LearnResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5s  %-16s %8s %10s %12s %11s %11s\n", "round", "serving model", "sessions", "engaged/s", "baseline AUC", "default AUC", "learned AUC")
	top := 0.0
	for _, x := range r.Rounds {
		top = math.Max(top, x.EngagedPerSession)
		fmt.Fprintf(&b, "%5d  %-16s %8d %10.3f %12.4f %11.4f %11.4f\n", x.Round, x.Model, x.Sessions, x.EngagedPerSession, x.BaselineAUC, x.DefaultAUC, x.LearnedAUC)
	}
	fmt.Fprintf(&b, "engagement per session by round (last/first = %.2f×)\n", r.Lift())
	for _, x := range r.Rounds {
		n := 0
		if top > 0 {
			n = int(math.Round(40 * x.EngagedPerSession / top))
		}
		fmt.Fprintf(&b, "%5d | %s %.3f\n", x.Round, strings.Repeat("█", n), x.EngagedPerSession)
	}
	return b.String()
}

// learnWorld is the simulated population.
type learnWorld struct {
	cfg        LearnConfig
	taste      [][]float64 // user × topic: latent interest
	follows    [][]int     // user → authors followed
	pinAuthor  []int
	pinTopic   []int
	pinSaves   []int64
	pinAgeH    []float64
	authorPins [][]int
	r          *rand.Rand
}

func newLearnWorld(c LearnConfig) *learnWorld {
	r := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	w := &learnWorld{cfg: c, r: r, authorPins: make([][]int, c.Authors)}
	for u := 0; u < c.Users; u++ {
		t := make([]float64, c.Topics)
		for k := range t {
			t[k] = -2.5 // most topics leave a user cold
		}
		for range 2 { // two strong interests
			t[r.IntN(c.Topics)] = 1.5 + r.Float64()
		}
		w.taste = append(w.taste, t)
		var fs []int
		for a := 0; a < c.Authors; a++ {
			if r.Float64() < 0.25 {
				fs = append(fs, a)
			}
		}
		w.follows = append(w.follows, fs)
	}
	for a := 0; a < c.Authors; a++ {
		main := r.IntN(c.Topics)
		for range c.PinsPerAuthor {
			topic := main
			if r.Float64() < 0.2 {
				topic = r.IntN(c.Topics)
			}
			p := len(w.pinAuthor)
			w.pinAuthor = append(w.pinAuthor, a)
			w.pinTopic = append(w.pinTopic, topic)
			// Popularity and age have nothing to do with any one user's taste.
			w.pinSaves = append(w.pinSaves, int64(math.Exp(r.Float64()*7)))
			w.pinAgeH = append(w.pinAgeH, r.Float64()*48)
			w.authorPins[a] = append(w.authorPins[a], p)
		}
	}
	return w
}

// engageProb is the ground truth: the user's taste for the pin's topic.
func (w *learnWorld) engageProb(u, p int) float64 {
	return 1 / (1 + math.Exp(-w.taste[u][w.pinTopic[p]]))
}

func learnIDs(u, p, a, topic int) (user, pin, author, board, interest zen.ID) {
	user, _ = zen.NewID(1, zen.TypeUser, uint64(1+u))
	pin, _ = zen.NewID(1, zen.TypePin, uint64(1+p))
	author, _ = zen.NewID(1, zen.TypeUser, uint64(1_000_000+a))
	board, _ = zen.NewID(1, zen.TypeBoard, uint64(1+a))
	interest, _ = zen.NewID(1, zen.TypeInterest, uint64(1+topic))
	return
}

// RunLearn runs the loop: each round every user has one session, ranked by the serving model,
// engages by the ground truth, and reports it into an engagement store (in memory); then a model
// is trained on the whole log and serves the next round.
func RunLearn(ctx context.Context, c LearnConfig) (LearnResult, error) {
	if c.Default == nil {
		return LearnResult{}, fmt.Errorf("learn: no default model")
	}
	w := newLearnWorld(c)
	t, err := zenmem.New().Table(ctx, engagement.Table)
	if err != nil {
		return LearnResult{}, err
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := engagement.NewStore(t, 0, func() time.Time { return clock })
	serving := c.Default
	var res LearnResult
	for round := 0; round < c.Rounds; round++ {
		engaged := 0
		for u := 0; u < c.Users; u++ {
			clock = clock.Add(time.Second)
			n, err := w.session(ctx, store, serving, u, round, clock)
			if err != nil {
				return res, err
			}
			engaged += n
		}
		ex, err := store.Examples(ctx)
		if err != nil {
			return res, err
		}
		tr, err := engagement.Train(ex, c.Default, engagement.TrainOptions{Version: int64(round + 1), Name: "learned",
			NowMs: clock.UnixMilli()})
		if err != nil {
			return res, err
		}
		lr := LearnRound{Round: round + 1, Model: serving.Label(), Sessions: c.Users,
			EngagedPerSession: float64(engaged) / float64(c.Users), DefaultAUC: tr.Current.AUC, LearnedAUC: tr.Learned.AUC}
		if c.Baseline != nil {
			_, test := engagement.SplitByTime(ex, 0.2)
			lr.BaselineAUC = engagement.Evaluate(c.Baseline, test).AUC
		}
		res.Rounds = append(res.Rounds, lr)
		serving = tr.Model
	}
	return res, nil
}

// session shows user u the Served best of Candidates pins of the authors they follow, by the
// serving model over the user's online features, and reports what they did.
func (w *learnWorld) session(ctx context.Context, store *engagement.Store, m *engagement.Model, u, round int, now time.Time) (int, error) {
	c := w.cfg
	var pool []int
	for _, a := range w.follows[u] {
		pool = append(pool, w.authorPins[a]...)
	}
	w.r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	pool = pool[:min(len(pool), c.Candidates)]
	user, _, _, _, _ := learnIDs(u, 0, 0, 0)
	prof, err := store.Profile(ctx, user)
	if err != nil {
		return 0, err
	}
	type cand struct {
		p     int
		in    engagement.Inputs
		score float64
	}
	nowMs, hl := now.UnixMilli(), store.HalfLife()
	cs := make([]cand, len(pool))
	for i, p := range pool {
		_, _, author, board, interest := learnIDs(u, p, w.pinAuthor[p], w.pinTopic[p])
		in := engagement.Inputs{Source: "following", AgeHours: w.pinAgeH[p], Saves: w.pinSaves[p],
			EngAuthor:    prof.Affinity(engagement.KindAuthor, uint64(author), nowMs, hl),
			EngBoard:     prof.Affinity(engagement.KindBoard, uint64(board), nowMs, hl),
			EngInterest:  prof.Affinity(engagement.KindInterest, uint64(interest), nowMs, hl),
			EngSource:    prof.Affinity(engagement.KindSource, uint64(zen.SourceFollowing), nowMs, hl),
			HiddenAuthor: prof.HidesAuthor(uint64(author))}
		cs[i] = cand{p: p, in: in, score: m.Score(in)}
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmpDesc(a.score, b.score) })
	b := engagement.Batch{User: user, RequestID: fmt.Sprintf("r%d", round), Arm: engagement.ArmLearned, Model: m.Label()}
	engaged := 0
	for pos, x := range cs[:min(len(cs), c.Served)] {
		_, pin, author, board, interest := learnIDs(u, x.p, w.pinAuthor[x.p], w.pinTopic[x.p])
		ev := engagement.Event{Pin: pin, Position: pos, AtMs: nowMs, Source: zen.SourceFollowing, Author: author,
			Board: board, Interests: []zen.ID{interest}, Inputs: x.in}
		imp := ev
		imp.Action = "impression"
		b.Events = append(b.Events, imp)
		if w.r.Float64() < w.engageProb(u, x.p) {
			ev.Action = "click"
			b.Events = append(b.Events, ev)
			engaged++
		}
	}
	_, err = store.Apply(ctx, b)
	return engaged, err
}

func cmpDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
