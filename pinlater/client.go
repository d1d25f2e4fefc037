package pinlater

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// ErrQueueDraining is returned by Client.Enqueue when the queue is in drain mode (see
// Admin.SetDraining): it takes no new tasks until drain mode is lifted. It is PinLater's
// ENQUEUE_REJECTED.
var ErrQueueDraining = errors.New("queue is draining: enqueue rejected")

// Task headers written by the client and read by the server.
const (
	hdrMaxAttempts = "pinlater-max-attempts"
	hdrDueMs       = "pinlater-due-ms"
	hdrTimeoutMs   = "pinlater-timeout-ms"
)

// crashMargin is how many runs beyond MaxAttempts asynq itself allows. The server archives a task
// whose handler failed on its last allowed attempt; asynq's own limit only matters for runs that
// never returned (a worker killed mid-task), which asynq counts as failures too. Keeping asynq's
// limit above ours also means a rate-limit deferral on the last attempt never archives a task.
const crashMargin = 3

// RedisAddr is the connection option for a Redis at addr (host:port), database 0. For Sentinel
// or Redis Cluster, see RedisConfig.ConnOpt.
func RedisAddr(addr string) asynq.RedisConnOpt { return RedisConfig{Addr: addr}.ConnOpt() }

// ClientOption configures a Client or an Admin.
type ClientOption func(*clientOptions)

type clientOptions struct {
	namespace string
	drainTTL  time.Duration
	tp        trace.TracerProvider
}

// WithNamespace prefixes every queue name and pinlater key in Redis with ns, so several
// deployments (or tests) can share one Redis. Servers and admins must use the same namespace. A
// namespace is letters, digits and '_' (queue "critical" of namespace "ns" is "ns-critical").
func WithNamespace(ns string) ClientOption { return func(o *clientOptions) { o.namespace = ns } }

// WithDrainCheck sets how long the client trusts its cached copy of the set of draining queues
// (default 1 s): a queue put in drain mode refuses enqueues from every client within that time.
func WithDrainCheck(d time.Duration) ClientOption { return func(o *clientOptions) { o.drainTTL = d } }

// Info describes an enqueued task.
type Info struct {
	ID        string // task ID (the deterministic one for deduplicated tasks)
	Type      string
	Queue     string // logical queue name
	Duplicate bool   // a task with the same ID already existed: nothing was enqueued
	Deferred  bool   // DurableClient: recorded in the outbox, Redis did not take it yet (the relay will)
}

// Client enqueues tasks. It is safe for concurrent use; make one per process and Close it.
type Client struct {
	c          *asynq.Client
	rdb        redis.UniversalClient
	keys       keys
	log        *zap.Logger
	m          *metrics
	ttl        time.Duration
	mu         sync.Mutex
	drainT     time.Time
	refreshing bool // a caller is reading the drain set from Redis
	drain      map[string]bool
	tracer     trace.Tracer // nil: no spans
}

