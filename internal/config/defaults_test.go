package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/auth"
	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen/zencache"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
)

// TestDefaultsAreTheServices holds every setting that configures a service to the service's own
// default: a default written twice drifts (the binary and the library then behave differently
// with nothing set). The only differences are the binary's documented opt-ins.
func TestDefaultsAreTheServices(t *testing.T) {
	c := DefaultConfig()
	fd := feedsvc.DefaultConfig()
	type pair struct{ Config, Service any }
	got := map[string]pair{
		"storage.hbase.table_prefix":       {c.Storage.HBase.TablePrefix, zenhbase.DefaultTablePrefix},
		"cache.ttl":                        {c.Cache.TTL.D(), zencache.DefaultTTL},
		"cache.negative_ttl":               {c.Cache.NegativeTTL.D(), zencache.DefaultNegativeTTL},
		"auth.max_token_lifetime":          {c.Auth.MaxTokenLifetime.D(), auth.DefaultMaxLifetime},
		"worker.concurrency":               {c.Worker.Concurrency, pinlater.DefaultConcurrency},
		"worker.dequeuers":                 {c.Worker.Dequeuers, pinlater.DefaultDequeuers},
		"worker.shutdown_timeout":          {c.Worker.ShutdownTimeout.D(), pinlater.DefaultShutdownTimeout},
		"worker.reclaim_after":             {c.Worker.ReclaimAfter.D(), pinlater.DefaultReclaimAfter},
		"worker.outbox_grace":              {c.Worker.OutboxGrace.D(), pinlater.DefaultOutboxGrace},
		"worker.outbox_relay_interval":     {c.Worker.OutboxRelayInterval.D(), pinlater.DefaultRelayInterval},
		"worker.feature_ttl":               {c.Worker.FeatureTTL.D(), worker.DefaultFeatureTTL},
		"worker.active_ttl":                {c.Worker.ActiveTTL.D(), worker.DefaultActiveTTL},
		"feed.generator_deadline":          {c.Feed.GeneratorDeadline.D(), fd.GeneratorDeadline},
		"feed.persist_timeout":             {c.Feed.PersistTimeout.D(), fd.PersistTimeout},
		"feed.max_items":                   {c.Feed.MaxItems, fd.MaxItems},
		"feed.prepared_max_age":            {c.Feed.PreparedMaxAge.D(), fd.PreparedMaxAge},
		"feed.inline_materialize":          {c.Feed.InlineMaterialize, fd.InlineMaterialize},
		"feed.max_inflight":                {c.Feed.MaxInflight, fd.MaxInflight},
		"feed.admission_wait":              {c.Feed.AdmissionWait.D(), fd.AdmissionWait},
		"feed.background_gap_wait":         {c.Feed.BackgroundGapWait.D(), feedsvc.DefaultQuietBound},
		"feed.hedge":                       {c.Feed.Hedge, hedge.DefaultPolicy()},
		"feed.prepare_after (opt-in)":      {c.Feed.PrepareAfter.D(), fd.PrepareAfter + DefaultPrepareAfter},
		"feed.min_chunk_interval (opt-in)": {c.Feed.MinChunkInterval.D(), fd.MinChunkInterval + DefaultMinChunkInterval},
	}
	for key, p := range got {
		if diff := cmp.Diff(p.Service, p.Config); diff != "" {
			t.Errorf("%s: the binary's default is not the service's (-service +config):\n%s", key, diff)
		}
	}
	// The opt-ins are opt-ins: the library leaves them off.
	if fd.PrepareAfter != 0 || fd.MinChunkInterval != 0 {
		t.Errorf("feedsvc.DefaultConfig turns on PrepareAfter %v or MinChunkInterval %v: drop the binary's opt-in (DefaultPrepareAfter, DefaultMinChunkInterval)",
			fd.PrepareAfter, fd.MinChunkInterval)
	}
}
