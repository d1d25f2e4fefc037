package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/graphsvc"
	"github.com/smartfeed/smartfeed/pinlater"
	ingestv1 "github.com/smartfeed/smartfeed/proto/ingest/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// shardTable opens a shard-keyed table: routed by the shard map when there are extra stores,
// else the main store's.
func (a *app) shardTable(ctx context.Context, name string) (zen.Table, error) {
	if a.router == nil {
		return a.stores.table(ctx, storeMain, name)
	}
	t, err := a.router.Table(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open table %s: %w", name, err)
	}
	return t, nil
}

// buildWorker builds the worker over the main store (the graph, the pools table and the
// worker's state table) and the board service; the tasks they spawn go through the outbox and
// the pinlater client. The graph role builds them too: its Graph, Board and Ingest APIs enqueue
// through the same outbox, and a worker process runs what they enqueue.
func (a *app) buildWorker(ctx context.Context) error {
	poolsT, err := a.shardTable(ctx, tablePools)
	if err != nil {
		return err
	}
	stateT, err := a.shardTable(ctx, worker.StateTable)
	if err != nil {
		return err
	}
	opts := worker.Options{Logger: a.log.Named("worker"), Reg: a.reg}
	if f := a.cfg.Worker.WeightsFile; f != "" {
		w, err := worker.LoadWeights(f)
		if err != nil {
			return fmt.Errorf("worker: %s: %w", f, err)
		}
		opts.Scorer = &worker.LogisticScorer{W: w}
		a.log.Info("scorer weights loaded", zap.String("file", f))
	}
	if err := a.scoringOptions(ctx, &opts); err != nil {
		return err
	}
	// The write path's events go through the outbox: recorded in the main store before a call
	// answers OK, enqueued in Redis, and relayed again if Redis does not have them.
	outboxT, err := a.stores.table(ctx, storeMain, zen.OutboxTable)
	if err != nil {
		return err
	}
	a.outbox = zen.NewOutbox(outboxT)
	if a.durable, err = pinlater.NewDurableClient(a.pinClient, a.outbox, pinlater.DurableOptions{
		Grace: a.cfg.Worker.OutboxGrace.D(), RelayInterval: a.cfg.Worker.OutboxRelayInterval.D(),
		Logger: a.log.Named("outbox"), Registerer: a.reg}); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	// User deletes remove the materialized feed too: through this process's feed service, or
	// a pinlater task the feed service's process runs.
	opts.Feeds = worker.PinlaterFeedRemover{Client: a.durable}
	if a.has(roleFeed) {
		opts.Feeds = feedRemover{a}
		// The pages' background work and the fanout's reads take turns in the same lanes.
		opts.Lanes = a.sharedLanes()
	}
	wcfg := worker.Config{FeatureTTL: a.cfg.Worker.FeatureTTL.D(), ActiveTTL: a.cfg.Worker.ActiveTTL.D(),
		UserDeleteRecheck: a.cfg.Worker.UserDeleteRecheck.D()}
	if wcfg.FeatureTTL == 0 {
		wcfg.FeatureTTL = -1 // 0 in the config: read for every pin (0 in worker.Config: the default)
	}
	if wcfg.ActiveTTL == 0 {
		wcfg.ActiveTTL = -1
	}
	a.worker, err = worker.New(a.graph, poolsT, stateT, a.durable, wcfg, opts)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	a.boards = graphsvc.NewBoardService(a.graph, zen.NewOrder(a.graph, zen.OrderOptions{}), a.durable, a.log.Named("boards"))
	return nil
}

// registerWorker registers the worker's pinlater handlers (fanout, upkeep) on a.pinServer.
func (a *app) registerWorker() error {
	if a.worker == nil {
		return fmt.Errorf("worker handlers: worker not built")
	}
	a.worker.Register(a.pinServer)
	a.pinServer.Handle(pinlater.TypeRespace, pinlater.Typed(a.boards.HandleRespace))
	a.workerWired = true
	return nil
}

// registerGraphService registers, on a.grpc, graphsvc's GraphService and BoardService (the
// frontends' writes, each enqueuing its feed event) and the worker's IngestService (Publish,
// for producers that write the graph through GraphService and publish the feed events
// themselves; Publish refuses events naming objects the main store does not hold).
func (a *app) registerGraphService() {
	if a.worker == nil {
		return
	}
	graphsvc.NewGraphService(a.graph, a.durable, a.log.Named("graphsvc"), nil, graphsvc.WithEventTable(a.outbox.Table())).Register(a.grpc)
	if a.boards != nil {
		a.boards.Register(a.grpc)
	}
	pub := worker.NewPublisher(a.durable, a.graph, a.worker.Config().HotFollowers)
	ingestv1.RegisterIngestServiceServer(a.grpc, worker.NewIngestServer(pub, a.worker, a.graph))
	a.log.Debug("graph, board and ingest services registered", zap.String("role", a.role))
	a.registerEngagement(context.Background())
}
