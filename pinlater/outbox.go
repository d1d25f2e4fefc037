package pinlater

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// hdrOutbox carries the outbox row key of a task enqueued through a DurableClient; the server
// deletes that row once the task is done.
const hdrOutbox = "pinlater-outbox"

// OutboxStore is where a DurableClient records its tasks until they are done: a table of the
// service's own store (*zen.Outbox satisfies it). Keys and values are laid out by pinlater.
type OutboxStore interface {
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	Range(ctx context.Context, start, stop []byte, limit int, fn func(key, value []byte) error) error
}

// DoneDeleter is an optional extension of OutboxStore: DeleteDone removes the row of a finished
// task without waiting for the removal to be durable. A crash that loses it only costs one more
// run of the (idempotent) task, which the relay re-enqueues, so the server does not hold the
// task's slot for an fsync.
type DoneDeleter interface {
	DeleteDone(ctx context.Context, key []byte) error
}

// outboxRecord is an outbox row's value: everything needed to enqueue the task again.
type outboxRecord struct {
	Type        string `json:"type"`
	Payload     []byte `json:"payload"`
	Queue       string `json:"queue"`
	ID          string `json:"id"`
	MaxAttempts int    `json:"max_attempts"`
	TimeoutMs   int64  `json:"timeout_ms,omitempty"`
	DeadlineMs  int64  `json:"deadline_ms,omitempty"`
	DueMs       int64  `json:"due_ms"`
	// Trace is the W3C trace context of the enqueuing span (trace.go), so that a relayed
	// task's runs join the trace of the call that caused them.
	Trace map[string]string `json:"trace,omitempty"`
}

// outboxKey is the row key of task id: two hex digits of its hash (rows spread over the
// table's regions) and the ID. One row per ID: a second event with the ID of a task still
// pending replaces the row, as pinlater deduplicates the task itself.
func outboxKey(id string) []byte {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Appendf(nil, "%02x:%s", h.Sum32()&0xff, id)
}

// Defaults of DurableOptions' fields that the binary's configuration (internal/config) takes as
// its own.
const (
	// DefaultOutboxGrace is DurableOptions.Grace's default.
	DefaultOutboxGrace = 30 * time.Second
	// DefaultRelayInterval is DurableOptions.RelayInterval's default.
	DefaultRelayInterval = 10 * time.Second
)

