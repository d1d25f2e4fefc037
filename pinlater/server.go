package pinlater

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Handler processes one task. Returning nil acknowledges it. Returning an error retries it with
// the policy's backoff until MaxAttempts runs have failed, then archives it as dead; an error
// wrapping ErrInvalidPayload or SkipRetry archives it at once, and RetryAfter sets the delay.
// Handlers must be idempotent: a task may run more than once (a worker can die after the work and
// before the acknowledgement).
type Handler interface {
	ProcessTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// ProcessTask calls f.
func (f HandlerFunc) ProcessTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a handler.
type Middleware func(Handler) Handler

// Typed adapts a function of a decoded payload to Handler: the payload is decoded and validated
// first, and a bad one is archived without calling fn.
func Typed[P Payload](fn func(ctx context.Context, p P) error) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		p, err := Decode[P](t)
		if err != nil {
			return err
		}
		return fn(ctx, p)
	})
}

// SkipRetry, wrapped in a handler's error, sends the task to the dead set without retrying.
var SkipRetry = asynq.SkipRetry

// RetryAfter wraps err so that the task is retried after d (PinLater's retryDelayMillis) instead
// of after the policy's backoff. It still counts as a failed attempt.
func RetryAfter(err error, d time.Duration) error { return &retryAfterError{err: err, d: d} }

type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string { return fmt.Sprintf("%v (retry after %v)", e.err, e.d) }
func (e *retryAfterError) Unwrap() error { return e.err }

// deferError puts a task back without counting a failed attempt (rate limit).
type deferError struct {
	why  string
	wait time.Duration
}

func (e *deferError) Error() string { return fmt.Sprintf("pinlater: %s, back in %v", e.why, e.wait) }

// Defaults of Config's fields that the binary's configuration (internal/config) takes as its own.
const (
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 10
	// DefaultDequeuers is Config.Dequeuers's default.
	DefaultDequeuers = 1
	// DefaultShutdownTimeout is Config.ShutdownTimeout's default.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultReclaimAfter is Config.ReclaimAfter's default.
	DefaultReclaimAfter = 5 * time.Second
)

// Config configures a Server. Zero values get the documented defaults.
type Config struct {
	// Redis is the connection option (e.g. RedisAddr("127.0.0.1:6379")). Required.
	Redis asynq.RedisConnOpt
	// Namespace prefixes queue names and pinlater keys (see WithNamespace).
	Namespace string
	// Queues maps the logical queues this server serves to their weights. Default
	// DefaultQueueWeights(): critical 6, default 3, fanout 2, bulk 1.
	Queues map[string]int
	// StrictPriority drains higher-weight queues first instead of sharing slots by weight.
	StrictPriority bool
	// Concurrency is the number of tasks run at once. Default 10.
	Concurrency int
	// Dequeuers is how many asynq processors share the Concurrency slots. One processor takes
	// tasks one at a time: each take is a Lua script per queue it looks in (in weight order,
	// until one has a task), a round trip each, before the next take starts. So one caps the
	// server at about 1 / (queues tried × round trip) tasks a second, whatever Concurrency
	// is. Each has its own dequeue loop (and its
	// own asynq housekeeping: heartbeat, scheduled-task forwarder, lease recoverer); all but
	// the first poll empty queues at 4×PollInterval. More than one helps where handlers wait
	// on I/O with CPU to spare; on a loaded 2-core machine four made GetFeed beside the worker
	// slower (docs/pools.md, "Worker concurrency and dequeuers"). Default 1, at most
	// Concurrency.
	Dequeuers int
	// ShutdownTimeout is how long Shutdown waits for running tasks before handing them back to
	// Redis for another worker. Default 10 s.
	ShutdownTimeout time.Duration
	// PollInterval is how often empty queues are polled: a task enqueued on an idle server waits
	// on average this long before it starts (asynq sleeps half of it plus up to all of it), and
	// a fanout is two hops (the event, then its receiver pages). Default 100 ms; an idle server
	// then costs Redis about 10 polls a second (a dequeue script per queue each), plus 2.5 for
	// each further processor (Dequeuers).
	PollInterval time.Duration
	// DelayedCheckInterval is how often scheduled and retrying tasks (including rate-limited ones)
	// are moved back to their queues. Default 1 s.
	DelayedCheckInterval time.Duration
	// RateHorizon is how far ahead a rate-limited run may reserve a slot. Default 1 min.
	RateHorizon time.Duration
	// RateCheckInterval is how long the server trusts its copy of which queues have a rate limit
	// (a queue without one skips the limiter). Default 1 s.
	RateCheckInterval time.Duration
	// Clock, if set, is the rate limiter's clock (tests). Default: Redis server time.
	Clock func() time.Time
	// ReclaimAfter: a task of these queues whose lease ended this long ago (its worker died, or
	// Redis crashed before the worker heard it had the task) goes back to its queue, instead of
	// waiting 60–120 s for asynq's recoverer (see reclaim.go). Default 5 s; negative: off.
	ReclaimAfter time.Duration
	// Outbox, if set, is the outbox of the DurableClients enqueuing to these queues: the server
	// deletes a task's row when the task is done (or dead), before asynq forgets the task.
	Outbox OutboxStore
	// TracerProvider, if set, records a span per task run, a child of the span that enqueued
	// the task (trace.go).
	TracerProvider trace.TracerProvider
}

