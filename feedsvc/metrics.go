package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
)

type metrics struct {
	requests           *prometheus.CounterVec
	latency            prometheus.Histogram
	servedFrom         *prometheus.CounterVec
	generatorLate      prometheus.Counter
	persistFailed      prometheus.Counter
	enqueueFailed      prometheus.Counter
	reenqueued         prometheus.Counter
	materialized       *prometheus.CounterVec
	materializeSeconds prometheus.Histogram
	duplicatePins      prometheus.Counter
	trimmed            prometheus.Counter
	deletedSkipped     prometheus.Counter
	liveErrors         prometheus.Counter
	// preparedRemoved counts the pins left out of prepared chunks because a removal took them
	// (filterRemoved); preparedCheckErrors the pages that held prepared chunks back because
	// that check failed.
	preparedRemoved     prometheus.Counter
	preparedCheckErrors prometheus.Counter
	activityErrors      prometheus.Counter
	activityLate        prometheus.Counter
	activitySkipped     prometheus.Counter
	unsureRecordings    *prometheus.CounterVec
	// stage times the parts of GetFeed: the generator call, the materialized read (liveness
	// filter included), recording the served chunk, and the materialize enqueue.
	stage *prometheus.HistogramVec
	// prepared counts the chunks prepared ahead of a visit by outcome (see Config.PrepareAfter).
	prepared *prometheus.CounterVec
	// inline counts served chunks by where their materialization went (see
	// Config.InlineMaterialize).
	inline *prometheus.CounterVec
	// prepSchedule counts what became of the preparations pages asked for (queued, coalesced,
	// empty_pool, dropped); prepQueued and prepRunning are the preparations waiting for a worker
	// and running now.
	prepSchedule *prometheus.CounterVec
	prepQueued   prometheus.Gauge
	prepRunning  prometheus.Gauge
	// matQueued is the served chunks waiting for an inline materialization worker.
	matQueued prometheus.Gauge
	// shed counts the GetFeed calls admission control refused, by reason.
	shed *prometheus.CounterVec

	// stageOf holds stage's child of each stage, and okAs the requests' child of each fresh
	// status of a page served, looked up once (a label lookup hashes the values and takes the
	// vector's lock); both are read-only once made.
	stageOf map[string]prometheus.Observer
	okAs    map[FreshStatus]prometheus.Counter
	// servedAs is servedFrom's child of each store, by hedge.Store.
	servedAs [2]prometheus.Counter
}

// Stages of GetFeed, the label values of smartfeed_feed_stage_seconds.
const (
	stageGenerator = "generator"
	stageRead      = "read"
	stagePersist   = "persist"
	stageEnqueue   = "enqueue"
	// stagePrepare is a preparation ahead of a visit (generator and synced row, in the
	// background); stageFlip decides which prepared chunks a page shows as fresh (in memory; the
	// served marks are written after the answer).
	stagePrepare = "prepare"
	stageFlip    = "flip"
	// stagePagePrepared, stagePageGenerated, stagePageRecent and stagePageDeferred time a whole
	// first page by the way it went: served from a prepared chunk, through the generator, from
	// the feed as it stands because the generator was asked moments ago
	// (Config.MinChunkInterval), or because too many pages waited on it (Config.MaxGenerating).
	stagePagePrepared  = "page_prepared"
	stagePageGenerated = "page_generated"
	stagePageRecent    = "page_recent"
	stagePageDeferred  = "page_deferred"
	// stagePinsLive is the liveness check of a page's pins (part of stageRead).
	stagePinsLive = "pins_live"
	// stagePreparedCheck is the removal check of the prepared chunks a read met (part of
	// stageRead), or of one the recovery pass materializes.
	stagePreparedCheck = "prepared_check"
	// stageUserLive is the check that the user exists; stageActivity the wait for the
	// activity hook's answer after the page is ready.
	stageUserLive = "user_live"
	stageActivity = "activity_wait"
)

// Outcomes of a prepared chunk, the label values of smartfeed_feed_prepared_total.
const (
	prepRecorded = "recorded" // a prepared row was written
	prepEmpty    = "empty"    // the pools had nothing new
	prepFailed   = "failed"   // the generator or the recording failed
	prepServed   = "served"   // served fresh by a visit that called no generator
	prepStale    = "stale"    // served fresh beside a new chunk (older than PreparedMaxAge)
	prepLost     = "lost"     // this process's, but shown already by another request (or forgotten): feed items
	prepForeign  = "foreign"  // another incarnation's (a peer, or this process before a restart): feed items
	prepDeferred = "deferred" // not asked: served chunks were waiting for their materialization (materializeBehind)
)

