package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/demo"
	"github.com/smartfeed/smartfeed/internal/jsontime"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
)

// demoDefaults are the defaults of the demo: everything on loopback, Pebble under run/demo.
func demoDefaults() config.Config {
	c := config.DefaultConfig()
	c.Storage.DataDir = filepath.Join("run", "demo")
	c.GRPC.Addr = "127.0.0.1:9090"
	c.Admin.Addr = "127.0.0.1:9091"
	c.Log.Format = "console"
	c.Feed.Faults = true
	c.Redis.Namespace = "demo"
	c.ShutdownTimeout = jsontime.Duration(15 * time.Second)
	return c
}

// newDemoCmd is "smartfeed demo": everything on loopback over a synthetic graph, with a live
// summary.
func newDemoCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "run everything on loopback over a synthetic graph, with a live summary",
		Long: `Runs worker, generator and feedsvc in one process on loopback (Pebble under run/demo) over a
synthetic power-law graph: pin events stream through pinlater into the worker, GetFeed is called
on loopback gRPC, and a live line shows the rates. Ctrl-C (or --duration) stops it cleanly.
Takes the servers' flags too, with the demo's defaults.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	var df demo.Flags
	fs.IntVar(&df.Spec.Users, "demo-users", 500, "users of the synthetic graph (used when the graph is built)")
	fs.IntVar(&df.Spec.BoardsPerUser, "demo-boards", 2, "boards per user")
	fs.IntVar(&df.Spec.Interests, "demo-interests", 20, "interests")
	fs.IntVar(&df.Spec.FollowsPerUser, "demo-follows", 20, "mean number of users each user follows (Zipf-distributed targets)")
	fs.Float64Var(&df.EventsPerSec, "demo-events-per-sec", 50, "pin events streamed per second")
	fs.Float64Var(&df.ReadsPerSec, "demo-reads-per-sec", 50, "GetFeed calls per second")
	fs.DurationVar(&df.Duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	df.Spec.Seed = 8
	resolve := configFlags(fs, demoDefaults(), getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		return runDemo(cmd.Context(), cfg, df, cmd.OutOrStdout())
	}
	return cmd
}

// runDemo runs the demo with cfg and df, printing to stdout (the logs go to a file).
func runDemo(ctx context.Context, cfg config.Config, df demo.Flags, stdout io.Writer) error {
	if df.Spec.Users < 2 || df.Spec.Interests < 0 || df.Spec.BoardsPerUser < 0 || df.Spec.FollowsPerUser < 1 ||
		df.EventsPerSec <= 0 || df.ReadsPerSec < 0 || df.Duration < 0 {
		return errors.New("demo: users >= 2, follows >= 1, events-per-sec > 0, and no negative sizes, rates or duration")
	}
	if cfg.Storage.Backend == config.BackendPebble {
		if _, err := os.Stat(cfg.Storage.DataDir); errors.Is(err, os.ErrNotExist) {
			// A fresh demo: the tasks an earlier demo (whose data was deleted) left in the
			// demo namespace name objects that no longer exist; take the namespace over.
			cfg.Redis.NamespaceTakeover = true
		}
	}
	// On HBase the data dir holds only the log.
	if err := os.MkdirAll(cfg.Storage.DataDir, 0o755); err != nil {
		return fmt.Errorf("demo data dir: %w", err)
	}
	logPath := filepath.Join(cfg.Storage.DataDir, "smartfeed.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("demo log: %w", err)
	}
	defer logFile.Close()
	log, err := newLogger(cfg.Log, logFile)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("effective config", zap.Int("gomaxprocs", setMaxProcs(cfg)), zap.Any("config", json.RawMessage(cfg.MaskedCompact())))
	fmt.Fprintf(stdout, "smartfeed demo %s: storage %s at %s, Redis %s; logs in %s\n", buildVersion(), cfg.Storage.Backend, cfg.Storage.DataDir, cfg.Redis.Where(), logPath)

	if err := awaitDeps(ctx, startDeps(roleAll, cfg), cfg.WaitForDeps, log, depBackoff{}); err != nil || ctx.Err() != nil {
		return err
	}
	reg := newRegistry()
	defer startGCFloor(cfg, log, reg)()
	a, err := newApp(ctx, roleAll, cfg, log, reg)
	if err != nil {
		return err
	}
	// The app outlives the demo loops: it stops only once they have, so nothing writes to a
	// closed store.
	appCtx, stopApp := context.WithCancel(context.WithoutCancel(ctx))
	defer stopApp()
	appErr := make(chan error, 1)
	go func() { appErr <- a.run(appCtx) }()

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	if df.Duration > 0 {
		loopCtx, stopLoops = context.WithTimeout(ctx, df.Duration)
		defer stopLoops()
	}
	err = runDemoLoops(loopCtx, a, df, stdout)
	stopLoops()
	stopApp()
	if aerr := <-appErr; aerr != nil {
		err = errors.Join(err, aerr)
	}
	if err == nil && cfg.Storage.Backend == config.BackendPebble {
		fmt.Fprintf(stdout, "stopped cleanly; the data stays in %s for the next run (delete it to start afresh)\n", cfg.Storage.DataDir)
	} else if err == nil {
		fmt.Fprintln(stdout, "stopped cleanly; the data stays in HBase")
	}
	return err
}

// runDemoLoops runs the demo's workload (package demo) against a, a process of every role.
func runDemoLoops(ctx context.Context, a *app, df demo.Flags, stdout io.Writer) error {
	if !a.workerWired {
		return errors.New("demo: the worker's handlers are not registered")
	}
	conn, err := grpc.NewClient(a.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("demo client: %w", err)
	}
	defer conn.Close()
	env := demo.Env{Graph: a.graph, LazyPins: a.outbox != nil && a.graph.SharesLog(a.outbox.Table()),
		Publisher: demo.QueuePublisher{Q: a.durable}, Feed: feedv1.NewFeedServiceClient(conn),
		Metrics: a.reg, Log: a.log, DataDir: a.cfg.Storage.DataDir, SaveGraph: a.cfg.Storage.Backend == config.BackendPebble,
		GRPCAddr: a.grpcAddr(), AdminAddr: a.adminAddr(), AdminGRPCAddr: a.adminGRPCAddr()}
	if a.pinAdmin != nil {
		env.Queues = a.pinAdmin
	}
	return demo.Run(ctx, env, df, stdout)
}