// Server runs handlers for the tasks of its queues.
type Server struct {
	cfg      Config
	log      *zap.Logger
	m        *metrics
	keys     keys
	lim      *limiter
	rdb      redis.UniversalClient
	mu       sync.Mutex
	handlers map[string]Handler
	mws      []Middleware
	errs     []error
	srvs     []*asynq.Server // Config.Dequeuers of them once started
	stop     chan struct{}   // closed by Shutdown: ends the reclaimer
	bg       sync.WaitGroup  // the reclaimer
	tracer   trace.Tracer    // nil: no spans
}

// NewServer returns a server; register handlers with Handle, then Start it. logger and reg may be
// nil.
func NewServer(cfg Config, logger *zap.Logger, reg prometheus.Registerer) (*Server, error) {
	if cfg.Redis == nil {
		return nil, errors.New("pinlater server: no redis")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := checkNamespace(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("pinlater server: %w", err)
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = DefaultQueueWeights()
	}
	for q, w := range cfg.Queues {
		if q == "" || w <= 0 {
			return nil, fmt.Errorf("pinlater server: queue %q weight %d (want a name and a weight > 0)", q, w)
		}
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Dequeuers <= 0 {
		cfg.Dequeuers = DefaultDequeuers
	}
	cfg.Dequeuers = min(cfg.Dequeuers, cfg.Concurrency)
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.DelayedCheckInterval <= 0 {
		cfg.DelayedCheckInterval = time.Second
	}
	if cfg.RateCheckInterval <= 0 {
		cfg.RateCheckInterval = time.Second
	}
	if cfg.ReclaimAfter == 0 {
		cfg.ReclaimAfter = DefaultReclaimAfter
	}
	if cfg.RateHorizon <= 0 {
		cfg.RateHorizon = time.Minute
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("pinlater server metrics: %w", err)
	}
	rdb := universal(cfg.Redis)
	if rdb == nil {
		return nil, errors.New("pinlater server: unsupported redis connection option")
	}
	k := keysFor(rdb, cfg.Namespace)
	return &Server{
		cfg: cfg, log: logger, m: m, keys: k, rdb: rdb,
		lim:      &limiter{rdb: rdb, keys: k, horizon: cfg.RateHorizon, now: cfg.Clock, ttl: cfg.RateCheckInterval},
		handlers: map[string]Handler{}, tracer: tracerOf(cfg.TracerProvider),
	}, nil
}

// Handle registers the handler of a task type. Mistakes (nil handler, type registered twice) are
// reported by Start.
func (s *Server) Handle(typ string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case typ == "" || h == nil:
		s.errs = append(s.errs, fmt.Errorf("handle %q: empty type or nil handler", typ))
	case s.handlers[typ] != nil:
		s.errs = append(s.errs, fmt.Errorf("handle %q: registered twice", typ))
	default:
		s.handlers[typ] = h
	}
}

// HandleFunc registers a function as the handler of a task type.
func (s *Server) HandleFunc(typ string, f func(ctx context.Context, t *Task) error) {
	s.Handle(typ, HandlerFunc(f))
}

// Use adds middleware; the first added is the outermost. The server always wraps the chain in
// panic recovery and logging (outside) and the policy deadline (inside).
func (s *Server) Use(mws ...Middleware) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mws = append(s.mws, mws...)
}

