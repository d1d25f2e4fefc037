// Package loadgen is SmartFeed's load generator: it offers calls of several kinds (GetFeed, the
// Redis sorted-set peer's ZREVRANGE, an empty gRPC call) to a running system at fixed rates, in
// its own process, and reports what a client sees.
//
// The load is an open loop: call i of a window is scheduled at start + i/rate whatever the
// earlier calls did, and at most InFlight calls are outstanding at once. A call whose time has
// come while every slot is busy waits for one; its latency counted from its scheduled start
// includes that wait (the queueing a closed-loop generator hides: coordinated omission), and
// its latency counted from its send does not. Both are reported, in HdrHistogram histograms.
//
// Each kind is measured in contiguous windows of Config.Window, the kinds alternating (A B C,
// A B C ...) at each offered rate, and before each window the generator waits until the server
// is idle (Config.Idle), so that the background work one window started is not counted in the
// next. Each window reports the machine's load average, with a warning when it exceeded the
// cores: another process was taking CPU from the measurement.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Kind names (Window.Kind).
const (
	KindGetFeed = "getfeed"
	KindRedis   = "redis_zrevrange"
	KindFloor   = "grpc_floor"
)

// CodeOK is the code of a call that succeeded (Outcome.Code); failed calls carry their gRPC
// code's name (Unavailable, DeadlineExceeded, ...) or "Redis" for a Redis error.
const CodeOK = "OK"

// Outcome is what one call returned.
type Outcome struct {
	// Code is CodeOK or the failure's code name.
	Code string
	// Fresh is a GetFeed page's fresh status ("included", "recent", ...); empty for the other
	// kinds.
	Fresh string
}

// Call makes one call for user (drawn by the Config's Picker; kinds that read no user ignore
// it).
type Call func(ctx context.Context, user uint64) Outcome

// Kind is one kind of call the generator offers.
type Kind struct {
	Name string
	Call Call
}

// Config is one run of the generator.
type Config struct {
	// Kinds are measured in this order in each round.
	Kinds []Kind
	// Rates are the offered rates, calls per second, tried in increasing order.
	Rates []float64
	// ReportRates are the rates every kind is measured at even after it failed to hold a lower
	// one (the rates the report compares the kinds at); above them, a kind is stepped up only
	// while it holds.
	ReportRates []float64
	// Window is each window's length of scheduled calls (the 20 s; tests use less).
	Window time.Duration
	// Overrun is how long past the window's end the calls scheduled in it may still be sent;
	// the calls not sent by then are counted as Unsent and recorded in the from-schedule
	// histogram at the time they had waited then (a lower bound of their latency).
	Overrun time.Duration
	// Rounds is how many times the kinds alternate at each rate (A B C, A B C: 2).
	Rounds int
	// InFlight bounds the calls outstanding at once.
	InFlight int
	// CallTimeout bounds each call (0: none).
	CallTimeout time.Duration
	// Bound is the p99 from schedule under which a rate is held.
	Bound time.Duration
	// Picker draws the user of each call (nil: 0).
	Picker func() uint64
	// Idle, when set, returns once the server has no background work in flight (or fails when
	// it waited too long); it is called before each window and its wait is reported.
	Idle func(ctx context.Context) error
	// LoadAvg reads the machine's 1-minute load average (nil: /proc/loadavg).
	LoadAvg func() (float64, error)
	// Cores is the machine's CPU count the load average is judged against (0: runtime.NumCPU).
	Cores int
	// Log, when set, gets one human line per window.
	Log io.Writer
	// OnWindow, when set, is called with each window as it ends.
	OnWindow func(Window)
}

