package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
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
		lazyPins: a.outbox != nil && a.graph.SharesLog(a.outbox.Table()), logw: logw}
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

// benchSystem is bench.System over an in-process `all`.
type benchSystem struct {
	a      *app
	feed   feedv1.FeedServiceClient
	health healthpb.HealthClient // on feed's connection: bench.Pinger
	pub    *worker.Publisher
	// lazyPins: a pin's event goes through an outbox row in the graph's log, written durably
	// after the pin's writes, so those wait for no fsync (as graphsvc.WithEventTable does for
	// CreatePin, and the demo's makers).
	lazyPins bool
	mu       sync.Mutex
	boards   map[uint64]zen.ID
	raw      int
	// arrivals are the watched (user, pin) pairs: arrivalKey → *atomic.Int64, the Unix time
	// in ns the worker wrote the pin to the user's pools (0: not yet).
	arrivals sync.Map
	made     sync.Map // pin → creation ms, of the pins MakePin made and PublishPin has not published
	// bulkLoad is the command LoadModel loads the graph into HBase with, as HFiles (empty: the
	// store's batched writes); ingest has Pebble ingest it as sstables; what they print goes
	// to logw.
	bulkLoad string
	ingest   bool
	logw     io.Writer
}

// ReplicationLags implements bench.Replication: the canary's measurements with HBase's own
// replication, the change-log replicator's otherwise.
func (s *benchSystem) ReplicationLags(from uint64) (bench.ReplicationInfo, []time.Duration, uint64) {
	switch {
	case s.a.canary != nil:
		lags, next, _ := s.a.canary.Lags().Since(from)
		return bench.ReplicationInfo{Mechanism: "hbase", Measured: "a canary row written on the primary every 1 s " +
			"and polled on the standby every 10 ms (feedsvc.Canary), from the write to its first sight on the standby"}, lags, next
	case s.a.repl != nil:
		lags, next, _ := s.a.repl.Lags().Since(from)
		return bench.ReplicationInfo{Mechanism: "app", Measured: "one change-log entry (a feed write), from the write " +
			"on the primary to its application on the standby (feedsvc.Replicator)"}, lags, next
	}
	return bench.ReplicationInfo{Mechanism: "none"}, nil, 0
}