// DurableOptions configures a DurableClient.
type DurableOptions struct {
	// EnqueueTimeout bounds the Redis enqueue that follows the outbox write; when Redis does
	// not answer in time the task stays in the outbox for the relay. Default 500 ms.
	EnqueueTimeout time.Duration
	// Backoff is how often, after an enqueue that Redis failed, a background ping checks
	// whether Redis is back; until one answers, Enqueue leaves every task to the relay without
	// trying Redis (no caller waits EnqueueTimeout through an outage). Default 1 s.
	Backoff time.Duration
	// Grace is how long after its due time a row must be before the relay looks for its task in
	// Redis (the inline enqueue has long finished by then). Default 30 s.
	Grace time.Duration
	// RelayInterval is how often Relay runs a pass. Default 10 s.
	RelayInterval time.Duration
	// RelayBatch is how many rows a pass reads per scan. Default 1000.
	RelayBatch int
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// Logger and Registerer may be nil.
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// DurableClient enqueues tasks durably: it records each task in the outbox (a table of the
// service's store) before it enqueues it in Redis, and the server deletes the row when the task
// is done. Enqueue returns OK once the row is written, even when Redis is down or slow: the task
// is then in the store and Relay enqueues it when Redis answers. If Redis loses tasks (a restart
// without its data, a failover, a flush), Relay finds their rows and enqueues them again.
//
// Every task enqueued this way has an ID (its type's deterministic one, or a random one), so a
// task enqueued both inline and by the relay runs once. Handlers must still be idempotent: a
// task can run again when its worker dies after the handler returned.
type DurableClient struct {
	c   *Client
	box OutboxStore
	o   DurableOptions
	log *zap.Logger

	written, deferred, relayed prometheus.Counter
	backlog                    prometheus.Gauge
	down                       atomic.Bool  // Redis failed an enqueue; no ping has answered since
	probing                    atomic.Bool  // a background ping is out
	lastProbe                  atomic.Int64 // unix ns of the last ping sent
}

// NewDurableClient returns a client that records its tasks in box before enqueuing them with c.
func NewDurableClient(c *Client, box OutboxStore, o DurableOptions) (*DurableClient, error) {
	if c == nil || box == nil {
		return nil, errors.New("durable client: nil client or outbox")
	}
	if o.EnqueueTimeout <= 0 {
		o.EnqueueTimeout = 500 * time.Millisecond
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Grace <= 0 {
		o.Grace = DefaultOutboxGrace
	}
	if o.RelayInterval <= 0 {
		o.RelayInterval = DefaultRelayInterval
	}
	if o.RelayBatch <= 0 {
		o.RelayBatch = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	d := &DurableClient{c: c, box: box, o: o, log: o.Logger}
	for _, m := range []struct {
		dst        *prometheus.Counter
		name, help string
	}{
		{&d.written, "outbox_written_total", "Tasks recorded in the outbox."},
		{&d.deferred, "outbox_deferred_total", "Tasks left to the relay because Redis did not take them inline."},
		{&d.relayed, "outbox_relayed_total", "Tasks the relay enqueued (Redis had not taken or had lost them)."},
	} {
		c, err := register(o.Registerer, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pinlater", Name: m.name, Help: m.help}))
		if err != nil {
			return nil, fmt.Errorf("durable client metrics: %w", err)
		}
		*m.dst = c
	}
	g, err := register(o.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pinlater", Name: "outbox_overdue",
		Help: "Outbox rows past their grace period at the last relay pass (their task was not in Redis, or was still queued)."}))
	if err != nil {
		return nil, fmt.Errorf("durable client metrics: %w", err)
	}
	d.backlog = g
	return d, nil
}

// Enqueue records t in the outbox, then enqueues it in Redis within EnqueueTimeout. It fails only
// when the outbox write fails or the queue is draining; a Redis failure leaves the task to the
// relay and returns an Info with Deferred set.
func (d *DurableClient) Enqueue(ctx context.Context, t *Task, opts ...Option) (*Info, error) {
	if t == nil || t.typ == "" {
		return nil, errors.New("enqueue: nil task")
	}
	o := enqueueOptions{queue: t.policy.Queue, maxAttempts: t.policy.MaxAttempts, timeout: t.policy.Timeout}
	for _, f := range opts {
		f(&o)
	}
	id := t.id
	if o.id != nil {
		id = *o.id
	}
	if id == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = t.typ + ":" + hex.EncodeToString(b[:])
	}
	now := d.o.Now()
	rec := outboxRecord{Type: t.typ, Payload: t.payload, Queue: o.queue, ID: id, MaxAttempts: o.maxAttempts,
		TimeoutMs: o.timeout.Milliseconds(), DueMs: now.UnixMilli(), Trace: traceHeaders(ctx)}
	if !o.deadline.IsZero() {
		rec.DeadlineMs = o.deadline.UnixMilli()
	}
	if o.processAt.After(now) {
		rec.DueMs = o.processAt.UnixMilli()
	}
	if rec.Queue == "" || rec.MaxAttempts < 1 {
		return nil, fmt.Errorf("enqueue %s: queue %q, max attempts %d", t.typ, rec.Queue, rec.MaxAttempts)
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("enqueue %s: encode outbox row: %w", t.typ, err)
	}
	key := outboxKey(id)
	if err := d.box.Put(ctx, key, val); err != nil {
		return nil, fmt.Errorf("enqueue %s: %w", t.typ, err)
	}
	d.written.Inc()
	if d.down.Load() {
		d.probe()
		d.deferred.Inc()
		return &Info{ID: id, Type: t.typ, Queue: o.queue, Deferred: true}, nil
	}
	ectx, cancel := context.WithTimeout(ctx, d.o.EnqueueTimeout)
	defer cancel()
	info, err := d.c.Enqueue(ectx, t, append(opts, TaskID(id), withOutboxKey(key))...)
	switch {
	case errors.Is(err, ErrQueueDraining):
		// Refused, not failed: the caller hears it, and nothing waits in the outbox.
		if derr := d.box.Delete(context.WithoutCancel(ctx), key); derr != nil {
			d.log.Warn("outbox: row of a refused task not deleted (the relay will offer it again)", zap.String("id", id), zap.Error(derr))
		}
		return nil, err
	case err != nil:
		if ctx.Err() != nil {
			// The caller gave up, not Redis; the row stays for the relay all the same.
			return nil, fmt.Errorf("enqueue %s: %w", t.typ, ctx.Err())
		}
		if !d.down.Swap(true) {
			d.lastProbe.Store(time.Now().UnixNano())
		}
		d.deferred.Inc()
		d.log.Warn("outbox: Redis did not take the task; the relay will", zap.String("type", t.typ), zap.String("id", id), zap.Error(err))
		return &Info{ID: id, Type: t.typ, Queue: o.queue, Deferred: true}, nil
	}
	return info, nil
}

// probe pings Redis in the background, at most once per Backoff, and marks it up when it
// answers.
func (d *DurableClient) probe() {
	now := time.Now().UnixNano()
	if now-d.lastProbe.Load() < int64(d.o.Backoff) || !d.probing.CompareAndSwap(false, true) {
		return
	}
	d.lastProbe.Store(now)
	go func() {
		defer d.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), d.o.EnqueueTimeout)
		defer cancel()
		if d.c.Ping(ctx) == nil {
			d.down.Store(false)
		}
	}()
}