// NewClient returns a client over the given Redis. logger and reg may be nil.
func NewClient(r asynq.RedisConnOpt, logger *zap.Logger, reg prometheus.Registerer, opts ...ClientOption) (*Client, error) {
	o := clientOptions{drainTTL: time.Second}
	for _, f := range opts {
		f(&o)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := checkNamespace(o.namespace); err != nil {
		return nil, fmt.Errorf("pinlater client: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("pinlater client metrics: %w", err)
	}
	rdb := universal(r)
	if rdb == nil {
		return nil, errors.New("pinlater client: unsupported redis connection option")
	}
	return &Client{c: asynq.NewClient(r), rdb: rdb, keys: keysFor(rdb, o.namespace), log: logger, m: m, ttl: o.drainTTL,
		tracer: tracerOf(o.tp)}, nil
}

// Close releases the client's connections.
func (c *Client) Close() error {
	err := c.c.Close()
	if e := c.rdb.Close(); err == nil {
		err = e
	}
	return err
}

// Enqueue puts t in its queue. A task whose deterministic ID already exists is not enqueued again:
// Enqueue returns an Info with Duplicate set and no error (the work is already scheduled).
func (c *Client) Enqueue(ctx context.Context, t *Task, opts ...Option) (*Info, error) {
	if t == nil || t.typ == "" {
		return nil, errors.New("enqueue: nil task")
	}
	if c.tracer != nil {
		return c.tracedEnqueue(ctx, t, func(ctx context.Context) (*Info, error) { return c.enqueue(ctx, t, opts) })
	}
	return c.enqueue(ctx, t, opts)
}

// enqueue is Enqueue of a task, with its trace context (ctx's span) in its headers.
func (c *Client) enqueue(ctx context.Context, t *Task, opts []Option) (*Info, error) {
	o := enqueueOptions{queue: t.policy.Queue, maxAttempts: t.policy.MaxAttempts, timeout: t.policy.Timeout}
	for _, f := range opts {
		f(&o)
	}
	if o.queue == "" {
		return nil, fmt.Errorf("enqueue %s: empty queue name", t.typ)
	}
	if o.maxAttempts < 1 {
		return nil, fmt.Errorf("enqueue %s: max attempts %d (want at least 1)", t.typ, o.maxAttempts)
	}
	draining, err := c.isDraining(ctx, o.queue)
	if err != nil {
		return nil, fmt.Errorf("enqueue %s: %w", t.typ, err)
	}
	if draining {
		c.m.rejected.WithLabelValues(o.queue, t.typ).Inc()
		return nil, fmt.Errorf("enqueue %s to %s: %w", t.typ, o.queue, ErrQueueDraining)
	}
	due := time.Now()
	if !o.processAt.IsZero() && o.processAt.After(due) {
		due = o.processAt
	}
	headers := map[string]string{
		hdrMaxAttempts: strconv.Itoa(o.maxAttempts),
		hdrDueMs:       strconv.FormatInt(due.UnixMilli(), 10),
		hdrTimeoutMs:   strconv.FormatInt(o.timeout.Milliseconds(), 10),
	}
	if o.outbox != "" {
		headers[hdrOutbox] = o.outbox
	}
	injectTrace(ctx, headers)
	aopts := []asynq.Option{
		asynq.Queue(c.keys.queue(o.queue)),
		asynq.MaxRetry(o.maxAttempts - 1 + crashMargin),
	}
	if o.timeout > 0 {
		aopts = append(aopts, asynq.Timeout(o.timeout))
	}
	if !o.deadline.IsZero() {
		aopts = append(aopts, asynq.Deadline(o.deadline))
	}
	if !o.processAt.IsZero() {
		aopts = append(aopts, asynq.ProcessAt(o.processAt))
	}
	id := t.id
	if o.id != nil {
		id = *o.id
	}
	if id != "" {
		aopts = append(aopts, asynq.TaskID(id))
	}
	info, err := c.c.EnqueueContext(ctx, asynq.NewTaskWithHeaders(t.typ, t.payload, headers), aopts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		c.m.duplicates.WithLabelValues(o.queue, t.typ).Inc()
		return &Info{ID: id, Type: t.typ, Queue: o.queue, Duplicate: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("enqueue %s: %w", t.typ, err)
	}
	c.m.enqueued.WithLabelValues(o.queue, t.typ).Inc()
	return &Info{ID: info.ID, Type: t.typ, Queue: o.queue}, nil
}

// isDraining reports whether queue is in drain mode, from a copy refreshed every c.ttl. No lock
// is held across the Redis call: while one caller refreshes, the others answer from the copy
// they have, and a caller with no copy reads Redis itself under its own context. When Redis
// fails and a copy exists, the copy answers (the enqueue that follows meets the outage itself).
func (c *Client) isDraining(ctx context.Context, queue string) (bool, error) {
	c.mu.Lock()
	if c.drain != nil && (time.Since(c.drainT) < c.ttl || c.refreshing) {
		v := c.drain[queue]
		c.mu.Unlock()
		return v, nil
	}
	owner := !c.refreshing
	c.refreshing = true
	c.mu.Unlock()

	qs, err := c.rdb.SMembers(ctx, c.keys.draining()).Result()

	c.mu.Lock()
	defer c.mu.Unlock()
	if owner {
		c.refreshing = false
	}
	if err != nil {
		if c.drain != nil {
			return c.drain[queue], nil
		}
		return false, fmt.Errorf("read drain set: %w", err)
	}
	c.drain = make(map[string]bool, len(qs))
	for _, q := range qs {
		c.drain[q] = true
	}
	c.drainT = time.Now()
	return c.drain[queue], nil
}

// Ping checks that Redis answers within ctx (readiness probes).
func (c *Client) Ping(ctx context.Context) error {
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

func checkNamespace(ns string) error {
	if len(ns) > 64 {
		return fmt.Errorf("namespace %q: longer than 64 bytes", ns)
	}
	for _, c := range ns {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("namespace %q: only letters, digits and '_' allowed", ns)
		}
	}
	return nil
}

// keys names the Redis keys and physical queue names of a namespace. tagged (on a Redis Cluster)
// puts the namespace's own pinlater keys in one hash slot: "{pinlater}:" or "{pinlater:<ns>}:".
type keys struct {
	ns     string
	tagged bool
}

func (k keys) prefix() string {
	if k.tagged {
		if k.ns == "" {
			return "{pinlater}:"
		}
		return "{pinlater:" + k.ns + "}:"
	}
	if k.ns == "" {
		return "pinlater:"
	}
	return "pinlater:" + k.ns + ":"
}

// queue is the asynq queue name of a logical queue.
func (k keys) queue(q string) string {
	if k.ns == "" {
		return q
	}
	return k.ns + "-" + q
}

// logical is the logical name of an asynq queue, ok false if it belongs to another namespace.
func (k keys) logical(phys string) (string, bool) {
	if k.ns == "" {
		return phys, true
	}
	p := k.ns + "-"
	if len(phys) > len(p) && phys[:len(p)] == p {
		return phys[len(p):], true
	}
	return "", false
}

func (k keys) rates() string    { return k.prefix() + "rates" }
func (k keys) draining() string { return k.prefix() + "draining" }
func (k keys) orphan(h string) string {
	return k.prefix() + "orphan:" + h
}
func (k keys) rateState(q string) string {
	return k.prefix() + "tat:" + q
}
func (k keys) reservation(q, id string) string { return k.prefix() + "resv:" + q + ":" + id }
