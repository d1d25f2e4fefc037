package engagementsvc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
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
	// DefaultImpressionTimeout bounds one task's enqueue.
	DefaultImpressionTimeout = 5 * time.Second
	// DefaultImpressionDrain bounds how long Close keeps enqueuing the pages still queued.
	DefaultImpressionDrain = 2 * time.Second
	// DefaultImpressionLinger is how long a sender waits for more pages after the first one of
	// a task that is not full: at a few hundred pages a second and more it makes one task of
	// every few dozen pages; a lone page waits this long, in the background, never the reader.
	DefaultImpressionLinger = 20 * time.Millisecond
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
	// Linger: see DefaultImpressionLinger; negative: none (a task holds what was queued at once).
	Linger     time.Duration
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// ImpressionLog records the pages the feed served as impressions, through the outbox's durable
// client where the process has one (q). Log never blocks: a page is queued in memory and
// enqueued by a few background senders, so a page's latency does not include the enqueue, and a
// page never fails because of it. A sender takes the next page as soon as it is free, then
// every page queued behind it or within Linger, up to pinlater.MaxImpressionPages pages and
// pinlater.MaxImpressionEvents impressions, and enqueues them as one impressions task: a lone
// page goes alone after Linger, a busy log batches many pages (of many users) per task. Each page keeps its own engagement batch and request ID inside the task, the
// same batch a client's Report enqueues (a page of more than pinlater.MaxEngagementEvents pins
// is split into several, each with its own request ID). The durability is best effort and
// bounded: at most Queue pages wait in memory, a page that finds the queue full, or whose
// task's enqueue fails, is dropped and counted, and the pages still queued when the process
// crashes are lost (those left at Close are enqueued for up to Drain). Once enqueued, a page is
// as durable as a Report. A page's request ID is derived from the user, the cursor and the pins
// in order, so the same page served again (a retried request) is applied once by the worker,
// whichever tasks carry it.
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
	pages   prometheus.Histogram
	lastMu  sync.Mutex
	last    map[zen.ID]string // each user's last logged page's request ID (repeated)
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
	if o.Linger == 0 {
		o.Linger = DefaultImpressionLinger
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	f := promauto.With(o.Registerer)
	l := &ImpressionLog{q: q, o: o, queue: make(chan servedPage, o.Queue), last: map[zen.ID]string{},
		logged: f.NewCounterVec(prometheus.CounterOpts{Name: "smartfeed_impressions_logged_total",
			Help: "Impressions of the pages GetFeed served, enqueued in impressions tasks, by experiment arm (the worker applies a page served again once)."}, []string{"arm"}),
		dup: f.NewCounter(prometheus.CounterOpts{Name: "smartfeed_impressions_duplicate_total",
			Help: "Impressions of served pages not enqueued because the page was the user's last logged one again (a refresh that found nothing new, a retried page), or the same task was still queued."}),
		pages: f.NewHistogram(prometheus.HistogramOpts{Name: "smartfeed_impressions_task_pages",
			Help:    "Served pages (engagement batches) per impressions task enqueued: 1 when the log is idle, more when pages queue up behind a sender.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64}}),
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

// send enqueues the queued pages until the queue is closed and empty: one impressions task at a
// time, of the page it waited for and those already queued behind it (gather).
func (l *ImpressionLog) send() {
	defer l.wg.Done()
	var left []pinlater.EngagementPayload // the batches of a page that did not fit the last task
	for {
		if len(left) == 0 {
			p, ok := <-l.queue
			if !ok {
				return
			}
			if left = l.batches(p); len(left) == 0 {
				continue // the user's last page again
			}
		}
		var task []pinlater.EngagementPayload
		task, left = l.gather(left)
		if len(task) == 0 {
			continue
		}
		if l.drain.Err() != nil {
			l.drop(dropClosed, task)
			continue
		}
		l.enqueue(task)
	}
}

// gather fills one task with batches from next, then from the pages queued already or within
// Options.Linger of the call: at most pinlater.MaxImpressionPages batches and MaxImpressionEvents events.
// It returns the task and the batches that did not fit, which start the next one. A batch
// with the user and request ID of one already in the task (the same page queued twice) is
// counted as a duplicate and left out.
func (l *ImpressionLog) gather(next []pinlater.EngagementPayload) (task, left []pinlater.EngagementPayload) {
	events := 0
	var linger <-chan time.Time
	for {
		for len(next) > 0 {
			b := next[0]
			if len(task) > 0 && (len(task) == pinlater.MaxImpressionPages || events+len(b.Events) > pinlater.MaxImpressionEvents) {
				return task, next
			}
			next = next[1:]
			if slices.ContainsFunc(task, func(t pinlater.EngagementPayload) bool { return t.User == b.User && t.RequestID == b.RequestID }) {
				l.dup.Add(float64(len(b.Events)))
				continue
			}
			task, events = append(task, b), events+len(b.Events)
		}
		if len(task) == pinlater.MaxImpressionPages || events == pinlater.MaxImpressionEvents {
			return task, nil
		}
		select {
		case p, ok := <-l.queue:
			if !ok {
				return task, nil
			}
			next = l.batches(p)
			continue
		default:
		}
		if l.o.Linger < 0 || l.drain.Err() != nil {
			return task, nil
		}
		if linger == nil {
			t := time.NewTimer(l.o.Linger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case p, ok := <-l.queue:
			if !ok {
				return task, nil
			}
			next = l.batches(p)
		case <-linger:
			return task, nil
		case <-l.drain.Done():
			return task, nil
		}
	}
}

// maxLastPages bounds the users whose last logged page the log remembers (repeated); past it
// the memory starts again, which only lets a repeated page through to the worker, which
// applies it once all the same.
const maxLastPages = 1 << 16

// repeated reports whether rid is the request ID of the last page logged for user, and makes it
// the last. A refresh that finds nothing new serves the same page again: the worker would apply
// it once (its request ID), so it is not sent at all.
func (l *ImpressionLog) repeated(user zen.ID, rid string) bool {
	l.lastMu.Lock()
	defer l.lastMu.Unlock()
	if l.last[user] == rid {
		return true
	}
	if len(l.last) >= maxLastPages {
		clear(l.last)
	}
	l.last[user] = rid
	return false
}

// batches is a served page as engagement batches of impressions (none when it repeats the
// user's last logged page, counted as duplicate): one, or several of at most
// pinlater.MaxEngagementEvents each for a longer page (the request IDs of the second and later
// ones suffixed ":1", ":2", ...).
func (l *ImpressionLog) batches(p servedPage) []pinlater.EngagementPayload {
	rid := PageRequestID(p.user, p.cursor, p.items)
	if l.repeated(p.user, rid) {
		l.dup.Add(float64(len(p.items)))
		return nil
	}
	arm := l.o.Experiment.ArmOf(p.user)
	out := make([]pinlater.EngagementPayload, 0, (len(p.items)+pinlater.MaxEngagementEvents-1)/pinlater.MaxEngagementEvents)
	for part, start := 0, 0; start < len(p.items); part, start = part+1, start+pinlater.MaxEngagementEvents {
		items := p.items[start:min(len(p.items), start+pinlater.MaxEngagementEvents)]
		b := pinlater.EngagementPayload{V: pinlater.PayloadVersion, User: uint64(p.user), RequestID: rid, Arm: arm,
			Events: make([]pinlater.EngagementEvent, len(items))}
		if part > 0 {
			b.RequestID = rid + ":" + strconv.Itoa(part)
		}
		for i, it := range items {
			b.Events[i] = pinlater.EngagementEvent{Action: pinlater.ActionImpression, Pin: uint64(it.Pin),
				Position: it.Position, Fresh: it.Fresh, Source: sourceName(it.Source), AtMs: p.atMs}
		}
		out = append(out, b)
	}
	return out
}

// enqueue enqueues the batches as one impressions task and counts their impressions: logged
// by arm, all duplicate when the task was still queued, all dropped when the enqueue failed.
func (l *ImpressionLog) enqueue(task []pinlater.EngagementPayload) {
	dup, err := l.enqueueTask(task)
	switch {
	case err != nil:
		l.drop(dropEnqueue, task)
		l.o.Logger.Warn("impressions of served pages not recorded", zap.Int("pages", len(task)), zap.Error(err))
	case dup:
		for _, b := range task {
			l.dup.Add(float64(len(b.Events)))
		}
	default:
		l.pages.Observe(float64(len(task)))
		for _, b := range task {
			l.logged.WithLabelValues(b.Arm).Add(float64(len(b.Events)))
		}
	}
}

func (l *ImpressionLog) enqueueTask(pages []pinlater.EngagementPayload) (duplicate bool, err error) {
	task, err := pinlater.NewImpressions(pinlater.ImpressionsPayload{Pages: pages})
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

// drop counts the impressions of the batches as dropped for reason.
func (l *ImpressionLog) drop(reason string, batches []pinlater.EngagementPayload) {
	n := 0
	for _, b := range batches {
		n += len(b.Events)
	}
	l.dropped.WithLabelValues(reason).Add(float64(n))
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
