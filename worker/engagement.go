package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// Engagement: the online features a receiver's scores read, and the handler that records a
// reported batch (engagement.Store).

// engagementMetrics count the engagement the worker recorded.
type engagementMetrics struct {
	events       *prometheus.CounterVec
	skipped      prometheus.Counter
	pagesSkipped prometheus.Counter
}

func newEngagementMetrics(reg prometheus.Registerer) (*engagementMetrics, error) {
	f := promauto.With(reg)
	return &engagementMetrics{
		events: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_engagement_events_total",
			Help: "Engagement events recorded, by experiment arm and action; an arm's engagement rate is its close-ups, clicks, saves and likes over its impressions."},
			[]string{"arm", "action"}),
		skipped: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_engagement_skipped_total",
			Help: "Engagement events dropped because their pin is deleted or unknown."}),
		pagesSkipped: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_impressions_pages_skipped_total",
			Help: "Pages of an impressions task not recorded because they are invalid (a bad user, pin or source); the task's other pages are."}),
	}, nil
}

// receivers is loadReceivers with, when the worker has an engagement store, each delivered
// receiver's online features for scoring pi: one batched read of their profiles, each holding
// only the entries pi's scores look up (wantFor).
func (w *Worker) receivers(ctx context.Context, users []zen.ID, pi *pinInfo, followedInterest zen.ID, feats *featureCache) ([]receiver, error) {
	want := wantFor(pi)
	return w.readReceivers(ctx, users, pi, followedInterest, feats, &want)
}

// readReceivers is receivers with the profiles restricted to want, or whole with want nil (for
// a receiver scored for several pins).
func (w *Worker) readReceivers(ctx context.Context, users []zen.ID, pi *pinInfo, followedInterest zen.ID, feats *featureCache, want *engagement.Want) ([]receiver, error) {
	rs, err := w.loadReceivers(ctx, users, pi, followedInterest, feats)
	if err != nil || w.eng == nil || w.noOnline {
		return rs, err
	}
	us := make([]zen.ID, 0, len(rs))
	at := make([]int, 0, len(rs))
	for i := range rs {
		if rs[i].skip == "" {
			us, at = append(us, rs[i].user), append(at, i)
		}
	}
	if len(us) == 0 {
		return rs, nil
	}
	var ps []engagement.Profile
	if want != nil {
		ps, err = w.eng.ProfilesWanted(ctx, us, *want)
	} else {
		ps, err = w.eng.Profiles(ctx, us)
	}
	if err != nil {
		return nil, fmt.Errorf("read receivers: %w", err)
	}
	for j, i := range at {
		rs[i].prof = &ps[j]
	}
	return rs, nil
}

// wantFor names the profile entries engagementFeatures reads to score pi: the affinities for
// its author, board and interests, those of every source (the source is the caller's), and
// whether its author is hidden.
func wantFor(pi *pinInfo) engagement.Want {
	keys := make([]engagement.Key, 0, 2+len(pi.interests))
	keys = append(keys, engagement.Key{Kind: engagement.KindAuthor, ID: uint64(pi.author)},
		engagement.Key{Kind: engagement.KindBoard, ID: uint64(pi.board)})
	for _, in := range pi.interests {
		keys = append(keys, engagement.Key{Kind: engagement.KindInterest, ID: uint64(in)})
	}
	return engagement.Want{Keys: keys, Kinds: []engagement.Kind{engagement.KindSource}, Authors: []uint64{uint64(pi.author)}}
}

// engagementFeatures fills f's engagement features from r's profile (none: all zero).
func (w *Worker) engagementFeatures(f *Features, r receiver, pi *pinInfo) {
	p := r.prof
	if p == nil || (len(p.Affinities) == 0 && len(p.HiddenAuthors) == 0) {
		return
	}
	now, hl := w.now().UnixMilli(), w.eng.HalfLife()
	f.EngAuthor = p.Affinity(engagement.KindAuthor, uint64(pi.author), now, hl)
	f.EngBoard = p.Affinity(engagement.KindBoard, uint64(pi.board), now, hl)
	for i, in := range pi.interests {
		v := p.Affinity(engagement.KindInterest, uint64(in), now, hl)
		if i == 0 || v > f.EngInterest {
			f.EngInterest = v
		}
	}
	f.EngSource = p.Affinity(engagement.KindSource, uint64(f.Source), now, hl)
	f.HiddenAuthor = pi.author != 0 && p.HidesAuthor(uint64(pi.author))
}