// What became of a preparation a page asked for, the label values of
// smartfeed_feed_prepare_scheduled_total.
const (
	prepQueued     = "queued"      // due and queued for a worker
	prepCoalesced  = "coalesced"   // one was scheduled, queued or running for the user already
	prepEmptyPool  = "empty_pool"  // the user's last generator call found the pools empty
	prepFirstVisit = "first_visit" // the user's previous first page was not within PreparedMaxAge (Config.PrepareReturning)
	prepDropped    = "dropped"     // the queue was full
	prepTaken      = "taken"       // queued, then taken over by a first page that asked the generator itself
)

// Where a served chunk's materialization went, the label values of
// smartfeed_feed_materialize_inline_total.
const (
	inlineDone    = "done"    // materialized in this process, no job
	inlineFailed  = "failed"  // tried in this process, failed: enqueued
	inlineBusy    = "busy"    // the in-process queue full: enqueued
	inlineOff     = "off"     // Config.InlineMaterialize 0: enqueued
	inlineClosing = "closing" // queued in process when the service closed: enqueued
)

// observeStage records d under stage.
func (m *metrics) observeStage(stage string, d time.Duration) {
	o, ok := m.stageOf[stage]
	if !ok {
		o = m.stage.WithLabelValues(stage)
	}
	o.Observe(d.Seconds())
}

// newMetrics makes the service's metrics: those of the read path here, those of the work a page
// leaves behind it in addBackground. It registers them with reg; nil registers nothing.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_feed_requests_total",
			Help: "GetFeed calls by outcome (ok, invalid, overloaded, unavailable) and fresh status."},
			[]string{"outcome", "fresh"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "smartfeed_feed_request_seconds", Help: "GetFeed latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		servedFrom: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_feed_served_from_total",
			Help: "Pages by the store that answered (primary, standby): standby pages may be stale by the replication lag."},
			[]string{"store"}),
		generatorLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_generator_late_total", Help: "Generator calls abandoned at the deadline."}),
		persistFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_persist_failed_total", Help: "Fresh chunks not served because they could not be recorded."}),
		deletedSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_deleted_skipped_total", Help: "Materialized items skipped on read because their pin was deleted."}),
		liveErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_liveness_errors_total", Help: "Pages served unfiltered because the liveness check failed or was late."}),
		preparedRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_prepared_removed_total", Help: "Pins left out of prepared chunks, never shown nor materialized, because a removal (unfollow, pin or user delete) took them after the chunk was composed."}),
		preparedCheckErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_prepared_check_errors_total", Help: "Pages that held their prepared chunks back because the removal check failed or was late."}),
		activityErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_activity_errors_total", Help: "Activity (Touch) calls that failed."}),
		activityLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_activity_late_total", Help: "Pages answered before the Activity hook did (rebuilding reported false)."}),
		activitySkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_activity_skipped_total", Help: "Pages that did not call the Activity hook: it answered \"not rebuilding\" for the user less than 5 s before."}),
		unsureRecordings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_feed_unsure_recordings_total",
			Help: "Chunk recordings whose write failed without an answer, by what a later look found (recorded: materialized; not_recorded: returned to the pools)."},
			[]string{"found"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "smartfeed_feed_stage_seconds", Help: "Time spent in each stage of GetFeed (generator, read (pins_live: its liveness check), persist, enqueue, flip, user_live, activity_wait; page_prepared, page_generated and page_recent: a whole first page by its path; prepare: a preparation in the background).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)}, []string{"stage"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_feed_shed_total",
			Help: "GetFeed calls shed by admission control (RESOURCE_EXHAUSTED, nothing done), by reason: queue_full (the line of calls waiting for a slot was full), queue_timeout (no slot within feed.admission_wait)."},
			[]string{"reason"}),
	}
	m.addBackground()
	m.stageOf = map[string]prometheus.Observer{}
	for _, st := range []string{stageGenerator, stageRead, stagePersist, stageEnqueue, stagePrepare, stageFlip,
		stagePagePrepared, stagePageGenerated, stagePageRecent, stagePageDeferred, stagePinsLive, stagePreparedCheck, stageUserLive, stageActivity} {
		m.stageOf[st] = m.stage.WithLabelValues(st)
	}
	for _, st := range []hedge.Store{hedge.Primary, hedge.Standby} {
		m.servedAs[st] = m.servedFrom.WithLabelValues(st.String())
	}
	m.okAs = map[FreshStatus]prometheus.Counter{}
	for f := range freshStatuses {
		m.okAs[f] = m.requests.WithLabelValues("ok", string(f))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.servedFrom, m.generatorLate,
			m.persistFailed, m.enqueueFailed, m.reenqueued, m.materialized, m.materializeSeconds,
			m.duplicatePins, m.trimmed, m.deletedSkipped, m.liveErrors, m.preparedRemoved, m.preparedCheckErrors, m.activityErrors, m.activityLate, m.activitySkipped, m.unsureRecordings, m.stage, m.prepared, m.inline, m.shed, m.prepSchedule, m.prepQueued, m.prepRunning, m.matQueued} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register feed metrics: %w", err)
			}
		}
	}
	return m, nil
}

