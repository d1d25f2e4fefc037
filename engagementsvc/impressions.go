package engagementsvc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// Defaults of ImpressionOptions.
const (
	// DefaultImpressionQueue is how many served pages wait for their enqueue at most; a page
	// that finds the queue full is dropped (and counted), never waited for.
	DefaultImpressionQueue = 4096
	// DefaultImpressionSenders is how many goroutines enqueue the queued pages.
	DefaultImpressionSenders = 2
	// DefaultImpressionTimeout bounds one page's enqueue.
	DefaultImpressionTimeout = 5 * time.Second
	// DefaultImpressionDrain bounds how long Close keeps enqueuing the pages still queued.
	DefaultImpressionDrain = 2 * time.Second
)

// Impression is one pin of a served page, at its position on the page.
type Impression struct {
	Pin      zen.ID
	Position int
	Fresh    bool
	Source   zen.Source
}

// ImpressionOptions configures an ImpressionLog; zero fields take the defaults above.
type ImpressionOptions struct {
	Experiment engagement.Experiment
	Queue      int
	Senders    int
	Timeout    time.Duration
	Drain      time.Duration
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// ImpressionLog records the pages the feed served as impressions, through the same engagement
// task a client's Report enqueues (q: the outbox's durable client where the process has one).
// Log never blocks: a page is queued in memory and enqueued by a few background senders, so a
// page's latency does not include the enqueue, and a page never fails because of it. The
// durability is best effort and bounded: at most Queue pages wait in memory, a page that finds
// the queue full, or whose enqueue fails, is dropped and counted, and the pages still queued when
// the process crashes are lost (those left at Close are enqueued for up to Drain). Once enqueued,
// a page is as durable as a Report. A page's request ID is derived from the user, the cursor and
// the pins in order, so the same page served again (a retried request) is applied once.
type ImpressionLog struct {
	q       Enqueuer
	o       ImpressionOptions
	queue   chan servedPage
	mu      sync.RWMutex // held for reading by Log's send, for writing by Close
	closed  bool
	wg      sync.WaitGroup
	drain   context.Context
	stop    context.CancelFunc
	logged  *prometheus.CounterVec
	dup     prometheus.Counter
	dropped *prometheus.CounterVec
}

type servedPage struct {
	user   zen.ID
	cursor string
	items  []Impression
	atMs   int64
}

// Reasons of smartfeed_impressions_dropped_total.
const (
	dropQueueFull = "queue_full"
	dropEnqueue   = "enqueue_failed"
	dropClosed    = "closed"
)

// NewImpressionLog starts the log's senders over q; Close stops them.
func NewImpressionLog(q Enqueuer, o ImpressionOptions) (*ImpressionLog, error) {
	if q == nil {
		return nil, errors.New("impression log: an enqueuer is required")
	}
	if err := o.Experiment.Validate(); err != nil {
		return nil, err
	}
	if o.Queue <= 0 {
		o.Queue = DefaultImpressionQueue
	}
	if o.Senders <= 0 {
		o.Senders = DefaultImpressionSenders
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultImpressionTimeout
	}
	if o.Drain <= 0 {
		o.Drain = DefaultImpressionDrain
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	f := promauto.With(o.Registerer)
	l := &ImpressionLog{q: q, o: o, queue: make(chan servedPage, o.Queue),
		logged: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_impressions_logged_total",
			Help: "Impressions of the pages GetFeed served, enqueued as engagement tasks, by experiment arm (the worker applies a page served again once)."}, []string{"arm"}),
		dup: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_impressions_duplicate_total",
			Help: "Impressions of served pages not enqueued because the same page's task was still queued (a retried page)."}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_impressions_dropped_total",
			Help: "Impressions of served pages not recorded, by reason: queue_full (the senders fell behind), enqueue_failed, closed (shutdown)."}, []string{"reason"}),
	}
	for _, r := range []string{dropQueueFull, dropEnqueue, dropClosed} {
		l.dropped.WithLabelValues(r)
	}
	for _, a := range []string{engagement.ArmDefault, engagement.ArmLearned} {
		l.logged.WithLabelValues(a)
	}
	l.drain, l.stop = context.WithCancel(context.Background())
	for range o.Senders {
		l.wg.Add(1)
		go l.send()
	}
	return l, nil
}

