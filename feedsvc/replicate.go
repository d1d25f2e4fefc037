package feedsvc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// Replicator is a zen.Table over the primary that copies every write to the standby through a
// change log kept in the primary itself: durable, replayed after a crash, and immune to the
// order in which concurrent writes of one key land.
//
// A log entry names the keys a write touched, under the reserved prefix 0xFF 'r' 'l' (every feed
// row begins with a zen.ID, whose first byte is at most 0x3F, so the log never mixes with feed
// rows). Apply writes its entry in the same atomic batch as the change. CheckAndSet and
// Increment, single-row operations that cannot carry a second row, write a pending entry first
// and mark it committed after the operation. The applier (Run) reads the log in pages, copies the
// current primary value of each named key to the standby (a delete where the primary has none),
// and then deletes the committed entries it copied: an entry is acknowledged only once its keys
// are on the standby. A crash anywhere leaves entries in the log, and the next Run replays them;
// copying is idempotent. Because the applier copies current values, never the values a writer
// saw, two writes of one key cannot reach the standby in the wrong order: the standby converges
// to the primary. A pending entry is copied on every pass and deleted once committed, or once
// older than PendingTimeout (its writer crashed mid-operation; the final copy reads what the
// primary holds).
//
// The standby's staleness is the age of the oldest entry not yet applied; it is exported as
// smartfeed_replication_lag_seconds, the same gauge the HBase-replication canary sets.
type Replicator struct {
	primary, standby zen.Table
	maxBatch         int
	pendingTimeout   time.Duration
	log              *zap.Logger
	m                replMetrics
	lags             *LagLog

	lastSeq atomic.Uint64 // last log sequence handed out (unix ns, made unique)
	// inflight holds the sequences handed out whose entry's write has not returned; a pass
	// cannot have seen them. Under seqMu, with the handing out, so a pass's low-water mark
	// never passes a sequence about to be written.
	seqMu    sync.Mutex
	inflight map[uint64]struct{}
	// floor is where a pass starts reading the log: every entry below it was applied and
	// deleted. Acknowledged entries leave tombstones in an LSM store until compaction, and a
	// scan from the log's start walks them all, on every pass; starting at the floor does not.
	// Every fullScanEvery a pass starts at the log's start all the same (an entry a pass
	// acknowledged pending past PendingTimeout and committed after, another process's ResyncAll).
	floor    atomic.Uint64
	lastFull time.Time
	oldest   atomic.Int64 // log time (unix ns) of the oldest entry not yet applied, 0 if none
	wake     chan struct{}
	mu       sync.Mutex
	cond     *sync.Cond
	passes   uint64 // applier passes completed, under mu
}

var (
	_ zen.Table       = (*Replicator)(nil)
	_ zen.MultiGetter = (*Replicator)(nil)
	_ zen.Carrier     = (*Replicator)(nil)
)

// ReplicatorOptions configures a Replicator.
type ReplicatorOptions struct {
	// MaxBatch is the most log entries applied to the standby at once. Default 512.
	MaxBatch int
	// PendingTimeout is how long a CheckAndSet or Increment may leave its entry pending before
	// the applier treats its writer as gone. Default 30s.
	PendingTimeout time.Duration
	Logger         *zap.Logger
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

type replMetrics struct {
	lag     prometheus.Histogram
	retries prometheus.Counter
	applied prometheus.Counter
	stale   prometheus.GaugeFunc
	oldest  prometheus.GaugeFunc
}

// Change-log layout: logPrefix | seq(8) → state(1) | count(uvarint) | (len(uvarint) | key)*.
var logPrefix = []byte{0xff, 'r', 'l'}

const (
	entryCommitted = 0
	entryPending   = 1
)

// NewReplicator returns a Replicator; call Run to start applying (and replaying what an
// earlier process left in the log).
func NewReplicator(primary, standby zen.Table, o ReplicatorOptions) (*Replicator, error) {
	if o.MaxBatch == 0 {
		o.MaxBatch = 512
	}
	if o.PendingTimeout == 0 {
		o.PendingTimeout = 30 * time.Second
	}
	if o.MaxBatch < 1 || o.PendingTimeout < 0 {
		return nil, fmt.Errorf("replicator: max batch %d and pending timeout %v must be positive", o.MaxBatch, o.PendingTimeout)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	r := &Replicator{primary: primary, standby: standby, maxBatch: o.MaxBatch,
		pendingTimeout: o.PendingTimeout, log: o.Logger, wake: make(chan struct{}, 1),
		lags: newLagLog(replicatorLagLogSize)}
	r.cond = sync.NewCond(&r.mu)
	r.m = replMetrics{
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "smartfeed_feed_replication_lag_seconds",
			Help:    "Time from a write on the primary to its application on the standby.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_replication_retries_total", Help: "Failed standby applies or log reads, retried."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_replication_applied_total", Help: "Change-log entries applied to the standby."}),
		stale: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smartfeed_replication_lag_seconds",
			Help: "How far the standby is behind the primary: the age of the oldest change not yet on it."},
			func() float64 { return r.Staleness().Seconds() }),
		oldest: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "smartfeed_feed_replication_staleness_seconds",
			Help: "Age of the oldest write not yet on the standby: how stale a standby read can be."},
			func() float64 { return r.Staleness().Seconds() }),
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{r.m.lag, r.m.retries, r.m.applied, r.m.stale, r.m.oldest} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register replication metrics: %w", err)
			}
		}
	}
	return r, nil
}