// withOutboxKey makes the server delete the outbox row when the task is done.
func withOutboxKey(key []byte) Option {
	return func(o *enqueueOptions) { o.outbox = string(key) }
}

// Relay runs RelayOnce every RelayInterval until ctx ends.
func (d *DurableClient) Relay(ctx context.Context) {
	tick := time.NewTicker(d.o.RelayInterval)
	defer tick.Stop()
	for {
		if n, err := d.RelayOnce(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("outbox relay pass failed", zap.Int("relayed", n), zap.Error(err))
		} else if n > 0 {
			d.log.Info("outbox relay enqueued tasks Redis did not have", zap.Int("relayed", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// rowPresent reports whether the outbox still holds the row at key.
func (d *DurableClient) rowPresent(ctx context.Context, key []byte) (bool, error) {
	present := false
	err := d.box.Range(ctx, key, append(append([]byte(nil), key...), 0), 1, func(_, _ []byte) error {
		present = true
		return nil
	})
	return present, err
}

// RelayOnce walks the outbox once and enqueues every task whose row is past its grace period
// and which Redis does not hold (never taken, or lost). It returns how many it enqueued.
func (d *DurableClient) RelayOnce(ctx context.Context) (int, error) {
	cutoff := d.o.Now().Add(-d.o.Grace).UnixMilli()
	var start []byte
	relayed, overdue := 0, 0
	asked := false // whether Redis answered a call of this pass
	for {
		type row struct {
			key []byte
			rec outboxRecord
		}
		var due []row
		n := 0
		var last []byte
		err := d.box.Range(ctx, start, nil, d.o.RelayBatch, func(k, v []byte) error {
			n++
			last = k
			var r outboxRecord
			if err := json.Unmarshal(v, &r); err != nil || r.ID == "" || r.Type == "" {
				d.log.Error("outbox: undecodable row dropped", zap.ByteString("key", k), zap.Error(err))
				if err := d.box.Delete(ctx, k); err != nil {
					return err
				}
				return nil
			}
			if r.DueMs <= cutoff {
				due = append(due, row{key: append([]byte(nil), k...), rec: r})
			}
			return nil
		})
		if err != nil {
			return relayed, err
		}
		overdue += len(due)
		if len(due) > 0 {
			// One pipelined round trip: which of these tasks does Redis hold, in any state?
			// (A completed task without retention is gone.)
			refs := make([]asynqTaskRef, len(due))
			for i, r := range due {
				refs[i] = asynqTaskRef{queue: r.rec.Queue, id: r.rec.ID}
			}
			held, err := d.c.keys.asynqTasksExist(ctx, d.c.rdb, refs)
			if err != nil {
				return relayed, fmt.Errorf("outbox relay: look up tasks: %w", err)
			}
			asked = true
			for i, r := range due {
				if held[i] {
					continue
				}
				// Not in Redis. The server deletes a row before the task leaves Redis, so a row
				// still present now belongs to a task that is really missing.
				if present, err := d.rowPresent(ctx, r.key); err != nil {
					return relayed, err
				} else if !present {
					continue
				}
				if err := d.reenqueue(ctx, r.key, r.rec); errors.Is(err, ErrQueueDraining) {
					continue // offered again once the queue takes tasks
				} else if err != nil {
					return relayed, err
				}
				relayed++
				d.relayed.Inc()
			}
		}
		if n < d.o.RelayBatch {
			break
		}
		start = append(last, 0)
	}
	d.backlog.Set(float64(overdue))
	if asked {
		d.down.Store(false)
	}
	return relayed, nil
}

// reenqueue enqueues a task from its outbox row.
func (d *DurableClient) reenqueue(ctx context.Context, key []byte, r outboxRecord) error {
	t := &Task{typ: r.Type, payload: r.Payload, id: r.ID}
	if pol, ok := DefaultPolicy(r.Type); ok {
		t.policy = pol
	}
	opts := []Option{InQueue(r.Queue), MaxAttempts(r.MaxAttempts), TaskID(r.ID), withOutboxKey(key)}
	if r.TimeoutMs > 0 {
		opts = append(opts, Timeout(time.Duration(r.TimeoutMs)*time.Millisecond))
	}
	if r.DeadlineMs > 0 {
		opts = append(opts, Deadline(time.UnixMilli(r.DeadlineMs)))
	}
	if _, err := d.c.Enqueue(withTraceOf(ctx, r.Trace), t, opts...); err != nil {
		return fmt.Errorf("outbox relay: enqueue %s: %w", r.ID, err)
	}
	return nil
}
