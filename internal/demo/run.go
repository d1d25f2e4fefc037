// Package demo is the workload of "smartfeed demo": a synthetic power-law graph (built once and
// kept beside the data), pin events streamed through pinlater into the worker, GetFeed calls on
// loopback gRPC, and a live line of the rates, the fanout lag and the read latencies.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/pinlater"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/worker"
	"github.com/smartfeed/smartfeed/zen"
)

// Flags are the demo's own knobs.
type Flags struct {
	Spec         GraphSpec
	EventsPerSec float64
	ReadsPerSec  float64
	// Duration stops the demo after this long (0: until ctx is done).
	Duration time.Duration
}

// Queues reads a pinlater queue's state (pinlater.Admin).
type Queues interface {
	Queue(ctx context.Context, q string) (pinlater.QueueStats, error)
}

// Env is what the demo runs against: the process that serves every role.
type Env struct {
	// Graph is where the demo's graph and pins are written.
	Graph GraphWriter
	// LazyPins: a pin's event is published through an outbox row in the graph's log, written
	// durably right after the pin's writes, so those wait for no fsync of their own.
	LazyPins bool
	// Publisher delivers the pin events to the feeds.
	Publisher Publisher
	// Feed is the GetFeed client the reads go through.
	Feed feedv1.FeedServiceClient
	// Metrics is the process's registry, read for the live line; Queues (nil: none) the
	// fanout queues' state.
	Metrics prometheus.Gatherer
	Queues  Queues
	Log     *zap.Logger
	// DataDir keeps the graph (GraphFile) for the next run when SaveGraph is set.
	DataDir   string
	SaveGraph bool
	// GRPCAddr, AdminAddr and AdminGRPCAddr are printed for the operator to try.
	GRPCAddr, AdminAddr, AdminGRPCAddr string
}

// Run builds or loads the graph, then streams events and reads feeds until ctx is done,
// drawing the live line on stdout.
func Run(ctx context.Context, a Env, df Flags, stdout io.Writer) error {
	tty := IsTerminal(stdout)
	g, ok, err := graphFor(ctx, a, df, stdout, tty)
	if err != nil || !ok {
		return err
	}

	st := &stats{start: time.Now(), readTarget: df.ReadsPerSec}
	pub := a.Publisher
	printIntro(stdout, a, df, g)

	var wg sync.WaitGroup
	// Events come from eventMakers makers, each pin's writes in sequence (each a synced
	// commit with fsync on): one maker alone offered at most ~280 events/s here with fsync on.
	// When every maker is busy the tick waits, so the line shows the rate achieved.
	ticks := make(chan struct{})
	// The event's outbox row is written durably after the pin's writes; on one log it makes them
	// durable too.
	lazyPins := a.LazyPins
	for i := range eventMakers {
		wg.Go(func() {
			m := &pinMaker{g: a.Graph, graph: g, r: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i+1))), now: time.Now,
				lazy: lazyPins}
			for range ticks {
				e, err := m.next(ctx)
				if err == nil {
					err = pub.Publish(ctx, e)
				}
				if err != nil {
					if !ended(ctx) {
						st.eventErrs.Add(1)
						a.Log.Warn("demo event", zap.Error(err))
					}
					continue
				}
				st.events.Add(1)
			}
		})
	}
	wg.Go(func() {
		defer close(ticks)
		every(ctx, df.EventsPerSec, func() {
			select {
			case ticks <- struct{}{}:
			case <-ctx.Done():
			}
		})
	})
	if df.ReadsPerSec > 0 {
		startReads(ctx, &wg, a, g, df.ReadsPerSec, st)
	}
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	lastPlain := time.Now()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
			st.syncInserts(a)
			if tty {
				fmt.Fprintf(stdout, "\r\033[K%s", st.line(df.Duration, false))
			} else if time.Since(lastPlain) >= 5*time.Second {
				fmt.Fprintln(stdout, st.line(df.Duration, false))
				lastPlain = time.Now()
			}
		}
	}
	wg.Wait()
	st.syncInserts(a)
	if tty {
		fmt.Fprint(stdout, "\r\033[K")
	}
	fmt.Fprintf(stdout, "summary: %s\n", st.line(0, true))
	if st.reads.Load() > 0 && st.readErrs.Load() == st.reads.Load() {
		return errors.New("demo: every GetFeed failed (see the log)")
	}
	return nil
}