// addBackground makes the metrics of the work a page leaves behind it: the materializations
// (inline or as jobs), the preparations ahead of a visit and their queue.
func (m *metrics) addBackground() {
	m.enqueueFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smartfeed_feed_enqueue_failed_total", Help: "Materialize jobs that could not be enqueued (left to recovery)."})
	m.reenqueued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smartfeed_feed_reenqueued_total", Help: "Stale pending chunks re-enqueued by reads."})
	m.materialized = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_feed_materialized_total", Help: "Materialize runs by result (done, already)."},
		[]string{"result"})
	m.materializeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "smartfeed_feed_materialize_seconds", Help: "Materialize job latency.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.duplicatePins = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smartfeed_feed_duplicate_pins_total", Help: "Pins skipped at materialization because already in the feed."})
	m.trimmed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smartfeed_feed_trimmed_total", Help: "Items dropped by trimming to the maximum length."})
	m.prepared = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_feed_prepared_total",
		Help: "Chunks prepared ahead of a visit, by outcome (recorded, empty, failed, deferred: not asked while 1,024 served chunks waited for their materialization; then served, stale, lost or foreign)."},
		[]string{"outcome"})
	m.prepSchedule = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_feed_prepare_scheduled_total",
		Help: "Preparations asked for by pages, by what became of them: queued (then run: smartfeed_feed_prepared_total), coalesced (one was scheduled for the user already), empty_pool (the user's last generator call found the pools empty), first_visit (feed.prepare_returning: the user's previous first page was not within feed.prepared_max_age), dropped (the queue was full; 0 below saturation), taken (queued longer than feed.min_chunk_interval, then taken over by a first page that asked the generator itself: the pools are asked once)."},
		[]string{"result"})
	m.prepQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "smartfeed_feed_prepare_queued", Help: "Preparations due and waiting for a worker."})
	m.prepRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "smartfeed_feed_prepare_running", Help: "Preparations running (in a background lane)."})
	m.matQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "smartfeed_feed_materialize_queued", Help: "Served chunks waiting in this process for an inline materialization worker (at most 4,096; past it they become jobs)."})
	m.inline = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_feed_materialize_inline_total",
		Help: "Served chunks by where their materialization went: done in process (after its turn in the in-process queue), or enqueued as a job (failed, busy: the in-process queue full, off, closing)."},
		[]string{"path"})
}

// observe counts a GetFeed by outcome and, when it succeeded, observes its latency; a call of a
// sampled trace leaves its trace ID as the exemplar of the latency's bucket (exposed to a
// scraper that asks for OpenMetrics), so a slow bucket on a dashboard leads to a trace.
func (m *metrics) observe(ctx context.Context, p Page, err error, took time.Duration) {
	outcome := "ok"
	switch {
	case errors.Is(err, ErrInvalid):
		outcome = "invalid"
	case errors.Is(err, ErrOverloaded):
		outcome = "overloaded"
	case err != nil:
		outcome = "unavailable"
	}
	if c, ok := m.okAs[p.FreshStatus]; ok && err == nil {
		c.Inc()
	} else {
		m.requests.WithLabelValues(outcome, string(p.FreshStatus)).Inc()
	}
	if err == nil {
		observeWithTrace(ctx, m.latency, took.Seconds())
		m.servedAs[p.From].Inc()
	}
}

// observeWithTrace observes v in h, with ctx's trace ID as the exemplar when ctx's span is
// sampled.
func observeWithTrace(ctx context.Context, h prometheus.Histogram, v float64) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := h.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	h.Observe(v)
}
