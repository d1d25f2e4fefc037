package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/engagementsvc"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// modelCheckEvery is how often the worker looks at the model file for a new version.
const modelCheckEvery = 2 * time.Second

// engagementStore opens the engagement table (shard-keyed, in the main store or routed).
func (a *app) engagementStore(ctx context.Context) (*engagement.Store, error) {
	t, err := a.shardTable(ctx, engagement.Table)
	if err != nil {
		return nil, err
	}
	return engagement.NewStore(t, 0, nil), nil
}

// experiment is the configured split of users between the default and learned arms.
func (a *app) experiment() engagement.Experiment {
	e := engagement.Experiment{Salt: a.cfg.Engagement.Salt, LearnedPercent: a.cfg.Engagement.LearnedPercent}
	if a.cfg.Engagement.ModelFile == "" {
		e.LearnedPercent = 0
	}
	return e
}

// scoringOptions adds engagement to the worker's options: the online features, and, with a
// model file, the experiment scorer that serves it to the learned arm. The model in use is a
// metric (smartfeed_model_info) and every refused file is logged and counted.
func (a *app) scoringOptions(ctx context.Context, opts *worker.Options) error {
	store, err := a.engagementStore(ctx)
	if err != nil {
		return err
	}
	exp := a.experiment()
	if err := exp.Validate(); err != nil {
		return fmt.Errorf("engagement: %w", err)
	}
	opts.Engagement, opts.Experiment, opts.NoOnlineFeatures = store, exp, !a.cfg.Engagement.OnlineFeatures
	armModel := a.experimentArms(exp) // wire_impressions.go
	f := a.cfg.Engagement.ModelFile
	if f == "" {
		return nil
	}
	fa := promauto.With(a.reg)
	info := fa.NewGaugeVec(prometheus.GaugeOpts{Name: "smartfeed_model_info",
		Help: "The learned model in use (1), by model name@version; the learned arm's share is smartfeed_model_learned_percent."}, []string{"model"})
	fa.NewGauge(prometheus.GaugeOpts{Name: "smartfeed_model_learned_percent", Help: "Percent of users in the learned arm."}).Set(float64(exp.LearnedPercent))
	refused := fa.NewCounter(prometheus.CounterOpts{Name: "smartfeed_model_refused_total",
		Help: "Model files refused (wrong features, NaN weights, unreadable): the model in use kept serving."})
	live, err := engagement.NewLive(f)
	if err != nil {
		return fmt.Errorf("engagement: model file: %w", err)
	}
	log := a.log.Named("model")
	live.OnChange = func(m *engagement.Model, err error) {
		if err != nil {
			refused.Inc()
			log.Error("model file refused; the model in use keeps serving", zap.String("file", f), zap.Error(err))
			return
		}
		info.Reset()
		info.WithLabelValues(m.Label()).Set(1)
		armModel(m.Label())
		log.Info("model loaded", zap.String("file", f), zap.String("model", m.Label()))
	}
	live.OnChange(live.Model(), nil)
	def := opts.Scorer
	if def == nil {
		def = &worker.LogisticScorer{W: worker.DefaultWeights()}
	}
	opts.Scorer = &worker.ExperimentScorer{Default: def, Live: live, Experiment: exp}
	return nil
}

// relayAndWatch runs the outbox relay, and the model file's watch when the worker scores with
// one, until ctx ends.
func (a *app) relayAndWatch(ctx context.Context) {
	if a.worker != nil {
		if es, ok := a.worker.Scorer().(*worker.ExperimentScorer); ok {
			done := make(chan struct{})
			go func() { es.Live.Watch(ctx, modelCheckEvery); close(done) }()
			defer func() { <-done }()
		}
	}
	a.durable.Relay(ctx)
}