// syncInserts copies the worker's pool insert counter and the fanout queues' depth and age
// into the stats.
func (s *stats) syncInserts(a Env) {
	s.inserts.Store(GatherSum(a.Metrics, "smartfeed_worker_pool_inserts_total"))
	if a.Queues == nil {
		return
	}
	depth, qlag := 0, time.Duration(0)
	for _, q := range []string{pinlater.QueueFanout, pinlater.QueueBulk} {
		st, err := a.Queues.Queue(context.Background(), q)
		if err != nil {
			return
		}
		depth += st.Pending + st.Active + st.Scheduled + st.Retry
		qlag = max(qlag, st.Latency)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ms := GatherSeries(a.Metrics, worker.FanoutDelayMetric); len(ms) > 0 {
		s.delays = append(s.delays, hedge.HistogramOf(ms[0].GetHistogram()))
		if len(s.delays) > delayWindow {
			s.delays = s.delays[1:]
		}
	}
	s.depth, s.qlag = depth, qlag
	s.depths = append(s.depths, depth)
	if len(s.depths) > 6 {
		s.depths = s.depths[1:]
	}
}

// GatherSum sums every series of the named counter or gauge in reg (0 when absent). The
// counters it reads count events, so the sum is a whole number.
func GatherSum(reg prometheus.Gatherer, name string) int64 {
	var sum int64
	for _, m := range GatherSeries(reg, name) {
		sum += int64(m.GetCounter().GetValue()) + int64(m.GetGauge().GetValue())
	}
	return sum
}

// GatherSeries returns the series of the named metric family in reg (none when absent). A
// collector that fails (one that asks Redis, while Redis is down) does not hide the others: Gather
// returns what it gathered beside its error.
func GatherSeries(reg prometheus.Gatherer, name string) []*dto.Metric {
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// LabelValue is the value of m's label name ("" when absent).
func LabelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// printIntro prints what the demo runs and where to look: the fetch command, the metrics,
// hedging and console addresses.
func printIntro(stdout io.Writer, a Env, df Flags, g Graph) {
	fmt.Fprintf(stdout, "events: %s at %.0f/s; reads: GetFeed at %.0f/s on loopback gRPC %s\n", a.Publisher.Name(), df.EventsPerSec, df.ReadsPerSec, a.GRPCAddr)
	fmt.Fprintf(stdout, "\nfetch a feed (reflection, no proto files):\n  go -C charts tool grpcurl -plaintext -d '{\"user_id_str\":\"%s\"}' %s smartfeed.feed.v1.FeedService/GetFeed\n", g.Showcase, a.GRPCAddr)
	if ad := a.AdminAddr; ad != "" {
		fmt.Fprintf(stdout, "metrics: http://%s/metrics   hedging: bin/smartfeed hedge --admin-grpc-addr %s --admin-addr %s\n", ad, a.AdminGRPCAddr, ad)
		fmt.Fprintf(stdout, "console: http://%s/console/#feed?user=%s\n", ad, g.Showcase)
	}
	fmt.Fprintln(stdout, "Ctrl-C stops everything cleanly.")
	fmt.Fprintln(stdout)
}

// startReads starts the readers: GetFeed of a picked reader at perSec, a tick skipped when
// every reader is busy; they stop with ctx.
func startReads(ctx context.Context, wg *sync.WaitGroup, a Env, g Graph, perSec float64, st *stats) {
	readers := make(chan struct{})
	for range readersFor(perSec) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
			for range readers {
				st.read(ctx, a.Feed, pickReader(r, g), a.Log)
			}
		})
	}
	wg.Go(func() {
		defer close(readers)
		every(ctx, perSec, func() {
			select {
			case readers <- struct{}{}:
			default: // all readers busy: skip this tick rather than queue up
			}
		})
	})
}

// pickReader picks the showcase user a tenth of the time and a random user otherwise.
func pickReader(r *rand.Rand, g Graph) zen.ID {
	if r.IntN(10) == 0 {
		return g.Showcase
	}
	return g.Users[r.IntN(len(g.Users))]
}

// every calls fn about perSec times a second until ctx is done; a slow fn lowers the rate.
// readersFor is how many goroutines make the demo's GetFeed calls at perSec: enough that a
// call taking 25 ms (a loaded machine's p99) holds no tick back at the target, 4 to 64. A tick
// that finds every reader busy is skipped and shows as the achieved rate falling short.
func readersFor(perSec float64) int {
	return min(64, max(4, int(math.Ceil(perSec/40))))
}

