package main

import (
	"context"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/engagementsvc"
	"github.com/smartfeed/smartfeed/feedsvc"
)

// registerFeed registers FeedService on the public port, with the impressions of its pages
// recorded when engagement.served_impressions is on.
func (a *app) registerFeed() error {
	imp, err := a.impressionOptions()
	if err != nil {
		return err
	}
	return feedsvc.RegisterFeed(a.grpc, a.feed, a.objects, a.reg, imp...)
}

// impressionOptions wires the impressions of the pages GetFeed serves
// (engagement.served_impressions) to the engagement log: through the outbox where this process
// has one (the worker's and graph's roles), else straight into pinlater's Redis (a feed
// process alone). The log is closed with the connections, before the pinlater client, so the
// pages it still holds are enqueued first (engagementsvc.ImpressionLog.Close).
func (a *app) impressionOptions() ([]feedsvc.FeedOption, error) {
	if !a.cfg.Engagement.ServedImpressions || a.pinClient == nil {
		return nil, nil
	}
	var q engagementsvc.Enqueuer = a.pinClient
	if a.durable != nil {
		q = a.durable
	}
	l, err := engagementsvc.NewImpressionLog(q, engagementsvc.ImpressionOptions{Experiment: a.experiment(),
		Logger: a.log.Named("impressions"), Registerer: a.reg})
	if err != nil {
		return nil, err
	}
	a.conns = append(a.conns, closerFunc(l.Close))
	return []feedsvc.FeedOption{feedsvc.WithImpressions(servedImpressions{l})}, nil
}

// closerFunc is an io.Closer that calls f.
type closerFunc func()

var _ io.Closer = closerFunc(nil)

func (f closerFunc) Close() error { f(); return nil }

// servedImpressions answers feedsvc.Impressions with the engagement service's impression log.
type servedImpressions struct{ l *engagementsvc.ImpressionLog }

func (s servedImpressions) Served(_ context.Context, p feedsvc.ServedPage) {
	items := make([]engagementsvc.Impression, len(p.Items))
	for i, it := range p.Items {
		items[i] = engagementsvc.Impression{Pin: it.Pin, Position: i, Fresh: it.Fresh, Source: it.Source}
	}
	s.l.Log(p.User, p.Cursor, items)
}

// experimentArms publishes smartfeed_experiment_arm_percent{arm, model}: each arm's share of
// the users and the model that scores them (the console's experiment table reads it beside
// smartfeed_engagement_events_total). The default arm is scored with the weights; learned(label)
// names the learned arm's model each time the model file is loaded.
func (a *app) experimentArms(exp engagement.Experiment) (learned func(label string)) {
	g := promauto.With(a.reg).NewGaugeVec(prometheus.GaugeOpts{Name: "smartfeed_experiment_arm_percent",
		Help: "Percent of users in each experiment arm, by arm and the model scoring it (name@version; weights: the configured weights)."},
		[]string{"arm", "model"})
	set := func(label string) {
		g.Reset()
		g.WithLabelValues(engagement.ArmDefault, "weights").Set(float64(100 - exp.LearnedPercent))
		g.WithLabelValues(engagement.ArmLearned, label).Set(float64(exp.LearnedPercent))
	}
	set("weights")
	return set
}
