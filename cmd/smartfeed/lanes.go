package main

import (
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quiet"
)

// backgroundLanes is feed.background_lanes, with its default by backend: feedsvc's own (half the
// processors) on Pebble, whose reads and writes are this process's processors; no bound on HBase,
// where the read path's background work waits on RPCs and half the processors as lanes would
// hold preparations to a few a second.
func backgroundLanes(c config.Config) int {
	switch {
	case c.Feed.BackgroundLanes != 0:
		return c.Feed.BackgroundLanes
	case c.Storage.Backend == config.BackendHBase:
		return feedsvc.MaxBackgroundLanes
	}
	return feedsvc.DefaultBackgroundLanes()
}

// sharedLanes are the process's background lanes (backgroundLanes of them), made on first use:
// the feed service's background work takes them, and so do the worker's fanout deliveries when
// the process serves pages too.
func (a *app) sharedLanes() *quiet.Lanes {
	if a.lanes == nil {
		a.lanes = quiet.NewLanes(backgroundLanes(a.cfg), quiet.Nice(a.cfg.Feed.BackgroundNice))
		if _, err := a.lanes.Priority(); err != nil {
			a.log.Warn("background lanes run at the process's priority", zap.Int("feed.background_nice", a.cfg.Feed.BackgroundNice), zap.Error(err))
		}
	}
	return a.lanes
}