// registerEngagement registers EngagementService on the public port: batches through the
// outbox, hides written to the hide set at once. The table and the experiment were opened and
// checked when the worker was built (scoringOptions), so an error here is only logged.
func (a *app) registerEngagement(ctx context.Context) {
	store, err := a.engagementStore(ctx)
	if err == nil {
		var svc *engagementsvc.Service
		svc, err = engagementsvc.New(a.durable, engagementsvc.Options{Hides: store, Authors: pinAuthors{a.graph},
			Experiment: a.experiment(), Logger: a.log.Named("engagement"), Registerer: a.reg})
		if err == nil {
			svc.Register(a.grpc)
			return
		}
	}
	a.log.Error("EngagementService not registered", zap.Error(err))
}

// pinAuthors answers engagementsvc.Authors from the graph.
type pinAuthors struct{ g *zen.Graph }

func (p pinAuthors) Author(ctx context.Context, pin zen.ID) (zen.ID, error) {
	o, err := p.g.Get(ctx, pin)
	if err != nil {
		return 0, fmt.Errorf("pin %d: %w", pin, err)
	}
	a, _ := zen.DataID(o.Data, "author")
	return a, nil
}

// hidingPools is the generator's pools filtered by the users' hide sets (the pools alone when
// the engagement table cannot be opened, which is logged).
func (a *app) hidingPools(ctx context.Context) generator.Pools {
	store, err := a.engagementStore(ctx)
	if err != nil {
		a.log.Error("engagement table: the generator serves without hide sets", zap.Error(err))
		return a.pools
	}
	return generator.NewHidingPools(a.pools, store)
}

// hiddenPins answers what a user hid (engagement.HideCache: one point read per call while the
// user's hide set is unchanged).
type hiddenPins interface {
	HiddenPins(ctx context.Context, user zen.ID) (map[zen.ID]bool, error)
}

// feedHides is the feed's view of the users' hide sets: one cache for both filters (nil when the
// engagement table cannot be opened, which is logged: pages are served without hide sets).
func (a *app) feedHides(ctx context.Context) hiddenPins {
	store, err := a.engagementStore(ctx)
	if err != nil {
		a.log.Error("engagement table: feed pages and prepared chunks are served without hide sets", zap.Error(err))
		return nil
	}
	return engagement.NewHideCache(store, 0)
}

// hidingLiveness is the feed's Liveness that also leaves out, from a user's pages, the pins the
// user hid (feedsvc.ReaderOf names the user).
type hidingLiveness struct {
	inner feedsvc.Liveness
	hides hiddenPins
}

func withHidingLiveness(inner feedsvc.Liveness, hides hiddenPins) feedsvc.Liveness {
	if hides == nil {
		return inner
	}
	return hidingLiveness{inner: inner, hides: hides}
}

func (h hidingLiveness) Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	live, err := h.inner.Live(ctx, pins)
	if err != nil {
		return nil, err
	}
	user, ok := feedsvc.ReaderOf(ctx)
	if !ok {
		return live, nil
	}
	hidden, err := h.hides.HiddenPins(ctx, user)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("hide set of %d", user), err)
	}
	for _, p := range pins {
		if hidden[p] && live[p] {
			live[p] = false
		}
	}
	return live, nil
}

// hidingEligibility is the feed's Eligibility that also removes, from a user's prepared chunks,
// the pins the user hid after the chunk was composed.
type hidingEligibility struct {
	inner feedsvc.Eligibility
	hides hiddenPins
}

func withHidingEligibility(inner feedsvc.Eligibility, hides hiddenPins) feedsvc.Eligibility {
	if hides == nil {
		return inner
	}
	return hidingEligibility{inner: inner, hides: hides}
}

func (h hidingEligibility) Removed(ctx context.Context, user zen.ID, items []feedsvc.Item) (map[zen.ID]bool, error) {
	out, err := h.inner.Removed(ctx, user, items)
	if err != nil {
		return nil, err
	}
	hidden, err := h.hides.HiddenPins(ctx, user)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("hide set of %d", user), err)
	}
	if out == nil {
		out = map[zen.ID]bool{}
	}
	for _, it := range items {
		if hidden[it.Pin] {
			out[it.Pin] = true
		}
	}
	return out, nil
}
