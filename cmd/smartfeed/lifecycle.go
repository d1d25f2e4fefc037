package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smartfeed/smartfeed/feedsvc"
)

// run serves until ctx is done, then shuts down in order.
//
// Start order: stores (already open) → replicator → pinlater server → gRPC and admin listeners
// → ready (health SERVING).
//
// Shutdown order, each step bounded by the remaining ShutdownTimeout:
//  1. not ready: health "" and every service NOT_SERVING, /readyz 503, so load balancers
//     and Kubernetes stop sending new calls (liveness stays SERVING);
//  2. gRPC GracefulStop: calls in flight finish (Stop after a third of the bound: streams
//     left open are cut);
//  3. feedsvc Wait: background settles, enqueues and warm-up reads started by those calls;
//  4. pinlater server Shutdown: running tasks finish within worker.shutdown_timeout, the rest
//     go back to Redis for another worker;
//  5. replicator Flush then stop: logged writes reach the standby (what is left stays in the
//     primary's change log and is applied by the next start);
//  6. pinlater client/admin and the generator connection close;
//  7. admin HTTP server (metrics stay scrapeable until here);
//  8. stores close (Pebble flushes its memtables).
func (a *app) run(ctx context.Context) error {
	bg, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer bgCancel()
	g, gctx := errgroup.WithContext(bg)
	a.startBackground(gctx, g)
	if a.pinServer != nil {
		if err := a.pinServer.Start(); err != nil {
			bgCancel()
			_ = g.Wait()
			a.closeAll()
			return fmt.Errorf("pinlater server: %w", err)
		}
	}
	g.Go(func() error {
		if err := a.grpc.Serve(a.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc serve: %w", err)
		}
		return nil
	})
	if a.adminGRPC != nil {
		g.Go(func() error {
			if err := a.adminGRPC.Serve(a.admGRPCLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("admin grpc serve: %w", err)
			}
			return nil
		})
	}
	// The admin port's scheme, read before Serve: serving configures the server's TLSConfig
	// (HTTP/2) on its own goroutine.
	adminScheme := "http"
	if a.admin != nil && a.admin.TLSConfig != nil {
		adminScheme = "https"
	}
	if a.admin != nil {
		g.Go(func() error {
			serve := func() error { return a.admin.Serve(a.admLis) }
			if a.admin.TLSConfig != nil {
				serve = func() error { return a.admin.ServeTLS(a.admLis, "", "") }
			}
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("admin serve: %w", err)
			}
			return nil
		})
	}
	if deps := a.deps(); len(deps) > 0 {
		g.Go(func() error { a.watchDeps(gctx, time.Second, deps); return nil })
	}
	a.setReady(true)
	fields := []zap.Field{zap.String("role", a.role), zap.String("grpc", a.grpcAddr()), zap.String("admin", a.adminAddr())}
	if ad := a.adminAddr(); ad != "" {
		// Where a person goes next: the console and the metrics, as URLs to open.
		fields = append(fields, zap.String("console", adminScheme+"://"+ad+"/console/"), zap.String("metrics", adminScheme+"://"+ad+"/metrics"))
	}
	a.log.Info("serving", fields...)

	var runErr error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", zap.String("cause", context.Cause(ctx).Error()))
	case <-gctx.Done():
		runErr = context.Cause(gctx)
		a.log.Error("a component failed; shutting down", zap.Error(runErr))
	}
	stopStart := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout.D())
	defer cancel()
	err := a.shutdown(sctx, bgCancel)
	if werr := g.Wait(); werr != nil && runErr == nil {
		runErr = werr
	}
	err = errors.Join(runErr, err)
	a.log.Info("stopped", zap.Duration("shutdown", time.Since(stopStart)), zap.Error(err))
	return err
}