// Start starts processing in the background.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := errors.Join(s.errs...); err != nil {
		return fmt.Errorf("pinlater server: %w", err)
	}
	if s.srvs != nil {
		return errors.New("pinlater server: already started")
	}
	queues := make(map[string]int, len(s.cfg.Queues))
	for q, w := range s.cfg.Queues {
		queues[s.keys.queue(q)] = w
	}
	chain := map[string]Handler{}
	for typ, h := range s.handlers {
		h = PolicyTimeout()(h)
		for i := len(s.mws) - 1; i >= 0; i-- {
			h = s.mws[i](h)
		}
		chain[typ] = recoverWith(s.log, s.m)(Logging(s.log)(h))
	}
	handler := asynq.HandlerFunc(func(ctx context.Context, at *asynq.Task) error {
		if s.tracer != nil {
			return s.traced(ctx, at, func(ctx context.Context) error { return s.process(ctx, at, chain) })
		}
		return s.process(ctx, at, chain)
	})
	n := s.cfg.Dequeuers
	for i := range n {
		// The slots split as evenly as they go: 10 over 4 processors is 3, 3, 2, 2.
		slots := s.cfg.Concurrency / n
		if i < s.cfg.Concurrency%n {
			slots++
		}
		// An idle processor polls every queue each interval. The first polls at PollInterval,
		// so a task on an idle server starts as soon as before; the others at four times it,
		// so that idling costs Redis under twice what one processor did, not four times.
		poll := s.cfg.PollInterval
		if i > 0 {
			poll *= 4
		}
		srv := asynq.NewServer(s.cfg.Redis, asynq.Config{
			Concurrency:              slots,
			Queues:                   queues,
			StrictPriority:           s.cfg.StrictPriority,
			ShutdownTimeout:          s.cfg.ShutdownTimeout,
			TaskCheckInterval:        poll,
			DelayedTaskCheckInterval: s.cfg.DelayedCheckInterval,
			RetryDelayFunc:           s.retryDelay,
			IsFailure:                func(err error) bool { var d *deferError; return !errors.As(err, &d) },
			Logger:                   asynqLogger{s.log.Sugar()},
			LogLevel:                 asynq.WarnLevel,
		})
		if err := srv.Start(handler); err != nil {
			for _, started := range s.srvs {
				started.Shutdown()
			}
			s.srvs = nil
			return fmt.Errorf("pinlater server start: %w", err)
		}
		s.srvs = append(s.srvs, srv)
	}
	if s.cfg.ReclaimAfter > 0 {
		s.stop = make(chan struct{})
		stop := s.stop
		s.bg.Go(func() { s.reclaimLoop(stop) })
	}
	return nil
}

// Drain stops taking new tasks while the running ones finish; call Shutdown afterwards. (To stop
// a queue for every process, use Admin.Pause; to stop a queue from taking new enqueues while the
// workers empty it, use Admin.SetDraining.)
func (s *Server) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.srvs {
		srv.Stop()
	}
}