// replicatorLagLogSize is how many write-to-standby times Lags keeps (one per change-log entry).
const replicatorLagLogSize = 1 << 16

// Lags is the log of write-to-standby times, one per change-log entry applied (the samples of
// smartfeed_feed_replication_lag_seconds, exact).
func (r *Replicator) Lags() *LagLog { return r.lags }

// Staleness is the age of the oldest write not yet applied to the standby (0 when caught up).
func (r *Replicator) Staleness() time.Duration {
	h := r.oldest.Load()
	if h == 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, h)))
}

// fullScanEvery is how often a pass reads the change log from its start instead of its floor.
const fullScanEvery = 10 * time.Second

// begin hands out a log sequence for an entry about to be written; end it once the write
// returned.
func (r *Replicator) begin() uint64 {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	s := r.nextSeq()
	if r.inflight == nil {
		r.inflight = map[uint64]struct{}{}
	}
	r.inflight[s] = struct{}{}
	return s
}

func (r *Replicator) end(s uint64) {
	r.seqMu.Lock()
	delete(r.inflight, s)
	r.seqMu.Unlock()
}

// lowWater is the smallest sequence whose entry may not be readable yet: every entry below it
// was written (or failed) before the call.
func (r *Replicator) lowWater() uint64 {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	low := r.lastSeq.Load() + 1
	for s := range r.inflight {
		low = min(low, s)
	}
	return low
}

// nextSeq returns a log sequence: the current time in ns, bumped past the last one handed out.
func (r *Replicator) nextSeq() uint64 {
	for {
		last := r.lastSeq.Load()
		s := max(uint64(time.Now().UnixNano()), last+1)
		if r.lastSeq.CompareAndSwap(last, s) {
			return s
		}
	}
}

func logKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(logPrefix), seq)
}

func isLogKey(k []byte) bool { return bytes.HasPrefix(k, logPrefix) }

func encodeEntry(state byte, keys [][]byte) []byte {
	b := []byte{state}
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return b
}

func decodeEntry(v []byte) (state byte, keys [][]byte, err error) {
	if len(v) < 1 {
		return 0, nil, errCorrupt
	}
	state, v = v[0], v[1:]
	n, w := minimalUvarint(v)
	if w <= 0 || n > uint64(len(v)) {
		return 0, nil, errCorrupt
	}
	v = v[w:]
	keys = make([][]byte, 0, n)
	for range n {
		l, w := minimalUvarint(v)
		if w <= 0 || l > uint64(len(v)-w) {
			return 0, nil, errCorrupt
		}
		keys = append(keys, v[w:w+int(l)])
		v = v[w+int(l):]
	}
	if len(v) != 0 || state > entryPending {
		return 0, nil, errCorrupt
	}
	return state, keys, nil
}

// minimalUvarint is binary.Uvarint refusing a value not in its shortest form (w < 0 then), so
// that one entry has one encoding.
func minimalUvarint(v []byte) (uint64, int) {
	n, w := binary.Uvarint(v)
	if w > 0 && w != len(binary.AppendUvarint(nil, n)) {
		return 0, -1
	}
	return n, w
}

