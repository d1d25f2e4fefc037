package feedsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Replicator is a zen.Table over the primary that copies every write to the standby
// asynchronously: writes land on the primary, then queue (bounded) for a single applier that
// batches them onto the standby in order. Reads go to the primary.
//
// Why in process and not a pinlater job: the target is a lag of a few hundred milliseconds at
// most, and a job per write would add Redis round trips and polling to every write. What a
// crash loses (writes queued but not applied) is repaired by Resync; HBase deployments can use
// HBase's own cluster replication instead (see docs/feedsvc-benchmarks.md).
//
// Concurrent writes of one key may reach the standby in the other order than on the primary.
// feedsvc's writes are ordered per key (each key's writes happen one after the other) except
// the chunk counter, which the standby never serves.
type Replicator struct {
	primary, standby zen.Table
	queue            chan replOp
	maxBatch         int
	log              *zap.Logger
	m                replMetrics

	head     atomic.Int64 // enqueue time (unix ns) of the oldest write being applied, 0 if idle
	enqueued atomic.Int64
	applied  atomic.Int64
	mu       sync.Mutex
	cond     *sync.Cond
}

var _ zen.Table = (*Replicator)(nil)

type replOp struct {
	muts []zen.Mutation
	at   time.Time
}

// ReplicatorOptions configures a Replicator.
type ReplicatorOptions struct {
	// QueueSize is the number of writes that may wait; beyond it writes are not replicated and
	// counted as dropped (the standby then needs a Resync). Default 65536.
	QueueSize int
	// MaxBatch is the largest number of mutations applied to the standby at once. Default 512.
	MaxBatch int
	Logger   *zap.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

type replMetrics struct {
	lag     prometheus.Histogram
	dropped prometheus.Counter
	retries prometheus.Counter
	backlog prometheus.GaugeFunc
	oldest  prometheus.GaugeFunc
}

// NewReplicator returns a Replicator; call Run to start applying.
func NewReplicator(primary, standby zen.Table, o ReplicatorOptions) (*Replicator, error) {
	if o.QueueSize == 0 {
		o.QueueSize = 1 << 16
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 512
	}
	if o.QueueSize < 1 || o.MaxBatch < 1 {
		return nil, fmt.Errorf("replicator: queue size %d and max batch %d must be positive", o.QueueSize, o.MaxBatch)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	r := &Replicator{primary: primary, standby: standby, queue: make(chan replOp, o.QueueSize),
		maxBatch: o.MaxBatch, log: o.Logger}
	r.cond = sync.NewCond(&r.mu)
	r.m = replMetrics{
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "smartfeed_feed_replication_lag_seconds",
			Help:    "Time from a write on the primary to its application on the standby.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_replication_dropped_total",
			Help: "Writes not replicated because the queue was full (the standby needs a resync)."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_replication_retries_total", Help: "Failed standby applies, retried."}),
		backlog: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smartfeed_feed_replication_backlog", Help: "Writes waiting for the standby."},
			func() float64 { return float64(r.enqueued.Load() - r.applied.Load()) }),
		oldest: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smartfeed_feed_replication_staleness_seconds",
			Help: "Age of the oldest write not yet on the standby: how stale a standby read can be."},
			func() float64 { return r.Staleness().Seconds() }),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{r.m.lag, r.m.dropped, r.m.retries, r.m.backlog, r.m.oldest} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register replication metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Staleness is the age of the oldest write not yet applied to the standby (0 when caught up).
func (r *Replicator) Staleness() time.Duration {
	h := r.head.Load()
	if h == 0 {
		return 0
	}
	return time.Since(time.Unix(0, h))
}

func (r *Replicator) enqueue(muts []zen.Mutation) {
	if len(muts) == 0 {
		return
	}
	cp := make([]zen.Mutation, len(muts))
	for i, m := range muts {
		cp[i] = zen.Mutation{Key: bytes.Clone(m.Key), Value: bytes.Clone(m.Value), Delete: m.Delete}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	op := replOp{muts: cp, at: time.Now()}
	select {
	case r.queue <- op:
		r.enqueued.Add(1)
	default:
		r.m.dropped.Inc()
		r.log.Error("replication queue full: write not replicated; resync the standby", zap.Int("mutations", len(muts)))
	}
}

// Run applies queued writes to the standby until ctx is done. A failed apply is retried with
// backoff, in order. It returns ctx's error.
func (r *Replicator) Run(ctx context.Context) error {
	for {
		var first replOp
		select {
		case <-ctx.Done():
			return ctx.Err()
		case first = <-r.queue:
		}
		r.head.Store(first.at.UnixNano())
		batch := []replOp{first}
		n := len(first.muts)
	drain:
		for n < r.maxBatch {
			select {
			case op := <-r.queue:
				batch = append(batch, op)
				n += len(op.muts)
			default:
				break drain
			}
		}
		muts := make([]zen.Mutation, 0, n)
		for _, op := range batch {
			muts = append(muts, op.muts...)
		}
		for backoff := time.Millisecond; ; backoff = min(2*backoff, time.Second) {
			err := r.standby.Apply(ctx, muts)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.m.retries.Inc()
			r.log.Warn("apply to standby", zap.Int("mutations", len(muts)), zap.Error(err))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
		}
		now := time.Now()
		for _, op := range batch {
			r.m.lag.Observe(now.Sub(op.at).Seconds())
		}
		r.head.Store(0)
		r.mu.Lock()
		r.applied.Add(int64(len(batch)))
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// Flush waits until every write enqueued before the call is on the standby, or ctx is done.
func (r *Replicator) Flush(ctx context.Context) error {
	target := r.enqueued.Load()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.applied.Load() < target {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.cond.Wait()
	}
	return nil
}

// Get reads from the primary.
func (r *Replicator) Get(ctx context.Context, key []byte) ([]byte, error) {
	return r.primary.Get(ctx, key)
}

// Scan reads from the primary.
func (r *Replicator) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	return r.primary.Scan(ctx, o)
}

// Apply writes to the primary, then queues the batch for the standby.
func (r *Replicator) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := r.primary.Apply(ctx, muts); err != nil {
		return err
	}
	r.enqueue(muts)
	return nil
}

// CheckAndSet runs on the primary; when it wrote, the resulting row is queued for the standby.
func (r *Replicator) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	ok, err := r.primary.CheckAndSet(ctx, key, expected, value)
	if err != nil || !ok {
		return ok, err
	}
	r.enqueue([]zen.Mutation{{Key: key, Value: value, Delete: value == nil}})
	return true, nil
}

// Increment runs on the primary; the new counter value is queued for the standby.
func (r *Replicator) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	n, err := r.primary.Increment(ctx, key, delta)
	if err != nil {
		return n, err
	}
	r.enqueue([]zen.Mutation{{Key: key, Value: binary.BigEndian.AppendUint64(nil, uint64(n))}})
	return n, nil
}

