package feedsvc

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