func (s *benchSystem) CreateUsers(ctx context.Context, n int) ([]uint64, error) {
	ids := make([]uint64, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o, err := s.a.graph.Create(ctx, zen.TypeUser, 0, map[string]any{"username": fmt.Sprintf("bench%d", i)})
			if err == nil {
				var b zen.Object
				b, err = s.a.graph.Create(ctx, zen.TypeBoard, o.ID, map[string]any{"name": "pins", "owner": o.ID.String()})
				if err == nil {
					err = addBoth(ctx, s.a.graph, zen.Edge{From: o.ID, Type: zen.EdgeUserBoards, To: b.ID})
				}
				mu.Lock()
				s.mu.Lock()
				s.boards[uint64(o.ID)] = b.ID
				s.mu.Unlock()
				ids[i] = uint64(o.ID)
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids, firstErr
}

func (s *benchSystem) Follow(ctx context.Context, follower, followee uint64) error {
	return addBoth(ctx, s.a.graph, zen.Edge{From: zen.ID(follower), Type: zen.EdgeFollowsUser, To: zen.ID(followee)})
}

func (s *benchSystem) Pin(ctx context.Context, author uint64, watch []uint64) (uint64, error) {
	pin, board, created, err := s.makePin(ctx, author)
	if err != nil {
		return 0, err
	}
	for _, u := range watch {
		s.arrivals.Store(arrivalKey{u, uint64(pin)}, new(atomic.Int64))
	}
	if _, err := s.pub.PinSaved(ctx, worker.PinSaved{Pin: pin, User: zen.ID(author), Board: board, CreatedMs: created}); err != nil {
		return 0, err
	}
	return uint64(pin), nil
}

// makePin creates a pin by author on the author's board: the object and its edges (lazily on
// Pebble, where the synced outbox row of the pin's event, written after them to the same log,
// makes them durable). It returns the pin, its board and its creation time in Unix
// milliseconds.
func (s *benchSystem) makePin(ctx context.Context, author uint64) (zen.ID, zen.ID, int64, error) {
	s.mu.Lock()
	board := s.boards[author]
	s.mu.Unlock()
	now := time.Now()
	wctx := ctx
	if s.lazyPins {
		wctx = zen.Lazily(ctx)
	}
	p, err := s.a.graph.Create(wctx, zen.TypePin, board, map[string]any{"author": zen.ID(author).String(), "board": board.String(), "title": "bench"})
	if err != nil {
		return 0, 0, 0, err
	}
	for _, e := range []zen.Edge{{From: zen.ID(author), Type: zen.EdgeUserPins, To: p.ID}, {From: board, Type: zen.EdgeBoardPins, To: p.ID}} {
		if err := addBoth(wctx, s.a.graph, e); err != nil {
			return 0, 0, 0, err
		}
	}
	return p.ID, board, now.UnixMilli(), nil
}

// MakePin implements bench.Prepinner: the pin as Pin makes it, its event not published.
func (s *benchSystem) MakePin(ctx context.Context, author uint64) (uint64, error) {
	pin, _, created, err := s.makePin(ctx, author)
	if err != nil {
		return 0, err
	}
	s.made.Store(uint64(pin), created)
	return uint64(pin), nil
}

// PublishPin implements bench.Prepinner: the event of a pin MakePin made, as Pin publishes it.
func (s *benchSystem) PublishPin(ctx context.Context, author, pin uint64) error {
	v, ok := s.made.LoadAndDelete(pin)
	if !ok {
		return fmt.Errorf("pin %d was not made by MakePin", pin)
	}
	s.mu.Lock()
	board := s.boards[author]
	s.mu.Unlock()
	_, err := s.pub.PinSaved(ctx, worker.PinSaved{Pin: zen.ID(pin), User: zen.ID(author), Board: board, CreatedMs: v.(int64)})
	return err
}

// Arrived reports the worker's own time of writing pin to user's pools (benchSystem.inserted,
// the worker's insert hook): exact, and free for the system under test. Reading the pools for
// it instead (a scan per poll per sampled follower) once took two thirds of the run's CPU.
func (s *benchSystem) Arrived(_ context.Context, user, pin uint64) (time.Time, bool, error) {
	k := arrivalKey{user, pin}
	v, ok := s.arrivals.Load(k)
	if !ok {
		return time.Time{}, false, fmt.Errorf("pin %d for user %d: not watched", pin, user)
	}
	at := v.(*atomic.Int64).Load()
	if at == 0 {
		return time.Time{}, false, nil
	}
	s.arrivals.Delete(k)
	return time.Unix(0, at), true, nil
}

// inserted is the worker's insert hook: it stamps the watched (user, pin) pairs of es.
func (s *benchSystem) inserted(es []zen.PoolEntry) {
	now := time.Now().UnixNano()
	for _, e := range es {
		if v, ok := s.arrivals.Load(arrivalKey{uint64(e.User), uint64(e.Pin)}); ok {
			v.(*atomic.Int64).CompareAndSwap(0, now)
		}
	}
}

// arrivalKey is a watched (user, pin) pair.
type arrivalKey struct{ user, pin uint64 }

func (s *benchSystem) PoolInserts() float64 {
	return float64(gatherSum(s.a.reg, "smartfeed_worker_pool_inserts_total"))
}

func (s *benchSystem) FanoutPending(ctx context.Context) (int, error) {
	n := 0
	for _, q := range []string{pinlater.QueueFanout, pinlater.QueueBulk, pinlater.QueueCritical, pinlater.QueueDefault} {
		st, err := s.a.pinAdmin.Queue(ctx, q)
		if err != nil {
			return 0, err
		}
		n += st.Pending + st.Active + st.Scheduled + st.Retry
	}
	return n, nil
}

func (s *benchSystem) GetFeed(ctx context.Context, user uint64, n int) error {
	_, err := s.feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: user, PageSize: int32(n)})
	return err
}