// Shutdown stops taking tasks, waits up to Config.ShutdownTimeout for the running ones, and hands
// the unfinished ones back to their queues (they run again, on this or another worker). The
// handlers' contexts are cancelled when the timeout expires.
func (s *Server) Shutdown() {
	s.mu.Lock()
	srvs := s.srvs
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
	s.mu.Unlock()
	s.bg.Wait()
	// All stop taking tasks first, then wait for their running ones side by side: the wait is
	// one ShutdownTimeout, not one per processor.
	for _, srv := range srvs {
		srv.Stop()
	}
	var wg sync.WaitGroup
	for _, srv := range srvs {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
	_ = s.rdb.Close()
}

// process runs one task: rate limit, attempt policy, metrics.
func (s *Server) process(ctx context.Context, at *asynq.Task, chain map[string]Handler) error {
	phys, _ := asynq.GetQueueName(ctx)
	q, ok := s.keys.logical(phys)
	if !ok {
		q = phys
	}
	id, _ := asynq.GetTaskID(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	pol, _ := DefaultPolicy(at.Type())
	maxAttempts := pol.MaxAttempts
	if n, err := strconv.Atoi(at.Headers()[hdrMaxAttempts]); err == nil && n > 0 {
		maxAttempts = n
	} else if maxAttempts == 0 {
		maxAttempts = maxRetry + 1
	}

	if err := s.admit(ctx, q, at.Type(), id, retried < maxRetry); err != nil {
		return err
	}

	typ := at.Type()
	if ms, err := strconv.ParseInt(at.Headers()[hdrDueMs], 10, 64); err == nil && retried == 0 {
		if lat := time.Since(time.UnixMilli(ms)); lat >= 0 {
			s.m.wait.WithLabelValues(q, typ).Observe(lat.Seconds())
		}
	}
	t := &Task{typ: typ, payload: at.Payload(), policy: pol, id: id, queue: q, attempt: retried + 1}
	t.policy.MaxAttempts = maxAttempts
	if ms, err := strconv.ParseInt(at.Headers()[hdrTimeoutMs], 10, 64); err == nil && ms > 0 {
		t.policy.Timeout = time.Duration(ms) * time.Millisecond
	}
	h := chain[typ]
	if h == nil {
		h = HandlerFunc(func(context.Context, *Task) error {
			return invalid("no handler for task type %q in queue %s", typ, q)
		})
	}
	start := time.Now()
	err := h.ProcessTask(ctx, t)
	s.m.duration.WithLabelValues(q, typ).Observe(time.Since(start).Seconds())
	if err == nil {
		s.m.processed.WithLabelValues(q, typ).Inc()
		s.clearOutbox(ctx, at, id)
		return nil
	}
	s.m.failed.WithLabelValues(q, typ).Inc()
	if errors.Is(err, ErrInvalidPayload) || errors.Is(err, asynq.SkipRetry) || retried+1 >= maxAttempts {
		s.m.archived.WithLabelValues(q, typ).Inc()
		// Dead: the archived task in Redis is the record now (Admin.RetryDead runs it again).
		s.clearOutbox(ctx, at, id)
		if errors.Is(err, asynq.SkipRetry) {
			return err
		}
		return fmt.Errorf("%w (attempt %d of %d): %w", err, retried+1, maxAttempts, asynq.SkipRetry)
	}
	s.m.retried.WithLabelValues(q, typ).Inc()
	return err
}

// admit waits for the rate limit of queue q to let task id run. Putting a task off returns a
// deferError, which asynq takes back without counting an attempt, but only while it would
// still retry the task (canDefer): asynq sends a task that has used its retries (its earlier
// runs crashed) to the dead set on any error, a deferral too. Such a task waits here instead,
// for its slot or for the limiter's Redis to answer again, until ctx ends.
func (s *Server) admit(ctx context.Context, q, typ, id string, canDefer bool) error {
	for {
		dec, wait, err := s.lim.take(ctx, q, id)
		why := ""
		switch {
		case err != nil:
			why, wait = err.Error(), time.Second
		case dec == decRun:
			return nil
		default:
			s.m.deferred.WithLabelValues(q, typ).Inc()
			why = "rate limited (" + dec.String() + ")"
		}
		if canDefer {
			return &deferError{why: why, wait: wait}
		}
		select {
		case <-ctx.Done():
			return &deferError{why: why, wait: wait}
		case <-time.After(wait):
		}
	}
}

// clearOutbox deletes the outbox row of a finished task. A failure only costs a second run: the
// relay finds the row, no task in Redis, and enqueues it again (handlers are idempotent).
func (s *Server) clearOutbox(ctx context.Context, at *asynq.Task, id string) {
	key := at.Headers()[hdrOutbox]
	if s.cfg.Outbox == nil || key == "" {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	del := s.cfg.Outbox.Delete
	if dd, ok := s.cfg.Outbox.(DoneDeleter); ok {
		del = dd.DeleteDone
	}
	if err := del(dctx, []byte(key)); err != nil {
		s.log.Warn("outbox row of a finished task not deleted (the task may run again)",
			zap.String("type", at.Type()), zap.String("id", id), zap.Error(err))
	}
}

// retryDelay is asynq's RetryDelayFunc: deferrals come back at their slot, RetryAfter errors after
// their delay, crashed runs after a second, other failures after the type's backoff.
func (s *Server) retryDelay(n int, err error, at *asynq.Task) time.Duration {
	var d *deferError
	if errors.As(err, &d) {
		// asynq stores retry times in whole seconds and moves a task once the second has begun:
		// round up so that the task does not come back before its slot.
		now := time.Now()
		back := now.Add(d.wait).Truncate(time.Second)
		if back.Before(now.Add(d.wait)) {
			back = back.Add(time.Second)
		}
		return back.Sub(now)
	}
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.d
	}
	if errors.Is(err, asynq.ErrLeaseExpired) {
		// The worker running the task died (kill -9, OOM, a lost node) and its lease ran out;
		// asynq counts the run as a failed attempt. Every server's recoverer may find the same
		// expired lease at once (a fleet restarting); only the first to claim it counts and logs.
		if s.firstToReport(at, n) {
			s.m.orphaned.WithLabelValues("unknown", at.Type()).Inc() // asynq does not say the queue here
			s.log.Warn("task's worker died mid-run (lease expired): running it again",
				zap.String("type", at.Type()), zap.Int("failed_attempt", n+1), zap.Error(err))
		}
		return time.Second
	}
	pol, ok := DefaultPolicy(at.Type())
	if !ok {
		pol = Policy{BackoffBase: time.Second, BackoffMax: 10 * time.Minute}
	}
	return Backoff(pol, n)
}

// firstToReport claims the report of run n of at having been orphaned, for the whole fleet: asynq
// hands the recoverer the task's type and payload but not its ID, so the claim is keyed by those
// and the attempt number, and kept for ten minutes. When Redis cannot answer, it reports: a
// duplicate count is better than a lost one.
func (s *Server) firstToReport(at *asynq.Task, n int) bool {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00", at.Type(), n)
	h.Write(at.Payload())
	key := s.keys.orphan(hex.EncodeToString(h.Sum(nil)[:16]))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ok, err := s.rdb.SetNX(ctx, key, 1, 10*time.Minute).Result()
	return ok || err != nil
}

// Backoff is the delay before retry n+1 (n = runs failed so far minus one): BackoffBase doubled n
// times, capped at BackoffMax, with ±25% jitter.
func Backoff(p Policy, n int) time.Duration {
	d := p.BackoffBase
	for i := 0; i < n && d < p.BackoffMax; i++ {
		d *= 2
	}
	if d > p.BackoffMax {
		d = p.BackoffMax
	}
	j := time.Duration(float64(d) * (rand.Float64()*0.5 - 0.25))
	return d + j
}

// recoverWith turns a handler panic into an error (the task is retried like any failure), logs
// the stack and counts it in m (when not nil). The server always installs it.
func recoverWith(log *zap.Logger, m *metrics) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, t *Task) (err error) {
			defer func() {
				if r := recover(); r != nil {
					if m != nil {
						m.panics.WithLabelValues(t.queue, t.typ).Inc()
					}
					log.Error("task panicked", zap.String("type", t.typ), zap.String("id", t.id),
						zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
					err = fmt.Errorf("%s %s: panic: %v", t.typ, t.id, r)
				}
			}()
			return next.ProcessTask(ctx, t)
		})
	}
}