func every(ctx context.Context, perSec float64, fn func()) {
	interval := time.Duration(float64(time.Second) / perSec)
	next := time.Now()
	for ctx.Err() == nil {
		fn()
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else if d < -time.Second {
			next = time.Now() // fell behind: do not burst to catch up
		}
	}
}

// eventMakers is how many goroutines make the demo's pin events. With fsync on, each event
// waits for a few synced commits (one per edge add, one for the object, one for the outbox row):
// under the fanout's load here 8 makers achieved ~470 of 500 events/s, and on a slower day 32
// makers 440–470/s while each edge add still waited for four fsyncs; 64 leave the rate to the
// pipeline.
const eventMakers = 64

// stats are the live counters of the summary line.
type stats struct {
	start                      time.Time
	events, eventErrs, inserts atomic.Int64
	reads, readErrs, hedged    atomic.Int64
	fresh, items               atomic.Int64
	// genTimeouts are the first pages whose generator call missed its deadline (fresh status
	// GENERATOR_TIMEOUT): served from the materialized feed, with no new pins.
	genTimeouts atomic.Int64

	readTarget float64 // GetFeed calls offered per second

	mu  sync.Mutex
	lat []timedLatency // the most recent GetFeed latencies (a ring)
	pos int
	// the fanout queues (fanout and bulk): tasks not done, the age of the oldest pending one,
	// and the depth at the last few samples (to see it grow)
	depth  int
	qlag   time.Duration
	depths []int
	// the worker's fanout delay histogram at the last samples (oldest first): the live line's
	// lag p99 is over the window they span
	delays []hedge.Histogram
}

// delayWindow is how many samples (one every 500 ms) the live line's fanout lag p99 spans:
// liveWindow.
const delayWindow = int(liveWindow / (500 * time.Millisecond))

const latWindow = 10000

// liveWindow is how far back the live line's GetFeed percentiles and fanout lag look.
const liveWindow = 30 * time.Second

// timedLatency is one GetFeed's latency and when it ended.
type timedLatency struct {
	at time.Time
	d  time.Duration
}

// ended reports whether the demo's run is over: ctx is done, or its deadline (--duration) has
// passed. A call made in the instant between the deadline and its timer firing fails at once
// with DeadlineExceeded while ctx.Err() is still nil: that is the run ending, not an error.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// read calls GetFeed for user and records its latency; a failure is counted (the live line's
// errors) and logged with its cause.
func (s *stats) read(ctx context.Context, c feedv1.FeedServiceClient, user zen.ID, log *zap.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := c.GetFeed(cctx, &feedv1.GetFeedRequest{UserId: uint64(user)})
	d := time.Since(start)
	if err != nil {
		if !ended(ctx) {
			s.readErrs.Add(1)
			s.reads.Add(1)
			log.Warn("demo GetFeed", zap.Uint64("user", uint64(user)), zap.Duration("took", d), zap.Error(err))
		}
		return
	}
	s.reads.Add(1)
	if resp.GetHedged() {
		s.hedged.Add(1)
	}
	if resp.GetFreshStatus() == feedv1.FreshStatus_FRESH_STATUS_GENERATOR_TIMEOUT {
		s.genTimeouts.Add(1)
	}
	for _, it := range resp.GetItems() {
		if it.GetFresh() {
			s.fresh.Add(1)
		}
	}
	s.items.Add(int64(len(resp.GetItems())))
	s.mu.Lock()
	if len(s.lat) < latWindow {
		s.lat = append(s.lat, timedLatency{start.Add(d), d})
	} else {
		s.lat[s.pos] = timedLatency{start.Add(d), d}
		s.pos = (s.pos + 1) % latWindow
	}
	s.mu.Unlock()
}

// percentiles returns the p-th percentiles (p in [0, 100]) of the latencies of the GetFeeds that
// ended at or after since (of the most recent latWindow).
func (s *stats) percentiles(since time.Time, ps ...int) []time.Duration {
	s.mu.Lock()
	var l []time.Duration
	for _, x := range s.lat {
		if !x.at.Before(since) {
			l = append(l, x.d)
		}
	}
	s.mu.Unlock()
	out := make([]time.Duration, len(ps))
	if len(l) == 0 {
		return out
	}
	slices.Sort(l)
	for i, p := range ps {
		out[i] = l[min(len(l)-1, p*len(l)/100)]
	}
	return out
}