// Resync copies user's rows from the primary to the standby and deletes the standby's rows the
// primary lacks: the repair after dropped writes or a crash with writes still queued. It
// returns the number of standby rows changed.
func Resync(ctx context.Context, primary, standby zen.Table, user zen.ID) (int, error) {
	changed := 0
	for _, p := range []byte{prefixFeed, prefixPin, prefixCounter, prefixDone} {
		start := userPrefix(p, user)
		o := zen.ScanOptions{Start: start, Stop: prefixEnd(start)}
		src, err := primary.Scan(ctx, o)
		if err != nil {
			return changed, fmt.Errorf("resync %d: scan primary: %w", user, err)
		}
		dst, err := standby.Scan(ctx, o)
		if err != nil {
			return changed, fmt.Errorf("resync %d: scan standby: %w", user, err)
		}
		have := make(map[string][]byte, len(dst))
		for _, kv := range dst {
			have[string(kv.Key)] = kv.Value
		}
		var muts []zen.Mutation
		for _, kv := range src {
			if v, ok := have[string(kv.Key)]; !ok || !bytes.Equal(v, kv.Value) {
				muts = append(muts, zen.Mutation{Key: kv.Key, Value: kv.Value})
			}
			delete(have, string(kv.Key))
		}
		for k := range have {
			muts = append(muts, zen.Mutation{Key: []byte(k), Delete: true})
		}
		if len(muts) == 0 {
			continue
		}
		if err := standby.Apply(ctx, muts); err != nil {
			return changed, fmt.Errorf("resync %d: %w", user, err)
		}
		changed += len(muts)
	}
	return changed, nil
}