func (r *Replicator) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run applies the change log to the standby until ctx is done: first whatever an earlier
// process left, then each write as it lands. Failed reads or applies are retried with backoff.
// It returns ctx's error.
func (r *Replicator) Run(ctx context.Context) error {
	backoff := time.Millisecond
	for {
		n, more, err := r.pass(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := 250 * time.Millisecond // a safety poll: the log is the truth, wake-ups an optimisation
		switch {
		case err != nil:
			r.m.retries.Inc()
			r.log.Warn("replicate to standby", zap.Error(err))
			wait, backoff = backoff, min(2*backoff, time.Second)
		case more:
			backoff, wait = time.Millisecond, 0
		default:
			backoff = time.Millisecond
			if n > 0 {
				wait = 5 * time.Millisecond // pending entries only: let their writers finish
			}
		}
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// pass applies one page of the log. It returns the entries left in place (pending ones),
// whether a full page was acknowledged (so more may follow at once), and the first error.
func (r *Replicator) pass(ctx context.Context) (left int, more bool, err error) {
	defer func() {
		r.mu.Lock()
		r.passes++
		r.cond.Broadcast()
		r.mu.Unlock()
	}()
	low := r.lowWater()
	start := logKey(r.floor.Load())
	if now := time.Now(); now.Sub(r.lastFull) >= fullScanEvery {
		start, r.lastFull = logPrefix, now
	}
	rows, err := r.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(logPrefix), Limit: r.maxBatch})
	if err != nil {
		return 0, false, fmt.Errorf("read change log: %w", err)
	}
	if len(rows) == 0 {
		r.oldest.Store(0)
		r.floor.Store(max(r.floor.Load(), low))
		return 0, false, nil
	}
	// The next floor: below the first entry left in place, the next page, and what may still
	// be written.
	floor := low
	if len(rows) == r.maxBatch {
		if k := rows[len(rows)-1].Key; len(k) == len(logPrefix)+8 {
			floor = min(floor, binary.BigEndian.Uint64(k[len(logPrefix):])+1)
		} else {
			floor = r.floor.Load()
		}
	}
	r.oldest.Store(int64(binary.BigEndian.Uint64(rows[0].Key[len(logPrefix):])))
	seen := map[string]bool{}
	var keys [][]byte
	var acks []zen.Mutation
	var ackTimes []int64
	now := time.Now()
	for _, kv := range rows {
		if len(kv.Key) != len(logPrefix)+8 {
			r.log.Error("corrupt change-log key; dropped", zap.Int("len", len(kv.Key)))
			acks = append(acks, zen.Mutation{Key: kv.Key, Delete: true})
			continue
		}
		at := int64(binary.BigEndian.Uint64(kv.Key[len(logPrefix):]))
		state, ks, err := decodeEntry(kv.Value)
		if err != nil {
			r.log.Error("corrupt change-log entry; dropped (run smartfeed resync)", zap.Int64("seq", at))
			acks = append(acks, zen.Mutation{Key: kv.Key, Delete: true})
			continue
		}
		for _, k := range ks {
			if !seen[string(k)] {
				seen[string(k)] = true
				keys = append(keys, k)
			}
		}
		if state == entryPending && now.Sub(time.Unix(0, at)) < r.pendingTimeout {
			left++
			floor = min(floor, uint64(at))
			continue
		}
		acks = append(acks, zen.Mutation{Key: kv.Key, Delete: true})
		ackTimes = append(ackTimes, at)
	}
	if len(keys) > 0 {
		vals, err := zen.GetMany(ctx, r.primary, keys)
		if err != nil {
			return left, false, fmt.Errorf("read primary: %w", err)
		}
		muts := make([]zen.Mutation, len(keys))
		for i, k := range keys {
			muts[i] = zen.Mutation{Key: k, Value: vals[i], Delete: vals[i] == nil}
		}
		if err := r.standby.Apply(ctx, muts); err != nil {
			return left, false, fmt.Errorf("apply %d rows to the standby: %w", len(muts), err)
		}
	}
	if len(acks) > 0 {
		if err := r.primary.Apply(ctx, acks); err != nil {
			return left, false, fmt.Errorf("acknowledge %d change-log entries: %w", len(acks), err)
		}
	}
	r.floor.Store(floor)
	done := time.Now()
	lags := make([]time.Duration, len(ackTimes))
	for i, at := range ackTimes {
		lags[i] = done.Sub(time.Unix(0, at))
		r.m.lag.Observe(lags[i].Seconds())
	}
	r.lags.add(lags...)
	r.m.applied.Add(float64(len(ackTimes)))
	if left == 0 && len(rows) < r.maxBatch {
		r.oldest.Store(0)
	}
	return left, len(rows) == r.maxBatch && len(acks) > 0, nil
}

// Flush waits until every write that completed before the call is on the standby, or ctx is
// done. Sequences are write times, so this covers other processes' entries (ResyncAll) too.
func (r *Replicator) Flush(ctx context.Context) error {
	target := max(r.lastSeq.Load(), uint64(time.Now().UnixNano()))
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	for {
		rows, err := r.primary.Scan(ctx, zen.ScanOptions{Start: logKey(r.floor.Load()), Stop: logKey(target + 1), Limit: 1})
		if err != nil {
			return fmt.Errorf("flush: read change log: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		r.poke()
		r.mu.Lock()
		for p := r.passes; r.passes < p+2 && ctx.Err() == nil; {
			r.cond.Wait()
		}
		r.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func mutationKeys(muts []zen.Mutation) [][]byte {
	keys := make([][]byte, 0, len(muts))
	seen := make(map[string]bool, len(muts))
	for _, m := range muts {
		if !seen[string(m.Key)] {
			seen[string(m.Key)] = true
			keys = append(keys, m.Key)
		}
	}
	return keys
}

func checkNotLog(keys ...[]byte) error {
	for _, k := range keys {
		if isLogKey(k) {
			return fmt.Errorf("replicator: key %x is in the reserved change-log range", k[:min(len(k), 8)])
		}
	}
	return nil
}

// Apply writes the batch and its change-log entry to the primary in one atomic batch.
func (r *Replicator) Apply(ctx context.Context, muts []zen.Mutation) error {
	if len(muts) == 0 {
		return nil
	}
	keys := mutationKeys(muts)
	if err := checkNotLog(keys...); err != nil {
		return err
	}
	all := make([]zen.Mutation, 0, len(muts)+1)
	seq := r.begin()
	all = append(append(all, muts...), zen.Mutation{Key: logKey(seq), Value: encodeEntry(entryCommitted, keys)})
	err := r.primary.Apply(ctx, all)
	r.end(seq)
	if err != nil {
		return err
	}
	r.poke()
	return nil
}

// single runs a single-row operation between a pending change-log entry and its commit.
func (r *Replicator) single(ctx context.Context, key []byte, op func() error) error {
	return r.logged(ctx, [][]byte{key}, op)
}

// logged runs an operation on the rows of keys between a pending change-log entry naming them
// and its commit.
func (r *Replicator) logged(ctx context.Context, keys [][]byte, op func() error) error {
	if err := checkNotLog(keys...); err != nil {
		return err
	}
	seq := r.begin()
	lk := logKey(seq)
	err := r.primary.Apply(ctx, []zen.Mutation{{Key: lk, Value: encodeEntry(entryPending, keys)}})
	r.end(seq)
	if err != nil {
		return err
	}
	opErr := op()
	// Committed whatever the outcome: the applier copies what the primary holds. If this write
	// fails, the entry stays pending until PendingTimeout, then is applied all the same.
	if err := r.primary.Apply(ctx, []zen.Mutation{{Key: lk, Value: encodeEntry(entryCommitted, keys)}}); err != nil && opErr == nil {
		r.log.Warn("commit change-log entry; applied after the pending timeout", zap.Error(err))
	}
	r.poke()
	return opErr
}

// carried runs a single-row operation that writes its committed change-log entry in the same
// atomic commit (a primary that is a zen.Carrier): one write instead of single's three. It
// reports false when the primary cannot, having written nothing.
func (r *Replicator) carried(ctx context.Context, key []byte, op func(c zen.Carrier, extra []zen.Mutation) error) (bool, error) {
	return r.carriedWith(ctx, key, nil, op)
}

// carriedWith is carried for an operation that also writes more: the log entry names key and
// more's keys, and goes last in the extra rows op writes.
func (r *Replicator) carriedWith(ctx context.Context, key []byte, more []zen.Mutation, op func(c zen.Carrier, extra []zen.Mutation) error) (bool, error) {
	c, ok := r.primary.(zen.Carrier)
	if !ok {
		return false, nil
	}
	keys := append([][]byte{key}, mutationKeys(more)...)
	if err := checkNotLog(keys...); err != nil {
		return true, err
	}
	seq := r.begin()
	extra := append(slices.Clip(more), zen.Mutation{Key: logKey(seq), Value: encodeEntry(entryCommitted, keys)})
	err := op(c, extra)
	r.end(seq)
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	if err == nil {
		r.poke()
	}
	return true, err
}

// CheckAndSetWith is zen.Carrier's: the compare-and-set, extra and their change-log entry in
// one commit. It fails with errors.ErrUnsupported, writing nothing, when the primary cannot.
func (r *Replicator) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	var ok bool
	done, err := r.carriedWith(ctx, key, extra, func(c zen.Carrier, all []zen.Mutation) (err error) {
		ok, err = c.CheckAndSetWith(ctx, key, expected, value, all)
		return err
	})
	if !done {
		return false, fmt.Errorf("replicator: check-and-set with extra rows: %w", errors.ErrUnsupported)
	}
	return ok, err
}

// IncrementWith is zen.Carrier's: the increment, extra and their change-log entry in one
// commit. It fails with errors.ErrUnsupported, writing nothing, when the primary cannot.
func (r *Replicator) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	var n int64
	done, err := r.carriedWith(ctx, key, extra, func(c zen.Carrier, all []zen.Mutation) (err error) {
		n, err = c.IncrementWith(ctx, key, delta, all)
		return err
	})
	if !done {
		return 0, fmt.Errorf("replicator: increment with extra rows: %w", errors.ErrUnsupported)
	}
	return n, err
}

// CheckAndSet runs on the primary with its change-log entry in the same commit where the
// primary allows, else between a pending change-log entry and its commit.
func (r *Replicator) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	var ok bool
	if done, err := r.carried(ctx, key, func(c zen.Carrier, extra []zen.Mutation) (err error) {
		ok, err = c.CheckAndSetWith(ctx, key, expected, value, extra)
		return err
	}); done {
		return ok, err
	}
	err := r.single(ctx, key, func() (err error) {
		ok, err = r.primary.CheckAndSet(ctx, key, expected, value)
		return err
	})
	return ok, err
}

// Increment runs on the primary with its change-log entry in the same commit where the primary
// allows, else between a pending change-log entry and its commit.
func (r *Replicator) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	var n int64
	if done, err := r.carried(ctx, key, func(c zen.Carrier, extra []zen.Mutation) (err error) {
		n, err = c.IncrementWith(ctx, key, delta, extra)
		return err
	}); done {
		return n, err
	}
	err := r.single(ctx, key, func() (err error) {
		n, err = r.primary.Increment(ctx, key, delta)
		return err
	})
	return n, err
}

// ResyncAll queues every row of the primary and of the standby for copying, through the change
// log: the repair for a standby that was rebuilt or that missed writes. It writes the entries
// only; a running Replicator (or the next one to start) applies them. progress, if set, is
// called with the rows queued so far. It returns the number of rows queued.
func ResyncAll(ctx context.Context, primary, standby zen.Table, progress func(n int)) (int, error) {
	r := &Replicator{primary: primary}
	total := 0
	for _, src := range []struct {
		name string
		t    zen.Table
	}{{"primary", primary}, {"standby", standby}} {
		var start []byte
		for {
			rows, err := src.t.Scan(ctx, zen.ScanOptions{Start: start, Stop: logPrefix, Limit: 1000})
			if err != nil {
				return total, fmt.Errorf("resync: scan %s: %w", src.name, err)
			}
			if len(rows) == 0 {
				break
			}
			keys := make([][]byte, len(rows))
			for i, kv := range rows {
				keys[i] = kv.Key
			}
			if err := primary.Apply(ctx, []zen.Mutation{{Key: logKey(r.nextSeq()), Value: encodeEntry(entryCommitted, keys)}}); err != nil {
				return total, fmt.Errorf("resync: queue: %w", err)
			}
			total += len(rows)
			if progress != nil {
				progress(total)
			}
			start = append(bytes.Clone(rows[len(rows)-1].Key), 0)
		}
	}
	return total, nil
}

// Resync copies user's rows from the primary to the standby and deletes the standby's rows the
// primary lacks: the repair after dropped writes or a crash with writes still queued. It
// returns the number of standby rows changed.
func Resync(ctx context.Context, primary, standby zen.Table, user zen.ID) (int, error) {
	changed := 0
	for _, p := range []byte{prefixFeed, prefixPin, prefixCounter, prefixDone} {
		start := userPrefix(p, user)
		o := zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(start)}
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