// line is the live line, or the summary line when summary is set; total > 0 draws a progress bar
// of the elapsed time. The live line's GetFeed percentiles and fanout lag p99 are over the last
// 30 s (liveWindow); the summary's GetFeed percentiles are over the last latWindow calls and its
// lag p99 over the whole run.
func (s *stats) line(total time.Duration, summary bool) string {
	el := time.Since(s.start)
	since := time.Now().Add(-liveWindow)
	if summary {
		since = time.Time{}
	}
	p := s.percentiles(since, 50, 99)
	var b strings.Builder
	if total > 0 {
		fmt.Fprintf(&b, "%s ", Bar(int64(el), int64(total), 20))
	}
	s.mu.Lock()
	depth, qlag, growing := s.depth, s.qlag, len(s.depths) >= 4 && slices.IsSorted(s.depths) && s.depths[len(s.depths)-1] > s.depths[0]
	lagP99 := "-"
	if n := len(s.delays); n > 0 {
		var since hedge.Histogram // the summary: since the start
		if !summary {
			since = s.delays[0]
		}
		if w := s.delays[n-1].Since(since); w.Count() > 0 {
			lagP99 = fmtLag(w.Quantile(0.99))
		}
	}
	s.mu.Unlock()
	fmt.Fprintf(&b, "%4ds  events %d (%d/s)  pool inserts %d (%d/s)  fanout queue %d (oldest %s, lag p99 %s)  GetFeed %d/s of %.0f/s p50 %s p99 %s  generator timeouts %d  hedges %d  fresh pins %d",
		int(el.Seconds()), s.events.Load(), perSecond(s.events.Load(), el), s.inserts.Load(), perSecond(s.inserts.Load(), el),
		depth, qlag.Round(100*time.Millisecond), lagP99, perSecond(s.reads.Load(), el), s.readTarget, FmtMs(p[0]), FmtMs(p[1]), s.genTimeouts.Load(), s.hedged.Load(), s.fresh.Load())
	if growing && qlag > 2*time.Second {
		b.WriteString("  WARNING: the worker is falling behind (fanout queue growing)")
	}
	if n := s.eventErrs.Load() + s.readErrs.Load(); n > 0 {
		fmt.Fprintf(&b, "  errors %d (see the log)", n)
	}
	return b.String()
}

// fmtLag formats a lag: whole milliseconds below a second, tenths of a second above.
func fmtLag(d time.Duration) string {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// FmtMs formats d in milliseconds with one decimal ("1.5ms").
func FmtMs(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// perSecond is the whole number of events a second of n events in d (n when d < 1ms).
func perSecond(n int64, d time.Duration) int64 {
	return n * int64(time.Second) / max(int64(d), int64(time.Millisecond))
}

// Bar draws a progress bar of done out of total (the fraction clamped to [0, 1]) in width
// cells.
func Bar(done, total int64, width int) string {
	n := int(max(0, min(int64(width), done*int64(width)/max(total, 1))))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// IsTerminal reports whether w is a terminal (a character device), so the progress line can be
// redrawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// graphFor loads the demo's graph from a.DataDir or builds it, telling stdout which; ok is false
// (with no error) when ctx ended while building.
func graphFor(ctx context.Context, a Env, df Flags, stdout io.Writer, tty bool) (Graph, bool, error) {
	g, ok, err := LoadGraph(a.DataDir)
	if err != nil {
		return g, false, err
	}
	if ok {
		fmt.Fprintf(stdout, "graph: reusing %d users, %d interests, %d follows from %s\n", len(g.Users), len(g.Interests), g.Follows, filepath.Join(a.DataDir, GraphFile))
	} else {
		start := time.Now()
		if !tty {
			fmt.Fprintf(stdout, "graph: building %d users, %d boards each, %d interests\n", df.Spec.Users, df.Spec.BoardsPerUser, df.Spec.Interests)
		}
		g, err = BuildGraph(ctx, a.Graph, df.Spec, func(done, total int) {
			if tty {
				fmt.Fprintf(stdout, "\r\033[Kgraph: %s %d/%d", Bar(int64(done), int64(total), 30), done, total)
			}
		})
		if tty {
			fmt.Fprintln(stdout)
		}
		if err != nil {
			if ctx.Err() != nil {
				return g, false, nil // interrupted while building: the next run builds it again
			}
			return g, false, err
		}
		if a.SaveGraph {
			if err := g.Save(a.DataDir); err != nil {
				return g, false, err
			}
		}
		fmt.Fprintf(stdout, "graph: built %d users, %d boards each, %d interests, %d follows in %s\n",
			len(g.Users), df.Spec.BoardsPerUser, len(g.Interests), g.Follows, time.Since(start).Round(time.Millisecond))
	}
	return g, true, nil
}