// Ping is the gRPC health check of the whole server on GetFeed's connection (bench.Pinger).
func (s *benchSystem) Ping(ctx context.Context) error {
	_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func (s *benchSystem) SlowPrimary(_ context.Context, fraction float64, extra time.Duration) error {
	if s.a.faults[0] == nil {
		return errors.New("no fault injection on the primary")
	}
	return s.a.faults[0].Set(faults.Config{SlowFraction: fraction, Slow: extra})
}

func (s *benchSystem) Hedging(_ context.Context, on bool) error {
	p := s.a.feed.Hedger().Policy()
	p.Mode = hedge.ModeOff
	if on {
		p.Mode = hedge.DefaultPolicy().Mode
	}
	return s.a.feed.Hedger().SetPolicy(p)
}

func (s *benchSystem) Hedges() (float64, float64) {
	standby := gatherSum(s.a.reg, "smartfeed_hedge_issued_total") + gatherSum(s.a.reg, "smartfeed_hedge_warmup_reads_total")
	return float64(standby), float64(gatherSum(s.a.reg, "smartfeed_hedge_calls_total"))
}

func (s *benchSystem) Cutoff(context.Context) (time.Duration, error) {
	d, _ := s.a.feed.Hedger().Cutoff()
	return d, nil
}

func (s *benchSystem) StandbyP999() time.Duration {
	_, standby := hedge.ReadLatency(&dto.MetricFamily{Metric: gatherSeries(s.a.reg, hedge.ReadLatencyMetric)})
	return standby.Quantile(0.999)
}

// GeneratorTime reads the generator stage of smartfeed_feed_stage_seconds.
func (s *benchSystem) GeneratorTime() (float64, time.Duration) {
	for _, m := range gatherSeries(s.a.reg, "smartfeed_feed_stage_seconds") {
		if labelValue(m, "stage") == "generator" {
			h := m.GetHistogram()
			return float64(h.GetSampleCount()), time.Duration(h.GetSampleSum() * float64(time.Second))
		}
	}
	return 0, 0
}

// FreshCounts is the feed service's GetFeed calls by fresh status so far
// (smartfeed_feed_requests_total, summed over outcomes).
func (s *benchSystem) FreshCounts() map[string]uint64 {
	return countsBy(s.a.reg, "smartfeed_feed_requests_total", "fresh")
}

// PreparedCounts is the feed service's preparations and prepared chunks by outcome so far
// (smartfeed_feed_prepared_total).
func (s *benchSystem) PreparedCounts() map[string]uint64 {
	return countsBy(s.a.reg, "smartfeed_feed_prepared_total", "outcome")
}

// countsBy sums the counter family name of reg by the value of its label (series without it
// left out).
func countsBy(reg prometheus.Gatherer, name, label string) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range gatherSeries(reg, name) {
		if v := labelValue(m, label); v != "" {
			out[v] += uint64(m.GetCounter().GetValue())
		}
	}
	return out
}

// Stages snapshots GetFeed's and the generator's stage histograms, and GetFeed's whole time as
// the service saw it (stage "all": what is not in it was spent in gRPC or the client)
// (bench.StageTimer).
func (s *benchSystem) Stages() []bench.StageHist {
	var out []bench.StageHist
	for _, name := range []string{"smartfeed_feed_request_seconds", "smartfeed_feed_stage_seconds", "smartfeed_generator_stage_seconds"} {
		for _, m := range gatherSeries(s.a.reg, name) {
			h := m.GetHistogram()
			stage := labelValue(m, "stage")
			if stage == "" {
				stage = "all"
			}
			sh := bench.StageHist{Metric: name, Stage: stage, Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
			for _, b := range h.GetBucket() {
				sh.Upper = append(sh.Upper, b.GetUpperBound())
				sh.Counts = append(sh.Counts, b.GetCumulativeCount())
			}
			out = append(out, sh)
		}
	}
	return out
}