// Percentiles is a latency distribution in milliseconds.
type Percentiles struct {
	N    int64   `json:"n"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// LoadAvg is the machine's 1-minute load average over a window: at its start, at its end and
// the highest sampled (once a second).
type LoadAvg struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Max   float64 `json:"max"`
}

// Window is one contiguous window of one kind of call at one offered rate.
type Window struct {
	Kind  string `json:"kind"`
	Round int    `json:"round"`
	// Offered is the scheduled rate; Achieved the calls that succeeded per second of the
	// window's wall time (its calls in flight at its end waited for).
	Offered  float64 `json:"offered_per_sec"`
	Achieved float64 `json:"achieved_per_sec"`
	Seconds  float64 `json:"seconds"`
	// Scheduled calls, of which Unsent were never sent (their slot did not come by the end of
	// the overrun).
	Scheduled int `json:"scheduled"`
	Unsent    int `json:"unsent"`
	// FromSchedule counts each call from its scheduled start (queueing for a slot included;
	// the unsent calls at their lower bound), FromSend from the moment it was sent. Successful
	// calls only.
	FromSchedule Percentiles `json:"from_schedule"`
	FromSend     Percentiles `json:"from_send"`
	// Errors counts the calls by code (CodeOK included).
	Errors map[string]int `json:"errors"`
	// Interrupted counts the calls in flight when the run was interrupted (its context
	// cancelled) that failed for it: stopped by the generator, not failed by the server, so
	// neither in Errors nor in the latencies.
	Interrupted int `json:"interrupted,omitempty"`
	// Fresh counts GetFeed's pages by fresh status, and FreshFromSend times them from their
	// send by fresh status (a page that ran the generator against one served as it stood).
	Fresh         map[string]int         `json:"fresh,omitempty"`
	FreshFromSend map[string]Percentiles `json:"fresh_from_send,omitempty"`
	// DistinctUsers is how many users the window's calls were for.
	DistinctUsers int `json:"distinct_users"`
	// IdleWaitSeconds is how long the wait for an idle server before the window took;
	// IdleError says why it stopped waiting without one.
	IdleWaitSeconds float64 `json:"idle_wait_seconds"`
	IdleError       string  `json:"idle_error,omitempty"`
	LoadAvg         LoadAvg `json:"load_avg"`
	// Warning is set when the load average exceeded the cores during the window.
	Warning string `json:"warning,omitempty"`
	// Held: some call succeeded, the from-schedule p99 under the bound and at least
	// MinAchievedShare of the offered rate achieved.
	Held bool `json:"held"`

	sched, send *hdrhistogram.Histogram
	byFresh     map[string]*hdrhistogram.Histogram
}

// MinAchievedShare is the share of the offered rate a window (or step) must achieve to be held.
const MinAchievedShare = 0.9

// Step is one kind at one offered rate, its windows (rounds) together.
type Step struct {
	Kind         string         `json:"kind"`
	Offered      float64        `json:"offered_per_sec"`
	Achieved     float64        `json:"achieved_per_sec"`
	Windows      int            `json:"windows"`
	Seconds      float64        `json:"seconds"`
	Unsent       int            `json:"unsent"`
	FromSchedule Percentiles    `json:"from_schedule"`
	FromSend     Percentiles    `json:"from_send"`
	Errors       map[string]int `json:"errors"`
	Interrupted  int            `json:"interrupted,omitempty"`
	Held         bool           `json:"held"`
	// FreshFromSend times GetFeed's pages from their send, by fresh status.
	FreshFromSend map[string]Percentiles `json:"fresh_from_send,omitempty"`
}

// Summary is a whole run: every kind at every rate it was measured at, and the highest rate
// each held.
type Summary struct {
	Machine  Machine   `json:"machine"`
	Kinds    []string  `json:"kinds"`
	Rates    []float64 `json:"rates"`
	InFlight int       `json:"in_flight"`
	// WindowSeconds is each window's scheduled length; Rounds how many windows each kind had
	// at each rate.
	WindowSeconds float64 `json:"window_seconds"`
	Rounds        int     `json:"rounds"`
	BoundMs       float64 `json:"p99_bound_ms"`
	Steps         []Step  `json:"steps"`
	// MaxRate is, by kind, the highest offered rate held, every lower rate tried held too
	// (0: not even the first).
	MaxRate map[string]float64 `json:"max_rate_held"`
	// Fresh counts GetFeed's pages by fresh status over the whole run.
	Fresh map[string]int `json:"getfeed_fresh,omitempty"`
	// IdleWaitSeconds is the waits for an idle server, together.
	IdleWaitSeconds float64  `json:"idle_wait_seconds"`
	Warnings        []string `json:"warnings,omitempty"`
	// Population says who the calls were for (users and how they were drawn).
	Population string `json:"population,omitempty"`
	// PeakRSSMiB is the generator's own peak resident set as it wrote the summary (VmHWM;
	// 0 where the system has none).
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
}

// Step returns the step of kind at rate.
func (s *Summary) Step(kind string, rate float64) (Step, bool) {
	for _, st := range s.Steps {
		if st.Kind == kind && st.Offered == rate {
			return st, true
		}
	}
	return Step{}, false
}

// histogram range: 1 µs to one hour, 3 significant digits.
const histMaxMicros = int64(time.Hour / time.Microsecond)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMaxMicros, 3) }

// record adds d to h, clamped to the histogram's range.
func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := min(max(d.Microseconds(), 1), histMaxMicros)
	_ = h.RecordValue(us)
}

// percentiles reads h in milliseconds.
func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	msOf := func(us int64) float64 { return float64(us) / 1000 }
	return Percentiles{N: h.TotalCount(), P50: msOf(h.ValueAtQuantile(50)), P99: msOf(h.ValueAtQuantile(99)),
		P999: msOf(h.ValueAtQuantile(99.9)), Max: msOf(h.Max()), Mean: h.Mean() / 1000}
}

// Run measures every kind at every rate (Config) and returns the windows and their summary.
func Run(ctx context.Context, cfg Config) ([]Window, *Summary, error) {
	if len(cfg.Kinds) == 0 || len(cfg.Rates) == 0 || cfg.Window <= 0 || cfg.InFlight <= 0 {
		return nil, nil, errors.New("loadgen: need kinds, rates, a window and calls in flight")
	}
	rates := slices.Clone(cfg.Rates)
	sort.Float64s(rates)
	for _, r := range rates {
		if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, nil, fmt.Errorf("loadgen: rate %v: want a positive number", r)
		}
	}
	rounds := max(cfg.Rounds, 1)
	failed := map[string]bool{}
	var windows []Window
	for _, rate := range rates {
		report := slices.Contains(cfg.ReportRates, rate)
		var active []Kind
		for _, k := range cfg.Kinds {
			if report || !failed[k.Name] {
				active = append(active, k)
			}
		}
		if len(active) == 0 {
			continue // every kind failed a lower rate: on to the next report rate, if any
		}
		var here []Window
		for round := range rounds {
			for _, k := range active {
				if err := ctx.Err(); err != nil {
					return windows, summarize(cfg, rates, windows), err
				}
				w := runWindow(ctx, cfg, k, rate, round)
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "loadgen: %s at %.0f/s (round %d): %.0f/s achieved, p50 %.2f p99 %.2f p99.9 %.2f ms from schedule, p99 %.2f ms from send, %d errors, %d unsent%s, idle wait %.1f s, load %.1f%s\n",
						w.Kind, w.Offered, w.Round+1, w.Achieved, w.FromSchedule.P50, w.FromSchedule.P99, w.FromSchedule.P999, w.FromSend.P99,
						w.Scheduled-w.Unsent-w.Errors[CodeOK]-w.Interrupted, w.Unsent, interruptedSuffix(w.Interrupted), w.IdleWaitSeconds, w.LoadAvg.Max, warnSuffix(w.Warning))
				}
				if cfg.OnWindow != nil {
					cfg.OnWindow(w)
				}
				windows = append(windows, w)
				here = append(here, w)
			}
		}
		for _, k := range active {
			if st := mergeStep(k.Name, rate, here, cfg.Bound); !st.Held {
				failed[k.Name] = true
			}
		}
	}
	return windows, summarize(cfg, rates, windows), nil
}

func interruptedSuffix(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d interrupted", n)
}

func warnSuffix(w string) string {
	if w == "" {
		return ""
	}
	return " (" + w + ")"
}

// job is one scheduled call.
type job struct {
	due  time.Time
	user uint64
}

// acc is one worker's measurements.
type acc struct {
	sched, send *hdrhistogram.Histogram
	codes       map[string]int
	interrupted int // calls that failed because ctx was cancelled (the run interrupted)
	fresh       map[string]int
	byFresh     map[string]*hdrhistogram.Histogram // OK calls from their send, by fresh status
}

// startCallers starts cfg.InFlight callers of k taking their jobs from jobs, each counting
// into its acc; wait returns once jobs is closed and every call has returned.
func startCallers(ctx context.Context, cfg Config, k Kind) (accs []*acc, jobs chan job, wait func()) {
	accs = make([]*acc, cfg.InFlight)
	jobs = make(chan job)
	var wg sync.WaitGroup
	for i := range accs {
		a := &acc{sched: newHist(), send: newHist(), codes: map[string]int{}, fresh: map[string]int{},
			byFresh: map[string]*hdrhistogram.Histogram{}}
		accs[i] = a
		wg.Go(func() { a.serve(ctx, k.Call, cfg.CallTimeout, jobs) })
	}
	return accs, jobs, wg.Wait
}

// recordUnsent records the calls i.. of n (due every interval from start) that were never sent
// and returns how many there were. They waited at least until cut, the end of the overrun (or
// the cancellation): their lower bound goes into the from-schedule histogram. Calls due after
// the cut (a window cancelled early) were never scheduled.
func recordUnsent(unsent *hdrhistogram.Histogram, start time.Time, interval float64, i, n int, cut time.Time) int {
	k := i
	for due := start.Add(time.Duration(float64(i) * interval)); k < n && due.Before(cut); due = start.Add(time.Duration(float64(k) * interval)) {
		record(unsent, cut.Sub(due))
		k++
	}
	return k - i
}

// serve makes the calls of jobs, each with timeout (0: none), and counts them in a: its code,
// its fresh status, and an OK call's latency from its due time and from its send.
func (a *acc) serve(ctx context.Context, call Call, timeout time.Duration, jobs <-chan job) {
	for j := range jobs {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, timeout)
		}
		sent := time.Now()
		out := call(cctx, j.user)
		end := time.Now()
		cancel()
		if out.Code != CodeOK && ctx.Err() != nil {
			a.interrupted++
			continue
		}
		a.codes[out.Code]++
		if out.Fresh != "" {
			a.fresh[out.Fresh]++
		}
		if out.Code == CodeOK {
			record(a.sched, end.Sub(j.due))
			record(a.send, end.Sub(sent))
			if out.Fresh != "" {
				h := a.byFresh[out.Fresh]
				if h == nil {
					h = newHist()
					a.byFresh[out.Fresh] = h
				}
				record(h, end.Sub(sent))
			}
		}
	}
}

// merge sums the callers' counts into w, with the unsent calls' lower bounds in the
// from-schedule histogram.
func (w *Window) merge(accs []*acc, unsent *hdrhistogram.Histogram) {
	w.sched, w.send = unsent, newHist()
	w.Fresh = map[string]int{}
	for _, a := range accs {
		w.sched.Merge(a.sched)
		w.send.Merge(a.send)
		w.byFresh = mergeByFresh(w.byFresh, a.byFresh)
		for c, v := range a.codes {
			w.Errors[c] += v
		}
		w.Interrupted += a.interrupted
		for f, v := range a.fresh {
			w.Fresh[f] += v
		}
	}
	if len(w.Fresh) == 0 {
		w.Fresh = nil
	}
	w.FreshFromSend = freshPercentiles(w.byFresh)
}

// mergeByFresh merges the histograms of from into into (made when nil), by fresh status.
func mergeByFresh(into, from map[string]*hdrhistogram.Histogram) map[string]*hdrhistogram.Histogram {
	for f, h := range from {
		if into == nil {
			into = map[string]*hdrhistogram.Histogram{}
		}
		if into[f] == nil {
			into[f] = newHist()
		}
		into[f].Merge(h)
	}
	return into
}

// freshPercentiles are the percentiles of each fresh status's histogram (nil: none).
func freshPercentiles(by map[string]*hdrhistogram.Histogram) map[string]Percentiles {
	if len(by) == 0 {
		return nil
	}
	out := make(map[string]Percentiles, len(by))
	for f, h := range by {
		out[f] = percentiles(h)
	}
	return out
}

// runWindow offers k at rate for cfg.Window (its calls sent until cfg.Overrun past it) after
// waiting for an idle server.
func runWindow(ctx context.Context, cfg Config, k Kind, rate float64, round int) Window {
	w := Window{Kind: k.Name, Round: round, Offered: rate, Errors: map[string]int{}}
	if cfg.Idle != nil {
		t := time.Now()
		if err := cfg.Idle(ctx); err != nil {
			w.IdleError = err.Error()
		}
		w.IdleWaitSeconds = time.Since(t).Seconds()
	}
	cores, readLoad := cfg.Cores, cfg.LoadAvg
	if cores <= 0 {
		cores = runtime.NumCPU()
	}
	if readLoad == nil {
		readLoad = ProcLoadAvg
	}
	stopLoad := sampleLoad(readLoad, &w.LoadAvg)

	n := int(rate * cfg.Window.Seconds())
	accs, jobs, wait := startCallers(ctx, cfg, k)
	users := map[uint64]struct{}{}
	start := time.Now()
	stopAt := start.Add(cfg.Window + cfg.Overrun)
	deadline := time.NewTimer(cfg.Window + cfg.Overrun)
	defer deadline.Stop()
	unsent := newHist()
	interval := float64(time.Second) / rate
	i := 0
send:
	for ; i < n; i++ {
		due := start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				break send
			}
		}
		var u uint64
		if cfg.Picker != nil {
			u = cfg.Picker()
		}
		users[u] = struct{}{}
		select {
		case jobs <- job{due: due, user: u}:
		case <-deadline.C:
			break send
		case <-ctx.Done():
			break send
		}
	}
	cut := time.Now()
	if cut.After(stopAt) {
		cut = stopAt
	}
	w.Unsent = recordUnsent(unsent, start, interval, i, n, cut)
	scheduled := i + w.Unsent
	close(jobs)
	wait()
	el := time.Since(start)
	stopLoad()

	w.merge(accs, unsent)
	w.Scheduled, w.Seconds, w.DistinctUsers = scheduled, el.Seconds(), len(users)
	if el > 0 {
		w.Achieved = float64(w.Errors[CodeOK]) / el.Seconds()
	}
	w.FromSchedule, w.FromSend = percentiles(w.sched), percentiles(w.send)
	w.Held = held(w.Errors[CodeOK], w.FromSchedule.P99, w.Achieved, rate, cfg.Bound)
	if w.LoadAvg.Max > float64(cores) {
		w.Warning = fmt.Sprintf("load average %.1f over %d cores: more runnable threads than cores during the window (the server, Redis and this generator count too: see the phase monitor for other processes' CPU)", w.LoadAvg.Max, cores)
	}
	return w
}

// held is the stop rule: some call succeeded, p99 from schedule under bound, and at least
// MinAchievedShare of the offered rate achieved (failed calls are not achieved).
func held(ok int, p99ms, achieved, offered float64, bound time.Duration) bool {
	return ok > 0 && p99ms < float64(bound)/float64(time.Millisecond) && achieved >= MinAchievedShare*offered
}

// mergeStep is kind at rate over its windows among ws.
func mergeStep(kind string, rate float64, ws []Window, bound time.Duration) Step {
	st := Step{Kind: kind, Offered: rate, Errors: map[string]int{}}
	sched, send := newHist(), newHist()
	var byFresh map[string]*hdrhistogram.Histogram
	for _, w := range ws {
		if w.Kind != kind || w.Offered != rate {
			continue
		}
		byFresh = mergeByFresh(byFresh, w.byFresh)
		st.Windows++
		st.Seconds += w.Seconds
		st.Unsent += w.Unsent
		st.Interrupted += w.Interrupted
		for c, v := range w.Errors {
			st.Errors[c] += v
		}
		if w.sched != nil {
			sched.Merge(w.sched)
			send.Merge(w.send)
		}
	}
	if st.Seconds > 0 {
		st.Achieved = float64(st.Errors[CodeOK]) / st.Seconds
	}
	st.FromSchedule, st.FromSend = percentiles(sched), percentiles(send)
	st.FreshFromSend = freshPercentiles(byFresh)
	st.Held = held(st.Errors[CodeOK], st.FromSchedule.P99, st.Achieved, rate, bound)
	return st
}

// summarize merges the windows into steps and finds each kind's highest rate held.
func summarize(cfg Config, rates []float64, ws []Window) *Summary {
	s := &Summary{Machine: Describe(), Rates: rates, InFlight: cfg.InFlight, WindowSeconds: cfg.Window.Seconds(),
		Rounds: max(cfg.Rounds, 1), BoundMs: float64(cfg.Bound) / float64(time.Millisecond), MaxRate: map[string]float64{}}
	fresh := map[string]int{}
	for _, w := range ws {
		s.IdleWaitSeconds += w.IdleWaitSeconds
		if w.Warning != "" {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s at %.0f/s (round %d): %s", w.Kind, w.Offered, w.Round+1, w.Warning))
		}
		if w.IdleError != "" {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s at %.0f/s (round %d): the server was not idle before the window: %s", w.Kind, w.Offered, w.Round+1, w.IdleError))
		}
		for f, v := range w.Fresh {
			fresh[f] += v
		}
	}
	if len(fresh) > 0 {
		s.Fresh = fresh
	}
	for _, k := range cfg.Kinds {
		s.Kinds = append(s.Kinds, k.Name)
		stillHeld := true
		s.MaxRate[k.Name] = 0
		for _, r := range rates {
			st := mergeStep(k.Name, r, ws, cfg.Bound)
			if st.Windows == 0 {
				continue
			}
			s.Steps = append(s.Steps, st)
			if stillHeld && st.Held {
				s.MaxRate[k.Name] = r
			} else {
				stillHeld = false
			}
		}
	}
	return s
}