// HandleEngagement records a reported batch of one user's engagement (engagement.Store.Apply):
// each event's pin is read (author, board, interests, popularity) and scored for the user as a
// fanout would now, so the impression log keeps the features the user's scores see; a hidden pin
// is also forgotten by the user's pools, so no later fanout puts it back. Events naming a
// deleted or unknown pin are dropped and counted. A batch applied before is a no-op. The user's
// engagement profile is read once for the batch: it changes only when the batch is applied.
func (w *Worker) HandleEngagement(ctx context.Context, p pinlater.EngagementPayload) error {
	user, err := checkID("engagement user", p.User, zen.TypeUser)
	if err != nil {
		return err
	}
	if done, err := w.eng.Applied(ctx, user, p.RequestID); err != nil || done {
		return err
	}
	b := engagement.Batch{User: user, RequestID: p.RequestID, Arm: p.Arm, Model: w.modelOf(p.Arm)}
	pins := map[zen.ID]*pinInfo{}
	var hidden []zen.ID
	var prof *engagement.Profile // the user's whole profile, read at its first use
	for _, e := range p.Events {
		pin, err := checkID("engagement pin", e.Pin, zen.TypePin)
		if err != nil {
			return err
		}
		src := zen.SourceFollowing
		if e.Source != "" {
			if src, err = zen.ParseSource(e.Source); err != nil {
				return invalid("engagement source: %v", err)
			}
		}
		pi, ok := pins[pin]
		if !ok {
			if pi, err = w.engagedPin(ctx, pin); err != nil {
				return err
			}
			pins[pin] = pi
		}
		if pi == nil {
			w.em.skipped.Inc()
			continue
		}
		r, err := w.engagedReceiver(ctx, user, pi, &prof)
		if err != nil {
			return fmt.Errorf("engagement of %d: %w", user, err)
		}
		f := w.features(r, pi, src, e.AtMs-pi.createdMs, 0)
		b.Events = append(b.Events, engagement.Event{Action: e.Action, Pin: pin, Position: e.Position,
			Fresh: e.Fresh, AtMs: e.AtMs, Source: src, Author: pi.author, Board: pi.board,
			Interests: pi.interests, Inputs: f.Inputs()})
		if e.Action == pinlater.ActionHide {
			hidden = append(hidden, pin)
		}
	}
	if len(hidden) > 0 {
		if _, err := w.pools.Forget(ctx, user, hidden); err != nil {
			return fmt.Errorf("engagement of %d: forget hidden pins: %w", user, err)
		}
	}
	applied, err := w.eng.Apply(ctx, b)
	if err != nil {
		return fmt.Errorf("engagement of %d: %w", user, err)
	}
	if applied {
		arm := p.Arm
		if arm == "" {
			arm = engagement.ArmDefault
		}
		for _, e := range b.Events {
			w.em.events.WithLabelValues(arm, e.Action).Inc()
		}
	}
	return nil
}

// engagedReceiver is receivers for user alone, scoring pi, with *prof as the user's online
// features: the whole profile, read into *prof the first time it is needed. The features are
// those receivers gives: engagementFeatures reads only entries of pi's author, board, interests,
// the sources and the hidden authors, all in the whole profile.
func (w *Worker) engagedReceiver(ctx context.Context, user zen.ID, pi *pinInfo, prof **engagement.Profile) (receiver, error) {
	rs, err := w.loadReceivers(ctx, []zen.ID{user}, pi, 0, w.feats)
	if err != nil {
		return receiver{}, err
	}
	r := rs[0]
	if r.skip != "" || w.eng == nil || w.noOnline {
		return r, nil
	}
	if *prof == nil {
		ps, err := w.eng.Profiles(ctx, []zen.ID{user})
		if err != nil {
			return receiver{}, fmt.Errorf("read receivers: %w", err)
		}
		*prof = &ps[0]
	}
	r.prof = *prof
	return r, nil
}

// HandleImpressions records the served pages of an impressions task, each as HandleEngagement
// records a batch: a page applied before (by this task's earlier run, or by another task that
// carried it) is a no-op. A page refused as invalid (a bad user, pin or source) is counted,
// logged and skipped, so it does not hold up the others; any other error fails the task, whose
// retry skips the pages already applied. Each page is recorded in a background lane
// (Options.Lanes), as a fanout delivery's scoring is.
func (w *Worker) HandleImpressions(ctx context.Context, p pinlater.ImpressionsPayload) error {
	for i, pg := range p.Pages {
		err := w.inLane(ctx, func() error { return w.HandleEngagement(ctx, pg) })
		switch {
		case err == nil:
		case errors.Is(err, pinlater.ErrInvalidPayload) || errors.Is(err, pinlater.SkipRetry):
			w.em.pagesSkipped.Inc()
			w.log.Warn("impressions: invalid page skipped", zap.Int("page", i),
				zap.Uint64("user", pg.User), zap.Error(err))
		default:
			return fmt.Errorf("impressions: page %d of %d: %w", i, len(p.Pages), err)
		}
	}
	return nil
}

// engagedPin reads what scoring needs of pin; nil when the pin is deleted or unknown.
func (w *Worker) engagedPin(ctx context.Context, pin zen.ID) (*pinInfo, error) {
	o, err := w.g.Get(ctx, pin)
	if errors.Is(err, zen.ErrDeleted) || errors.Is(err, zen.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engagement: get pin %d: %w", pin, err)
	}
	pi := pinFromObject(o, 0)
	if err := w.loadPinInfo(ctx, &pi); err != nil {
		return nil, fmt.Errorf("engagement: %w", err)
	}
	return &pi, nil
}

// modelOf names the model that scores for arm's users.
func (w *Worker) modelOf(arm string) string {
	if es, ok := w.scorer.(*ExperimentScorer); ok && arm == engagement.ArmLearned {
		if m := es.Live.Model(); m != nil {
			return m.Label()
		}
	}
	return "weights"
}

// inLane runs f in a background lane (Options.Lanes) when the worker has them, so that
// recording impressions, background work no reader waits for, runs at the lanes' priority and
// within their bound beside a process's pages; else it runs f as it is.
func (w *Worker) inLane(ctx context.Context, f func() error) error {
	if w.lanes == nil {
		return f()
	}
	var err error
	if lerr := w.lanes.Do(ctx, func() { err = f() }); lerr != nil {
		return fmt.Errorf("wait for a lane: %w", lerr)
	}
	return err
}