// Logging logs failed runs at warn level and successful ones at debug level.
func Logging(log *zap.Logger) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, t *Task) error {
			start := time.Now()
			err := next.ProcessTask(ctx, t)
			if err == nil && !log.Core().Enabled(zap.DebugLevel) {
				return nil
			}
			f := []zap.Field{zap.String("type", t.typ), zap.String("id", t.id), zap.String("queue", t.queue),
				zap.Int("attempt", t.attempt), zap.Duration("took", time.Since(start))}
			if err != nil {
				log.Warn("task failed", append(f, zap.Error(err))...)
			} else {
				log.Debug("task done", f...)
			}
			return err
		})
	}
}

// PolicyTimeout bounds a run by its Timeout: the one given at enqueue, else its type's policy.
// (asynq applies the enqueue-time timeout too; this also bounds tasks enqueued without one, which
// asynq would give 30 minutes.)
func PolicyTimeout() Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, t *Task) error {
			if dl, ok := ctx.Deadline(); t.policy.Timeout > 0 && (!ok || time.Until(dl) > t.policy.Timeout) {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, t.policy.Timeout)
				defer cancel()
			}
			return next.ProcessTask(ctx, t)
		})
	}
}

// asynqLogger adapts zap to asynq's logger.
type asynqLogger struct{ l *zap.SugaredLogger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(args...) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(args...) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(args...) }
func (a asynqLogger) Error(args ...any) { a.l.Error(args...) }
func (a asynqLogger) Fatal(args ...any) { a.l.Fatal(args...) }