// startBackground starts the process's background loops in g: the replicator, the outbox
// relay, the namespace claim, the shard map watches, a fenced move's recovery, the replication
// canary, the knobs watch and the feed's crash recovery, each as configured.
func (a *app) startBackground(gctx context.Context, g *errgroup.Group) {
	if a.repl != nil {
		g.Go(func() error {
			if err := a.repl.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("replicator: %w", err)
			}
			return nil
		})
	}
	if a.durable != nil {
		g.Go(func() error { a.relayAndWatch(gctx); return nil })
	}
	if a.claimPending {
		g.Go(func() error { return a.namespaceClaim().Loop(gctx) })
	}
	if a.shardWatch != nil {
		sm := a.cfg.Storage.ShardMap
		if sm.File != "" {
			g.Go(func() error { _ = a.shardWatch.WatchFile(gctx, sm.File, 2*time.Second); return nil })
		}
		if sm.ZK != "" {
			g.Go(func() error { _ = a.shardWatch.WatchZK(gctx, sm.ZK, sm.ZKPath); return nil })
		}
	}
	if a.shardAdmin != nil && a.shardAdmin.Moves() {
		// A move that crashed while fenced must not keep its shards' writes waiting: lift the
		// fence (the shards stay on the source; rerunning the move finishes it).
		g.Go(func() error { a.shardAdmin.Recover(gctx); return nil })
	}
	if a.canary != nil {
		g.Go(func() error {
			if err := a.canary.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("replication canary: %w", err)
			}
			return nil
		})
	}
	if a.feed != nil && a.cfg.Feed.KnobsFile != "" {
		g.Go(func() error {
			if err := a.feed.WatchKnobs(gctx, a.cfg.Feed.KnobsFile, 2*time.Second); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("knobs: %w", err)
			}
			return nil
		})
	}
	if a.feed != nil {
		// Startup recovery, then a periodic sweep: chunks a crash left behind.
		r := feedsvc.NewRecoverer(a.feed, a.inflight, feedsvc.RecoverOptions{OlderThan: a.cfg.Feed.RecoverAfter.D(),
			Logger: a.log.Named("recovery"), Nice: a.cfg.Feed.BackgroundNice})
		g.Go(func() error { r.Run(gctx, a.cfg.Feed.RecoverEvery.D()); return nil })
	}
}

// setReady is the lifecycle's readiness: true once serving, false from the first shutdown
// step. Readiness is reported only while the dependencies answer too (watchDeps).
func (a *app) setReady(ok bool) {
	a.readyMu.Lock()
	defer a.readyMu.Unlock()
	a.serving = ok
	a.publishReady()
}

// publishReady sets health and /readyz from the lifecycle and the dependencies; readyMu held.
func (a *app) publishReady() {
	ok := a.serving && a.depsErr == ""
	a.ready.Store(ok)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for name := range a.grpc.GetServiceInfo() {
		a.health.SetServingStatus(name, st)
	}
	a.health.SetServingStatus("", st)
}

// shutdown runs the order written on run; stopBG cancels the background loops.
func (a *app) shutdown(ctx context.Context, stopBG context.CancelFunc) error {
	var errs []error
	step := func(name string, fn func() error) {
		start := time.Now()
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", name, err))
		}
		a.log.Debug("shutdown step", zap.String("step", name), zap.Duration("took", time.Since(start)))
	}
	step("readiness", func() error { a.setReady(false); return nil })
	step("grpc", func() error {
		// Calls in flight get a third of the shutdown bound; long-lived streams (a grpcurl
		// reflection session, say) are then cut so the later steps keep their time.
		gctx, cancel := context.WithTimeout(ctx, a.cfg.ShutdownTimeout.D()/3)
		defer cancel()
		done := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-gctx.Done():
			a.log.Warn("grpc calls still running at the drain deadline; closing them")
			a.grpc.Stop()
			<-done
		}
		return nil
	})
	if a.feed != nil {
		step("feedsvc", func() error { return waitCtx(ctx, a.feed.Close) })
	}
	if a.pinServer != nil {
		step("pinlater server", func() error { return waitCtx(ctx, a.pinServer.Shutdown) })
	}
	if a.gen != nil {
		step("generator sweeps", func() error { return waitCtx(ctx, a.gen.Wait) })
	}
	if a.repl != nil {
		step("replicator", func() error {
			err := a.repl.Flush(ctx)
			if err != nil {
				err = fmt.Errorf("standby flush (the rest stays in the change log for the next start): %w", err)
			}
			return err
		})
	}
	stopBG()
	if a.adminGRPC != nil {
		step("admin grpc", func() error { a.adminGRPC.Stop(); return nil })
	}
	if a.admin != nil {
		step("admin", func() error { return a.admin.Shutdown(ctx) })
		a.admLis = nil
	}
	step("connections", func() error { a.closeConns(); return nil })
	step("stores", a.stores.close)
	if a.slow != nil {
		step("slow traces", func() error { a.slow.Close(); a.slow = nil; return nil })
	}
	return errors.Join(errs...)
}

// waitCtx runs fn and waits for it until ctx is done.
func waitCtx(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *app) closeConns() {
	for i := len(a.conns) - 1; i >= 0; i-- {
		_ = a.conns[i].Close()
	}
	a.conns = nil
}

// closeAll releases what newApp built when run never ran.
func (a *app) closeAll() {
	// A gRPC server built but never served (newApp failing later, or an app closed unrun)
	// still holds its stream workers; Stop after a served run does nothing more.
	for _, s := range []*grpc.Server{a.grpc, a.adminGRPC} {
		if s != nil {
			s.Stop()
		}
	}
	if a.pinServer != nil {
		a.pinServer.Shutdown() // never started: this closes its Redis client
	}
	a.closeConns()
	if a.slow != nil {
		a.slow.Close()
	}
	if err := a.stores.close(); err != nil {
		a.log.Warn("close stores", zap.Error(err))
	}
}
