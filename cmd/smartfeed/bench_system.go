package main

import (
	"context"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// startBenchSystem runs the whole system (every role) of cfg in this process and returns it with
// a gRPC client on its public port, and the function that stops it, removes tmp and purges the
// system's queues.
func startBenchSystem(ctx context.Context, cfg config.Config, logw io.Writer, tmp string) (*benchSystem, func(), error) {
	log, err := newLogger(cfg.Log, logw)
	if err != nil {
		return nil, nil, err
	}
	a, err := newApp(ctx, roleAll, cfg, log, newRegistry())
	if err != nil {
		return nil, nil, err
	}
	actx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- a.run(actx) }()
	conn, err := grpc.NewClient(a.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		<-done
		return nil, nil, err
	}
	s := &benchSystem{a: a, feed: feedv1.NewFeedServiceClient(conn), health: healthpb.NewHealthClient(conn), boards: map[uint64]zen.ID{},
		pub:      worker.NewPublisher(a.durable, a.graph, a.worker.Config().HotFollowers),
		lazyPins: a.outbox != nil && a.graph.SharesLog(a.outbox.Table())}
	a.worker.OnInsert(s.inserted)
	closeFn := func() {
		conn.Close()
		stop()
		<-done
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
		purgeBenchQueues(cfg, log)
	}
	return s, closeFn, nil
}

// purgeBenchQueues deletes the queues and pinlater keys of a bench system's own namespace once
// it has stopped: a run leaves nothing in the Redis it was given (often the user's, from
// scripts/redis.sh), where `smartfeed jobs queues` would list every past run's queues.
func purgeBenchQueues(cfg config.Config, log *zap.Logger) {
	if cfg.Redis.Namespace == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pinlater.NewAdmin(redisOpt(cfg.Redis), pinlater.WithNamespace(cfg.Redis.Namespace))
	if err == nil {
		err = admin.Purge(ctx)
		_ = admin.Close()
	}
	if err != nil {
		log.Warn("bench: the run's queues were not purged", zap.String("namespace", cfg.Redis.Namespace), zap.Error(err))
	}
}