// Log queues the impressions of one page served to user with cursor ("" for the first page),
// without blocking; the log keeps items, which the caller must not modify afterwards. It is
// safe for concurrent use.
func (l *ImpressionLog) Log(user zen.ID, cursor string, items []Impression) {
	if len(items) == 0 {
		return
	}
	p := servedPage{user: user, cursor: cursor, items: items, atMs: l.o.Now().UnixMilli()}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.WithLabelValues(dropClosed).Add(float64(len(items)))
		return
	}
	select {
	case l.queue <- p:
	default:
		l.dropped.WithLabelValues(dropQueueFull).Add(float64(len(items)))
	}
}

// Close stops taking pages, enqueues those still queued for up to Drain (the rest are dropped
// and counted), and returns once the senders are done.
func (l *ImpressionLog) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	t := time.AfterFunc(l.o.Drain, l.stop)
	l.wg.Wait()
	t.Stop()
	l.stop()
}

func (l *ImpressionLog) send() {
	defer l.wg.Done()
	for p := range l.queue {
		if l.drain.Err() != nil {
			l.dropped.WithLabelValues(dropClosed).Add(float64(len(p.items)))
			continue
		}
		l.enqueue(p)
	}
}

// enqueue enqueues one page as engagement tasks of at most pinlater.MaxEngagementEvents
// impressions each.
func (l *ImpressionLog) enqueue(p servedPage) {
	arm := l.o.Experiment.ArmOf(p.user)
	rid := PageRequestID(p.user, p.cursor, p.items)
	for part, start := 0, 0; start < len(p.items); part, start = part+1, start+pinlater.MaxEngagementEvents {
		items := p.items[start:min(len(p.items), start+pinlater.MaxEngagementEvents)]
		payload := pinlater.EngagementPayload{User: uint64(p.user), RequestID: rid, Arm: arm,
			Events: make([]pinlater.EngagementEvent, len(items))}
		if part > 0 {
			payload.RequestID = rid + ":" + strconv.Itoa(part)
		}
		for i, it := range items {
			payload.Events[i] = pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(it.Pin),
				Position: it.Position, Fresh: it.Fresh, Source: sourceName(it.Source), AtMs: p.atMs}
		}
		dup, err := l.enqueueOne(payload)
		switch {
		case err != nil:
			l.dropped.WithLabelValues(dropEnqueue).Add(float64(len(items)))
			l.o.Logger.Warn("impressions of a served page not recorded", zap.Uint64("user", uint64(p.user)), zap.Error(err))
		case dup:
			l.dup.Add(float64(len(items)))
		default:
			l.logged.WithLabelValues(arm).Add(float64(len(items)))
		}
	}
}

func (l *ImpressionLog) enqueueOne(p pinlater.EngagementPayload) (duplicate bool, err error) {
	task, err := pinlater.NewEngagement(p)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(l.drain, l.o.Timeout)
	defer cancel()
	info, err := l.q.Enqueue(ctx, task)
	if err != nil {
		return false, err
	}
	return info.Duplicate, nil
}

// sourceName is the task's name of s ("" for following, and for a source the worker would not
// parse, which it then records as following).
func sourceName(s zen.Source) string {
	switch s {
	case zen.SourceInterest, zen.SourceRelated:
		return s.String()
	}
	return ""
}

// PageRequestID is the request ID of the impressions of a page served to user with cursor:
// "feed:" and 32 hex digits of a SHA-256 over the user, the cursor and the pins in order (their
// positions are their order). The same page served again has the same ID, so the worker
// applies it once; a different page (another chunk, another cursor) has another.
func PageRequestID(user zen.ID, cursor string, items []Impression) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(user))
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(len(cursor)))
	h.Write(b[:])
	h.Write([]byte(cursor))
	for _, it := range items {
		binary.BigEndian.PutUint64(b[:], uint64(it.Pin))
		h.Write(b[:])
	}
	return "feed:" + hex.EncodeToString(h.Sum(nil)[:16])
}
