package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/genclient"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/generator"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/quiet"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// The feed role's wiring: the feed service over the primary and standby feed tables, its
// generator (in process or remote) and what answers include_objects.

// buildFeed builds the feed service of this process.

func (a *app) buildFeed(ctx context.Context) error {
	// The standby first: with HBase's replication its table must exist before the primary's
	// first edits ship.
	standby, err := a.stores.table(ctx, storeStandby, tableFeed)
	if err != nil {
		return err
	}
	primary, err := a.stores.table(ctx, storePrimary, tableFeed)
	if err != nil {
		return err
	}
	a.faults = [2]*faults.Table{faults.Wrap(primary, 1), faults.Wrap(standby, 2)}
	var writeTo zen.Table
	var lag feedsvc.Lagger
	if a.cfg.Storage.Backend == config.BackendHBase && a.cfg.Storage.HBase.NativeReplication() {
		// HBase ships the primary's WAL to the standby: the service writes the primary only and
		// measures the lag with a canary row.
		a.canary, err = feedsvc.NewCanary(a.faults[0], a.faults[1], feedsvc.CanaryOptions{
			Logger: a.log.Named("canary"), Registerer: a.reg})
		if err != nil {
			return fmt.Errorf("replication canary: %w", err)
		}
		writeTo, lag, a.standbyFlush = a.faults[0], a.canary, a.canary.Flush
	} else {
		a.repl, err = feedsvc.NewReplicator(a.faults[0], a.faults[1], feedsvc.ReplicatorOptions{
			Logger: a.log.Named("replicator"), Registerer: a.reg})
		if err != nil {
			return fmt.Errorf("replicator: %w", err)
		}
		writeTo, lag, a.standbyFlush = a.repl, a.repl, a.repl.Flush
	}
	gate, err := feedsvc.NewStalenessGate(a.faults[1], lag, a.cfg.Feed.StandbyMaxStaleness.D(), a.reg)
	if err != nil {
		return fmt.Errorf("standby staleness gate: %w", err)
	}
	hedger, err := hedge.New(a.cfg.Feed.Hedge, hedge.Options{Registerer: a.reg, Logger: a.log.Named("hedge")})
	a.hedger = hedger
	if err != nil {
		return fmt.Errorf("hedge policy: %w", err)
	}
	gen, remote, err := a.feedGenerator()
	if err != nil {
		return err
	}

	fc := feedConfig(a.cfg)
	a.feedPrimary, a.feedStandby = writeTo, gate
	deps := feedsvc.Deps{Primary: writeTo, Standby: gate, StandbyGate: gate, Generator: gen,
		Enqueuer: feedsvc.PinlaterEnqueuer{Client: a.pinClient}, Hedger: hedger,
		Logger: a.log.Named("feedsvc"), Registerer: a.reg, BackgroundLanes: backgroundLanes(a.cfg), Lanes: a.sharedLanes(), HeadCacheBytes: a.cfg.Feed.HeadCacheBytes()}
	// Deleted pins are filtered on read, and prepared chunks are checked against the removals
	// (unfollows, deletes), against the graph: this process's own (the main store), or, for a
	// feed process with a remote generator, the generator process's, through its CheckPins.
	switch {
	case a.graph != nil:
		// Deleted pins are known from the graph's deletion log (a.delLog: past the cache).
		hides := a.feedHides(ctx)
		deps.Liveness = withHidingLiveness(a.deleted, hides)
		deps.Eligibility = withHidingEligibility(graphEligibility{g: a.graph, deleted: a.deleted}, hides)
	case remote != nil:
		deps.Liveness, deps.Eligibility = *remote, *remote
	}
	// Activity (last-active time, rebuild of a returning user): the worker's Touch in this
	// process, or a pinlater "touch" task the worker's process runs.
	deps.Activity = feedsvc.PinlaterActivity{Client: a.pinClient}
	if a.worker != nil {
		deps.Activity = a.worker
	}
	if wait := a.cfg.Feed.BackgroundGapWait.D(); wait > 0 {
		if a.quiet, err = quiet.New(0, a.reg); err != nil {
			return fmt.Errorf("quiet gate: %w", err)
		}
		deps.Quiet, deps.QuietBound = a.quiet, wait
	}
	a.feed, err = feedsvc.New(deps, fc)
	if err != nil {
		return fmt.Errorf("feedsvc: %w", err)
	}
	return nil
}

// feedConfig is the feed service's configuration in cfg.
func feedConfig(cfg config.Config) feedsvc.Config {
	fc := feedsvc.DefaultConfig()
	fc.GeneratorDeadline, fc.MaxItems = cfg.Feed.GeneratorDeadline.D(), cfg.Feed.MaxItems
	fc.PersistTimeout = cfg.Feed.PersistTimeout.D()
	fc.PrepareAfter, fc.PreparedMaxAge = cfg.Feed.PrepareAfter.D(), cfg.Feed.PreparedMaxAge.D()
	fc.PrepareReturning = cfg.Feed.PrepareReturning
	fc.InlineMaterialize, fc.MinChunkInterval = cfg.Feed.InlineMaterialize, cfg.Feed.MinChunkInterval.D()
	fc.MaxInflight, fc.AdmissionWait = cfg.Feed.MaxInflight, cfg.Feed.AdmissionWait.D()
	fc.MaxGenerating = cfg.Feed.MaxGenerating
	if fc.MaxGenerating == 0 && cfg.Storage.Backend == config.BackendHBase {
		// On HBase a generator call waits on the region servers, not on this process's
		// processors: a bound would defer pages well below saturation, as a bound on the
		// background lanes would (backgroundLanes).
		fc.MaxGenerating = feedsvc.MaxMaxInflight
	}
	return fc
}

// feedGenerator returns the generator the feed calls for first pages, and sets a.inflight to it
// and a.objects to the graph that answers include_objects: this process's own, or, without one,
// a client of the generator process at --generator-addr (also returned as remote, which checks
// pins against that process's graph) and of the GraphService reads that process serves.
func (a *app) feedGenerator() (gen feedsvc.Generator, remote *genclient.Client, err error) {
	if a.gen != nil {
		a.inflight = localGenerator{a.gen}
		a.objects = graphObjects{a.graph}
		return localGenerator{a.gen}, nil, nil
	}
	creds, err := a.generatorCreds()
	if err != nil {
		return nil, nil, fmt.Errorf("generator client: %w", err)
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append(a.traceDial(), grpc.WithTransportCredentials(creds))
	if f := a.cfg.Generator.TokenFile; f != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(&fileToken{path: f}))
	}
	conn, err := grpc.NewClient(a.cfg.Generator.Addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("generator client %s: %w", a.cfg.Generator.Addr, err)
	}
	a.conns = append(a.conns, conn)
	rg := genclient.New(generatorv1.NewGeneratorServiceClient(conn), generator.MaxCheckPins)
	a.inflight = rg
	a.objects = feedsvc.RemoteObjects{Client: graphv1.NewGraphServiceClient(conn)}
	return rg, &rg, nil
}
