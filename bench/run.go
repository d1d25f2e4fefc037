package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// System is the running SmartFeed that the harness drives: cmd/smartfeed wires it to the real
// services (an in-process `all` over the real Redis and store).
type System interface {
	// CreateUsers creates n users and returns their IDs.
	CreateUsers(ctx context.Context, n int) ([]uint64, error)
	// Follow records that follower follows followee (both directions, as the graph API does).
	Follow(ctx context.Context, follower, followee uint64) error
	// Pin creates a pin by author and publishes its event through pinlater (the worker fans it
	// out), returning the pin's ID once the event is enqueued. Arrived reports when the pin
	// reaches the pools of the users in watch.
	Pin(ctx context.Context, author uint64, watch []uint64) (uint64, error)
	// Arrived reports whether pin has been written to user's pools (a user watched in the Pin
	// call) and when: as the worker saw it, not by reading the pools. A report of true is
	// given once.
	Arrived(ctx context.Context, user, pin uint64) (at time.Time, ok bool, err error)
	// PoolInserts is the worker's cumulative pool-insert count.
	PoolInserts() float64
	// FanoutPending is the number of fanout tasks not yet done.
	FanoutPending(ctx context.Context) (int, error)
	// GetFeed reads user's first page of n items over loopback gRPC.
	GetFeed(ctx context.Context, user uint64, n int) error
	// SlowPrimary makes a fraction of the primary's reads take extra (0 clears it).
	SlowPrimary(ctx context.Context, fraction float64, extra time.Duration) error
	// Hedging turns speculative reads on (the default policy) or off.
	Hedging(ctx context.Context, on bool) error
	// Hedges returns the cumulative hedged reads sent to the standby and GetFeed calls.
	Hedges() (hedged, calls float64)
	// Cutoff is the hedging cutoff in use.
	Cutoff(ctx context.Context) (time.Duration, error)
	// StandbyP999 is the standby's p99.9 read latency as the service measured it.
	StandbyP999() time.Duration
	// GeneratorTime is the cumulative count and time of the feed service's generator calls
	// (first pages), as the service measured them.
	GeneratorTime() (calls float64, total time.Duration)
}

// Pinger is a System that can also make an empty call over the transport GetFeed uses (the
// gRPC health check on the same connection): the floor under GetFeed's latency at the client,
// measured at the same offered load and concurrency.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Prepinner is a System that can make a pin without publishing its event, and publish that
// event later. The burst then makes its pins before it starts timing and times their events'
// fanout alone, as its peers are timed: the Redis sorted sets and the raw store write the same
// receivers' rows and make no pins. A System that is not one has its pins made inside the
// burst (Pin).
type Prepinner interface {
	// MakePin creates a pin by author (its object and edges) and returns its ID, publishing
	// nothing.
	MakePin(ctx context.Context, author uint64) (uint64, error)
	// PublishPin publishes the event of a pin MakePin made (the worker fans it out).
	PublishPin(ctx context.Context, author, pin uint64) error
}

// Baseline is the Mastodon-style peer: a Redis sorted set per user.
type Baseline interface {
	// Push adds pin to every receiver's feed (pipelined ZADD + trim) and returns the inserts.
	Push(ctx context.Context, receivers []uint64, pin uint64, score float64) (int, error)
	// Read returns the first n of user's feed (ZREVRANGE 0..n-1).
	Read(ctx context.Context, user uint64, n int) ([]uint64, error)
}

// Options sizes a run.
type Options struct {
	Profile   string
	Storage   string
	Seed      uint64
	Users     []int         // the scale curve's sizes; the first is the main run's
	EventRate float64       // sustained events per second of the fanout phase
	FanoutFor time.Duration // length of the fanout phase
	StepRates []float64     // event rates tried for the highest sustainable rate
	StepFor   time.Duration
	ReadRate  float64 // offered GetFeed (and ZREVRANGE) calls per second
	ReadFor   time.Duration
	// ReadSlice is the turn of each kind of call in the serving phase: GetFeed, the Redis
	// peer's ZREVRANGE and the empty gRPC call take turns of ReadSlice until each has had
	// ReadFor, so that all three meet the same machine (0: ReadFor, one after the other).
	ReadSlice    time.Duration
	Concurrency  int
	PageSize     int
	SlowFraction float64 // of primary reads slowed in the hedging phase
	SlowBy       time.Duration
	HedgeFor     time.Duration
	LagBound     time.Duration
	RawRows      int // the least rows of the raw write measurement (it writes as many as the burst inserts)
	ScaleEvents  int
	// BurstEvents are published at once, with nobody polling for their arrival, for the
	// fanout's capacity (0: as many as the sustained phase had). It is sized so that the
	// fanout takes seconds, not the few hundred milliseconds the drain poll can blur.
	BurstEvents   int
	MachineString string
	Commit        string

	// ReadStepRates are the offered GetFeed (and ZREVRANGE) rates tried, ReadStepFor long each
	// (or long enough to offer ReadStepMinCalls) with ReadStepConcurrency in flight, for the
	// highest rate held with p99 under ReadP99Bound.
	ReadStepRates       []float64
	ReadStepFor         time.Duration
	ReadStepMinCalls    int
	ReadStepConcurrency int
	ReadP99Bound        time.Duration

	// LoadGenRates are the rates the load generator steps each kind of call through (with
	// LoadGen; the rates every kind is measured at, LoadGenRatioRates, among them), and
	// LoadGenIdleMax bounds its wait for an idle server before each window.
	LoadGenRates   []float64
	LoadGenIdleMax time.Duration

	// Scale builds a fresh system of the given number of users for the scale curve; nil
	// measures the main size only.
	Scale func(ctx context.Context, users int) (System, func(), error)
	// Phase, when set, is called as each measured phase starts (one of Phases) and returns
	// the function called as it ends: a CPU profile of one phase, for instance.
	Phase func(name string) (end func())
	// UnderFanout, when set, is called once right after the serving phase, its fanout (at
	// EventRate) still running: peers measured under the write load GetFeed was, on the store
	// as the phase left it (HBase's own Java client), given the phase's readers (their IDs, in
	// the order the phase read them, repeats and all). Its error becomes a note.
	UnderFanout func(ctx context.Context, readers []uint64) error
	// LoadGen, when set, runs the read-throughput phase with the load generator in its own
	// process (LoadGenRun) instead of the in-process search of ReadStepRates.
	LoadGen LoadGenRun
	// Beside, when set, is called right after the serving phase (before UnderFanout), its
	// fanout still running, while GetFeed goes on at the phase's offered rate and concurrency
	// over the same readers and is measured (ReadResult.BesidePeer): a peer making GetFeed's
	// reads measured in the same stretch of time, on the same store under the same load, as
	// GetFeed is. It is given the phase's readers as UnderFanout is. Its error becomes a note.
	Beside func(ctx context.Context, readers []uint64) error
	// MaxFollowers caps every bucket's followers per user (0: the social model's counts; its
	// top 2% have 10% of the network each, 2 billion follows at 1M users).
	MaxFollowers int

	// WorkerSlots, ChunkSize and TrimEvery are the worker's task slots, receivers per fanout
	// chunk and trim schedule: the fanout's peers write the burst's rows in the worker's
	// batches on as many clients, and the Redis peer trims on the same schedule.
	WorkerSlots, ChunkSize, TrimEvery int
	// RedisPeers are the Redis sorted-set peers of the equal-work fanout, one per Redis server
	// (durability stated); empty: the Baseline given to Run, durability unknown.
	RedisPeers []RedisPeer
	// RawPrefillBytes of pool rows are written to the raw peer's table before it is measured,
	// so that its store holds more than a memtable (0: none).
	RawPrefillBytes int64
	// ReadLoad, when set, runs the sustainable-event-rate steps while the load generator offers
	// GetFeed at LagReadRate in a process of its own (LagUnderReads).
	ReadLoad    ReadLoad
	LagReadRate float64
	// Processes are the run's other long-lived processes (Redis servers): their CPU is the
	// run's in each phase's load, and their peak RSS is reported.
	Processes []Process
}

// Phases are the names Options.Phase is called with, in the order a run goes through them.
var Phases = []string{"load", "fanout", "peers", "burst", "steps", "serving", "read-rates", "hedging", "scale"}

// phase starts the named phase for Options.Phase and returns its end.
func (o Options) phase(name string) func() {
	if o.Phase == nil {
		return func() {}
	}
	return o.Phase(name)
}

// Quick is the profile `make bench` runs: 100,000 users written by the bulk loader (31M
// follows), the scale curve's second point 10,000. The reads are measured by the load
// generator in its own process at 200, 1,000, 5,000 and 10,000 calls/s, 20 s windows; the
// in-process serving phase (20 s for each kind of call) runs only for the HBase peers.
func Quick() Options {
	return Options{Profile: "quick", Seed: 8, Users: []int{100000, 10000}, EventRate: 10, FanoutFor: 20 * time.Second,
		StepRates: []float64{5, 20, 80, 320, 640, 1280}, StepFor: 8 * time.Second, ReadRate: 200, ReadFor: 20 * time.Second, ReadSlice: time.Second,
		Concurrency: 32, PageSize: 50, SlowFraction: 0.01, SlowBy: 500 * time.Millisecond, HedgeFor: 10 * time.Second,
		LagBound: 2 * time.Second, RawRows: 200000, ScaleEvents: 60, BurstEvents: 2000,
		ReadStepRates: []float64{50, 100, 200, 500, 1000, 2000, 5000, 10000}, ReadStepFor: 3 * time.Second,
		ReadStepMinCalls: 500, ReadStepConcurrency: 128, ReadP99Bound: 10 * time.Millisecond,
		LoadGenRates: []float64{200, 1000, 5000, 10000}, LoadGenIdleMax: 30 * time.Second}
}

// Full is the scale profile: 1,000,000 users (the scale curve 10,000 and 100,000 besides), longer
// phases.
func Full() Options {
	o := Quick()
	// 1M users with the top bucket capped at 1,000 followers each (130M follows); uncapped the
	// model's top 2% would have 100,000 followers each, 2 billion follows.
	o.Profile, o.Users, o.MaxFollowers = "full", []int{1000000, 10000, 100000}, 1000
	o.EventRate = 20
	o.FanoutFor, o.HedgeFor, o.StepFor = time.Minute, 30*time.Second, 20*time.Second
	o.ReadStepFor = 10 * time.Second
	o.StepRates = []float64{10, 40, 160, 640, 1280, 2560}
	o.ScaleEvents = 200
	o.ReadFor = time.Minute
	o.LoadGenRates, o.LoadGenIdleMax = []float64{200, 1000, 2000, 5000, 10000}, time.Minute
	o.BurstEvents = 8000
	return o
}

// Results is results.json.
type Results struct {
	Profile string             `json:"profile"`
	Storage string             `json:"storage"`
	Machine string             `json:"machine"`
	Commit  string             `json:"commit"`
	Started time.Time          `json:"started"`
	Seconds float64            `json:"seconds"`
	Model   map[string]int     `json:"model"`
	Load    *LoadReport        `json:"load,omitempty"` // the bulk load of the main graph
	Fanout  FanoutResult       `json:"fanout"`
	Steps   []StepResult       `json:"sustainable_rate_steps"`
	Reads   ReadResult         `json:"reads"`
	Hedging []HedgeResult      `json:"hedging"`
	Scale   []ScaleResult      `json:"scale"`
	RSSMiB  float64            `json:"peak_rss_mib"`
	Ratios  map[string]float64 `json:"ratios"`
	Notes   []string           `json:"notes"`
	// NotMeasured lists the RatioKeys this run could not measure (written as 0 in Ratios).
	NotMeasured []string `json:"ratios_not_measured,omitempty"`

	// Replication is the standby's replication lag under the run's write load; absent when
	// the System has no replicated standby.
	Replication *ReplicationResult `json:"replication,omitempty"`

	// GraphReads is the join cache against the store alone (GraphReads); absent when not
	// measured.
	GraphReads []GraphReadResult `json:"graph_reads,omitempty"`

	// GetFeedRateSteps are the offered GetFeed rates tried (fanout running), up to the first
	// not held; GetFeedMaxRate is the highest offered rate held with p99 under the bound
	// (RateStepBoundMs, 10 ms in both profiles). RedisRateSteps and RedisMaxRate: the same
	// for the peer's ZREVRANGE.
	GetFeedRateSteps []ReadStep `json:"getfeed_rate_steps"`
	GetFeedMaxRate   float64    `json:"getfeed_max_rate_p99_under_10ms"`
	RedisRateSteps   []ReadStep `json:"redis_rate_steps"`
	RedisMaxRate     float64    `json:"redis_max_rate_p99_under_10ms"`
	// FloorRateSteps and FloorMaxRate: the same search on an empty call over GetFeed's
	// transport (a Pinger System; absent otherwise). The gRPC stack, the load generator and
	// the machine allow no more than it holds, whatever GetFeed does.
	FloorRateSteps  []ReadStep `json:"grpc_floor_rate_steps,omitempty"`
	FloorMaxRate    float64    `json:"grpc_floor_max_rate_p99_under_10ms,omitempty"`
	RateStepBoundMs float64    `json:"rate_steps_p99_bound_ms"`
	RateStepConc    int        `json:"rate_steps_concurrency"`

	// LoadGen is the load generator's run in its own process (Options.LoadGen); absent when
	// the read rates were searched in process.
	LoadGen *LoadGenResult `json:"loadgen,omitempty"`

	// HBaseJava is zen on HBase against HBase's own Java client on the same server; absent
	// when not measured (Pebble, or no PerformanceEvaluation).
	HBaseJava *HBaseJava `json:"hbase_java,omitempty"`

	// EqualWork is the fanout's capacity against its peers doing the worker's work on as many
	// clients (fanout_vs_redis_equal, fanout_vs_raw_store_equal).
	EqualWork *EqualWork `json:"fanout_equal_work,omitempty"`
	// LagUnderReads is the sustainable event rate with GetFeed offered at 1,000/s by the load
	// generator (fanout_lag_p99_s_at_read_load); absent without Options.ReadLoad.
	LagUnderReads *LagUnderReads `json:"fanout_lag_under_reads,omitempty"`
	// PhaseLoad is the machine during each phase; Processes the peak RSS of each process.
	PhaseLoad []PhaseLoad  `json:"phase_load"`
	Processes []ProcessRSS `json:"processes_peak_rss"`

	lagSeries []lagPoint
	getfeed   []time.Duration
	redis     []time.Duration
}

// FanoutResult is the sustained fanout phase with its peers.
type FanoutResult struct {
	Events             int     `json:"events"`
	EventRate          float64 `json:"event_rate"`
	Inserts            float64 `json:"pool_inserts"`
	InsertsPerSec      float64 `json:"pool_inserts_per_sec"`
	LagMs              Summary `json:"lag"`
	RedisInsertsPerSec float64 `json:"redis_inserts_per_sec"`
	RawRowsPerSec      float64 `json:"raw_store_rows_per_sec"`
	// RawRows is how many rows the raw write rate was measured on: as many as the burst inserts.
	RawRows      int     `json:"raw_store_rows"`
	DrainSeconds float64 `json:"drain_seconds"`
	// BurstEvents were published at once after the sustained phase; BurstInsertsPerSec is the
	// pool inserts per second from their first publish until the fanout queues drained: the
	// capacity the ratios compare with the peers, which also write as fast as they can (the
	// sustained figure is bounded by the offered event rate).
	BurstEvents        int     `json:"burst_events"`
	BurstInsertsPerSec float64 `json:"burst_pool_inserts_per_sec"`
	// BurstSeconds is the burst's time from its first publish until the queues drained.
	BurstSeconds float64 `json:"burst_seconds"`
	// BurstPublishSeconds is how long publishing the burst's events took (64 at a time): the
	// part of BurstSeconds in which the queues were still being filled.
	BurstPublishSeconds float64 `json:"burst_publish_seconds"`
	// BurstPinsMadeSeconds is how long making the burst's pins took (64 at a time) before the
	// burst was timed (a Prepinner); 0 when the pins were made inside the burst, whose figures
	// then include their making.
	BurstPinsMadeSeconds float64 `json:"burst_pins_made_seconds"`
}

// StepResult is one rate of the sustainable-rate search.
type StepResult struct {
	Rate        float64 `json:"rate"`
	Events      int     `json:"events"`
	LagP99Ms    float64 `json:"lag_p99_ms"`
	Sustainable bool    `json:"sustainable"`
}

// ReadResult is GetFeed against Redis ZREVRANGE at one offered load.
type ReadResult struct {
	Offered     float64 `json:"offered_per_sec"`
	Concurrency int     `json:"concurrency"`
	GetFeed     Summary `json:"getfeed"`
	GetFeedRate float64 `json:"getfeed_achieved_per_sec"`
	Errors      int     `json:"getfeed_errors"`
	Redis       Summary `json:"redis_zrevrange"`
	RedisRate   float64 `json:"redis_achieved_per_sec"`
	FirstP99Ms  float64 `json:"getfeed_first_third_p99_ms"`
	LastP99Ms   float64 `json:"getfeed_last_third_p99_ms"`
	// P99ByMinuteMs is GetFeed's p99 over the calls that started in each minute of the
	// phase's wall time (the kinds' turns together), when the phase lasts two minutes or more;
	// FirstMinuteP99Ms and LastMinuteP99Ms are its ends.
	P99ByMinuteMs    []float64 `json:"getfeed_p99_by_minute_ms,omitempty"`
	FirstMinuteP99Ms float64   `json:"getfeed_first_minute_p99_ms,omitempty"`
	LastMinuteP99Ms  float64   `json:"getfeed_last_minute_p99_ms,omitempty"`
	// RedisP99ByMinuteMs and FloorP99ByMinuteMs are the same for the Redis peer and the empty
	// gRPC call, whose turns share the phase with GetFeed's.
	RedisP99ByMinuteMs []float64 `json:"redis_p99_by_minute_ms,omitempty"`
	FloorP99ByMinuteMs []float64 `json:"grpc_floor_p99_by_minute_ms,omitempty"`
	// BesidePeer is GetFeed right after the phase, at its offered rate and concurrency over its
	// readers, while a peer made GetFeed's reads beside it (Options.Beside).
	BesidePeer *Summary `json:"getfeed_beside_peer,omitempty"`
	// FirstVisits are each distinct reader's first GetFeed, made one after the other before
	// the phase, with no fanout running: a user never seen has nothing prepared, so these are
	// the pages that run the generator.
	FirstVisits Summary `json:"getfeed_first_visits"`
	// Readers is how many distinct users the GetFeeds read (the model's active readers,
	// weighted by how much each reads), so each came back every Readers/Offered seconds on
	// average: the bench's readers reload far more often than people do, which a per-user
	// bound on generator calls (feed.min_chunk_interval) turns into plain reads.
	Readers int `json:"distinct_readers"`
	// GeneratorCalls and GeneratorMeanMs: the generator calls made by those GetFeeds (first
	// pages) and their mean time, from the service's own histogram.
	GeneratorCalls  float64 `json:"generator_calls"`
	GeneratorMeanMs float64 `json:"generator_mean_ms"`
	// Stages are the system's own per-stage histograms over the GetFeed calls of the phase
	// (smartfeed_feed_stage_seconds, smartfeed_generator_stage_seconds).
	Stages []StageResult `json:"stages,omitempty"`
	// Fresh counts the GetFeed calls of the phase by the page's fresh status, from the
	// service's own counter: "generator_timeout" is a first page whose generator call missed
	// its deadline (the page came without new pins).
	Fresh map[string]uint64 `json:"fresh,omitempty"`
	// Prepared counts the phase's background preparations and prepared chunks by outcome, from
	// the service's own counter (smartfeed_feed_prepared_total): a first page that found no
	// prepared chunk ("busy", "empty", "failed" preparations) runs the generator.
	Prepared map[string]uint64 `json:"prepared,omitempty"`
	// Sched is how long the process's goroutines waited, runnable, for a CPU during the GetFeed
	// calls' turns (Go's scheduler; the Redis peer's calls wait in the same process).
	Sched *SchedResult `json:"sched_wait,omitempty"`
	// RedisSched is the same over the Redis peer's calls.
	RedisSched *SchedResult `json:"redis_sched_wait,omitempty"`
	// Floor is an empty call over GetFeed's transport (Pinger) at the same offered load and
	// concurrency, in turns with GetFeed and the Redis peer, the fanout running: what GetFeed
	// would cost at the client if the service took no time.
	Floor *Summary `json:"grpc_floor,omitempty"`
	// Turns says how the kinds of call shared the phase: "in turns of 1s", or "one after the
	// other" (Options.ReadSlice).
	Turns string `json:"turns,omitempty"`
}

// HedgeResult is GetFeed with the primary's tail slowed, hedging on or off.
type HedgeResult struct {
	Hedging     bool    `json:"hedging"`
	GetFeed     Summary `json:"getfeed"`
	ExtraLoad   float64 `json:"extra_load"`
	CutoffMs    float64 `json:"cutoff_ms"`
	StandbyP999 float64 `json:"standby_p999_ms"`
}

// ScaleResult is the cost per event at one size.
type ScaleResult struct {
	Users          int     `json:"users"`
	Follows        int     `json:"follows"`
	Events         int     `json:"events"`
	Inserts        float64 `json:"inserts"`
	CPUSecPerEvent float64 `json:"cpu_ms_per_event"`
	WallPerInsert  float64 `json:"wall_us_per_insert"`
	GetFeedP99Ms   float64 `json:"getfeed_p99_ms"`
	// CPUMsPerRead is the bench process's CPU per GetFeed page while only the reads ran (the
	// server's and its in-process client's both).
	CPUMsPerRead float64 `json:"cpu_ms_per_read"`
	Reads        int     `json:"reads"`
}

type lagPoint struct {
	at  time.Duration
	lag time.Duration
}

// World is a built social graph on a System: the model and the users' IDs.
type World struct {
	M    *Model
	IDs  []uint64
	Load *LoadReport // the bulk load that wrote the graph (nil: built through the API)
}

// Progress reports a phase's advance; Run prints bars on a terminal, plain lines otherwise.
type Progress func(phase string, done, total int)

// ModelLoader is a System that can write a model's whole population at once with the bulk
// loader (smartfeed load's), the rows the graph API would write, instead of one call per user
// and per follow. It returns the users' IDs by model index and what the load did.
type ModelLoader interface {
	LoadModel(ctx context.Context, m *Model, progress Progress) ([]uint64, *LoadReport, error)
}

// LoadReport is a bulk load of the graph as results.json keeps it.
type LoadReport struct {
	Users      int64   `json:"users"`
	Follows    int64   `json:"follows"`
	Rows       int64   `json:"rows"`    // rows written: objects, keys, edges and inverses, counts
	Seconds    float64 `json:"seconds"` // wall time of the load
	RowsPerSec float64 `json:"rows_per_sec"`
	PeakRSSMiB float64 `json:"peak_rss_mib"` // the process's peak RSS after the load
}

// Build writes the model's users and follows on sys: with its bulk loader when sys is a
// ModelLoader, else through its API with parallel writers.
func Build(ctx context.Context, sys System, m *Model, progress Progress) (*World, error) {
	if l, ok := sys.(ModelLoader); ok {
		ids, rep, err := l.LoadModel(ctx, m, progress)
		if err != nil {
			return nil, fmt.Errorf("load the graph: %w", err)
		}
		rep.PeakRSSMiB = peakRSSMiB()
		return &World{M: m, IDs: ids, Load: rep}, nil
	}
	ids, err := sys.CreateUsers(ctx, m.Users)
	if err != nil {
		return nil, fmt.Errorf("create users: %w", err)
	}
	type edge struct{ a, b int }
	edges := make(chan edge, 1024)
	var done atomic.Int64
	total := m.Edges()
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range edges {
				if err := sys.Follow(ctx, ids[e.a], ids[e.b]); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				if n := done.Add(1); n%2000 == 0 && progress != nil {
					progress("graph", int(n), total)
				}
			}
		}()
	}
feed:
	for u := range m.Users {
		for _, f := range m.FollowersOf(u) {
			select {
			case edges <- edge{f, u}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(edges)
	wg.Wait()
	if progress != nil {
		progress("graph", total, total)
	}
	if firstErr != nil {
		return nil, fmt.Errorf("follows: %w", firstErr)
	}
	return &World{M: m, IDs: ids}, ctx.Err()
}

// fanout publishes events at rate for d and measures the lag of sampled followers (the time
// from the event's enqueue until the pin is in that follower's pool).
func fanout(ctx context.Context, sys System, w *World, rate float64, d time.Duration, salt uint64, series *[]lagPoint, t0 time.Time) (events int, lags *Latencies, err error) {
	authors := w.M.Authors(int(rate*d.Seconds())+1, salt)
	lags = &Latencies{}
	var mu sync.Mutex
	var errs atomic.Int64
	var pollers sync.WaitGroup
	events = paced(ctx, rate, d, len(authors), 64, func(i int) {
		a := authors[i]
		// Sample up to 3 followers, the last ones of the list; the lag is the slowest.
		fs := w.M.FollowersOf(a)
		var watch []uint64
		if len(fs) > 0 && i%4 == 0 {
			for _, f := range fs[max(0, len(fs)-3):] {
				watch = append(watch, w.IDs[f])
			}
		}
		enq := time.Now()
		pin, err := sys.Pin(ctx, w.IDs[a], watch)
		if err != nil {
			errs.Add(1)
			return
		}
		if len(watch) == 0 {
			return
		}
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			deadline := enq.Add(30 * time.Second)
			left := watch
			// The arrival time is the worker's, so the poll interval only delays noticing it.
			var last time.Time
			for len(left) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
				keep := left[:0]
				for _, f := range left {
					at, ok, err := sys.Arrived(ctx, f, pin)
					if err != nil || !ok {
						keep = append(keep, f)
						continue
					}
					if at.After(last) {
						last = at
					}
				}
				left = keep
				if len(left) > 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if len(left) == 0 {
				l := last.Sub(enq)
				lags.Add(l)
				if series != nil {
					mu.Lock()
					*series = append(*series, lagPoint{at: enq.Sub(t0), lag: l})
					mu.Unlock()
				}
			} else {
				lags.Add(30 * time.Second) // not there after 30 s: counted at the cap
			}
		}()
	})
	pollers.Wait()
	if n := errs.Load(); n > 0 {
		return events, lags, fmt.Errorf("%d of %d events failed to publish", n, events)
	}
	return events, lags, nil
}

// makePins makes one pin per author, 64 at a time, publishing nothing, and returns their IDs
// (0 for a pin that failed).
func makePins(ctx context.Context, pp Prepinner, w *World, authors []int) ([]uint64, error) {
	pins := make([]uint64, len(authors))
	var errs atomic.Int64
	paced(ctx, math.Inf(1), 0, len(authors), 64, func(i int) {
		pin, err := pp.MakePin(ctx, w.IDs[authors[i]])
		if err != nil {
			errs.Add(1)
			return
		}
		pins[i] = pin
	})
	if e := errs.Load(); e > 0 {
		return pins, fmt.Errorf("%d of %d pins failed to make", e, len(authors))
	}
	return pins, ctx.Err()
}

// burst publishes one event per author as fast as 64 publishers can, with no follower watched
// (the lag pollers would take CPU from the worker the peers do not pay), and returns how many
// were published. With pins (made by makePins, one per author) it publishes their events
// (sys is then a Prepinner); without, each event's pin is made as it is published (Pin).
func burst(ctx context.Context, sys System, w *World, authors []int, pins []uint64) (int, error) {
	var errs atomic.Int64
	pp, _ := sys.(Prepinner)
	n := paced(ctx, math.Inf(1), 0, len(authors), 64, func(i int) {
		var err error
		switch {
		case pins == nil || pp == nil:
			_, err = sys.Pin(ctx, w.IDs[authors[i]], nil)
		case pins[i] == 0:
			err = errors.New("its pin was not made")
		default:
			err = pp.PublishPin(ctx, w.IDs[authors[i]], pins[i])
		}
		if err != nil {
			errs.Add(1)
		}
	})
	if e := errs.Load(); e > 0 {
		return n, fmt.Errorf("%d of %d events failed to publish", e, n)
	}
	return n, nil
}

// drain waits until no fanout task is pending (or limit passes) and returns how long it took.
func drain(ctx context.Context, sys System, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		if n, err := sys.FanoutPending(ctx); err == nil && n == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// reads offers calls at rate with conc in flight for d and returns their latencies and errors.
// The successful calls' latencies come in the order they were recorded, each beside its start.
func reads(ctx context.Context, rate float64, d time.Duration, conc int, call func(i int) error) (*Latencies, []timedCall, int, float64) {
	lat := &Latencies{}
	var inOrder []timedCall
	var mu sync.Mutex
	var errs atomic.Int64
	start := time.Now()
	n := paced(ctx, rate, d, 0, conc, func(i int) {
		t := time.Now()
		err := call(i)
		took := time.Since(t)
		if err != nil {
			errs.Add(1)
			return
		}
		lat.Add(took)
		mu.Lock()
		inOrder = append(inOrder, timedCall{at: t, took: took})
		mu.Unlock()
	})
	_ = n
	el := time.Since(start).Seconds()
	return lat, inOrder, int(errs.Load()), float64(lat.Summary().N) / el
}

// beside makes calls at rate with conc in flight for as long as peer runs, and returns the
// latencies of those that succeeded. The calls in flight when peer returns are cancelled
// (they fail, and are not counted); peer's error is returned.
func beside(ctx context.Context, rate float64, conc int, call func(ctx context.Context, i int) error, peer func(ctx context.Context) error) (Summary, error) {
	bctx, stop := context.WithCancel(ctx)
	var calls []timedCall
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until the peer is done; long enough for any peer.
		_, calls, _, _ = reads(bctx, rate, 10*time.Minute, conc, func(i int) error { return call(bctx, i) })
	}()
	err := peer(ctx)
	stop()
	<-done
	if err != nil {
		return Summary{}, err
	}
	d := make([]time.Duration, len(calls))
	for i, c := range calls {
		d[i] = c.took
	}
	return Summarize(d), nil
}

// visitOnce makes each distinct reader's first GetFeed, one after the other in the order the
// readers first appear, and returns the latencies of those that succeeded and the set of
// distinct readers. A user never seen has no prepared chunk, so these are the pages that run
// the generator; made before the serving phase, they leave it the steady state of returning
// users (each served from the chunk prepared after its last visit), and its first third is
// not every reader's first visit.
func visitOnce(ctx context.Context, sys System, w *World, readers []int, pageSize int) (Summary, map[int]bool) {
	lat := &Latencies{}
	seen := map[int]bool{}
	for _, u := range readers {
		if seen[u] {
			continue
		}
		seen[u] = true
		t := time.Now()
		if err := sys.GetFeed(ctx, w.IDs[u], pageSize); err == nil {
			lat.Add(time.Since(t))
		}
	}
	return lat.Summary(), seen
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func peakRSSMiB() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// Run runs the profile on sys (built for opts.Users[0] users) with the Redis peer.
func Run(ctx context.Context, sys System, base Baseline, opts Options, log io.Writer, progress Progress) (*Results, error) {
	res := &Results{Profile: opts.Profile, Storage: opts.Storage, Machine: opts.MachineString, Commit: opts.Commit,
		Started: time.Now(), Ratios: map[string]float64{}}
	say := func(f string, a ...any) { fmt.Fprintf(log, f+"\n", a...) }
	mon := &phaseMonitor{probe: procMachineProbe(runtime.NumCPU(), opts.Processes)}
	opts.Phase = mon.wrap(opts.Phase)
	t0 := time.Now()
	m := NewModelSpec(opts.Users[0], opts.Seed, opts.MaxFollowers)
	res.Model = map[string]int{"users": m.Users, "follows": m.Edges(), "cpus": runtime.NumCPU()}
	say("graph: %d users, %d follows (social model, seed %d)", m.Users, m.Edges(), opts.Seed)
	end := opts.phase("load")
	w, err := Build(ctx, sys, m, progress)
	end()
	if err != nil {
		return nil, err
	}
	if res.Load = w.Load; w.Load != nil {
		say("graph: loaded %d rows in %.1f s (%.0f rows/s, peak RSS %.0f MiB)", w.Load.Rows, w.Load.Seconds, w.Load.RowsPerSec, w.Load.PeakRSSMiB)
	}

	repl := newReplRecorder(sys)

	// 1. Sustained fanout, with the lag of sampled followers.
	repl.begin()
	say("fanout: %.0f events/s for %v", opts.EventRate, opts.FanoutFor)
	ins0, cpu0, start := sys.PoolInserts(), cpuTime(), time.Now()
	end = opts.phase("fanout")
	events, lags, err := fanout(ctx, sys, w, opts.EventRate, opts.FanoutFor, 1, &res.lagSeries, t0)
	if err != nil {
		res.Notes = append(res.Notes, "fanout: "+err.Error())
	}
	dr := drain(ctx, sys, time.Minute)
	end()
	repl.end("fanout")
	el := time.Since(start).Seconds()
	inserts := sys.PoolInserts() - ins0
	res.Fanout = FanoutResult{Events: events, EventRate: opts.EventRate, Inserts: inserts, InsertsPerSec: inserts / el,
		LagMs: lags.Summary(), DrainSeconds: dr.Seconds()}
	_ = cpu0

	// Capacity: BurstEvents events published at once, and the peers on the same events, each
	// as fast as it can: the Redis sorted sets, and the store's raw batched writes.
	nburst := opts.BurstEvents
	if nburst <= 0 {
		nburst = max(events, 1)
	}
	authors := m.Authors(nburst, 2)
	// The peers write the burst's receivers' rows as the worker does (equalWork), before the
	// burst: the raw peer's pre-fill leaves the pools' store past its memtable for both.
	recv, authorIDs := make([][]uint64, len(authors)), make([]uint64, len(authors))
	for i, a := range authors {
		authorIDs[i] = w.IDs[a]
		fol := m.FollowersOf(a)
		recv[i] = make([]uint64, len(fol))
		for j, f := range fol {
			recv[i][j] = w.IDs[f]
		}
	}
	peers := opts.RedisPeers
	if len(peers) == 0 {
		peers = []RedisPeer{{Base: base, Durability: "unknown", TrimEvery: 1}}
	}
	end = opts.phase("peers")
	eq, err := equalWork(ctx, sys, peers, recv, authorIDs, opts, say)
	end()
	res.EqualWork = eq
	if err != nil {
		return nil, fmt.Errorf("fanout peers: %w", err)
	}
	if len(eq.Redis) > 0 {
		res.Fanout.RedisInsertsPerSec = eq.Redis[0].InsertsPerSec
	}
	if eq.Raw != nil {
		res.Fanout.RawRowsPerSec, res.Fanout.RawRows = eq.Raw.RowsPerSec, eq.Rows
	}
	raw := res.Fanout.RawRowsPerSec

	// The burst's pins are made first, untimed, when the System can (Prepinner): the peers
	// above wrote the same receivers' rows without making pins.
	var pins []uint64
	if pp, ok := sys.(Prepinner); ok {
		mt := time.Now()
		pins, err = makePins(ctx, pp, w, authors)
		if err != nil {
			res.Notes = append(res.Notes, "burst: "+err.Error())
		}
		res.Fanout.BurstPinsMadeSeconds = time.Since(mt).Seconds()
		say("fanout: %d pins made for the burst in %.1f s (not timed in it)", len(authors), res.Fanout.BurstPinsMadeSeconds)
	}
	fl0, flCounts := flushes(sys)
	bins0, bt0 := sys.PoolInserts(), time.Now()
	end = opts.phase("burst")
	bev, berr := burst(ctx, sys, w, authors, pins)
	res.Fanout.BurstPublishSeconds = time.Since(bt0).Seconds()
	if berr != nil {
		res.Notes = append(res.Notes, "burst: "+berr.Error())
	}
	drain(ctx, sys, 2*time.Minute)
	end()
	res.Fanout.BurstEvents = bev
	res.Fanout.BurstInsertsPerSec = (sys.PoolInserts() - bins0) / time.Since(bt0).Seconds()
	res.Fanout.BurstSeconds = time.Since(bt0).Seconds()
	if fl1, ok := flushes(sys); ok && flCounts {
		eq.SmartFeedFlushes = fl1 - fl0
	}
	eq.setRatios(res)
	say("fanout: %d events at once: %.0f pool inserts/s until drained (%.1f s; publishing took %.1f s)", bev,
		res.Fanout.BurstInsertsPerSec, res.Fanout.BurstSeconds, res.Fanout.BurstPublishSeconds)
	say("fanout: %.0f pool inserts/s (lag p50 %.0f ms, p99 %.0f ms); Redis %.0f inserts/s; raw store %.0f rows/s",
		res.Fanout.InsertsPerSec, res.Fanout.LagMs.P50, res.Fanout.LagMs.P99, res.Fanout.RedisInsertsPerSec, raw)

	// 2. The highest event rate whose lag p99 stays under the bound: while the load generator
	// offers GetFeed at LagReadRate when it can (lagUnderReads), alone otherwise.
	repl.begin()
	end = opts.phase("steps")
	if opts.ReadLoad != nil {
		lr, err := lagUnderReads(ctx, sys, w, w.IDs, opts, say)
		res.LagUnderReads = lr
		res.Processes = append(res.Processes, ProcessRSS{Name: "smartfeed loadgen (GetFeed beside the event-rate steps)", PeakMiB: lr.GeneratorPeakRSSMiB,
			Source: "getrusage of the ended process"})
		if err != nil {
			res.Notes = append(res.Notes, "lag under reads: "+err.Error())
			say("lag under reads: %v", err)
		}
		say("lag under reads: %s", lr.LagUnderReadsSummary())
	} else {
		for i, rate := range opts.StepRates {
			n, l, _ := fanout(ctx, sys, w, rate, opts.StepFor, uint64(10+i), nil, t0)
			drain(ctx, sys, time.Minute)
			s := l.Summary()
			st := StepResult{Rate: rate, Events: n, LagP99Ms: s.P99, Sustainable: s.N > 0 && s.P99 < ms(opts.LagBound)}
			res.Steps = append(res.Steps, st)
			say("step: %.0f events/s → lag p99 %.0f ms (%v)", rate, s.P99, st.Sustainable)
			if !st.Sustainable {
				break
			}
		}
	}
	end()
	repl.end("rate steps")

	// 3. Reads while fanout runs: GetFeed against Redis ZREVRANGE (and an empty gRPC call),
	// same offered load, in turns.
	readers := m.Readers(int(opts.ReadRate*opts.ReadFor.Seconds())+1, 3)
	if servesInProcess(opts) {
		if err := serving(ctx, sys, base, w, readers, opts, res, repl, t0, say); err != nil {
			return nil, err
		}
	}

	// 3b. Read throughput: the highest offered GetFeed rate held with p99 under the bound,
	// fanout running, then the same steps on the Redis peer's ZREVRANGE.
	if opts.LoadGen != nil {
		end := opts.phase("read-rates")
		rep, err := runLoadGen(ctx, sys, w, opts, t0, say)
		end()
		if err != nil {
			res.Notes = append(res.Notes, "load generator: "+err.Error())
			say("read rates: load generator: %v", err)
		} else {
			res.setLoadGen(rep)
			say("read rates (load generator, p99 from schedule under %.0f ms): %s", rep.Summary.BoundMs, res.RateStepsSummary())
			if f := rep.Summary.Fresh; len(f) > 0 {
				say("read rates: GetFeed pages by fresh status: %s", freshLine(toUint(f)))
			}
		}
	} else if len(opts.ReadStepRates) > 0 {
		end := opts.phase("read-rates")
		rs := readRates(ctx, sys, base, w, readers, opts, t0, say)
		res.GetFeedRateSteps, res.GetFeedMaxRate, res.RedisRateSteps, res.RedisMaxRate = rs.getfeed, rs.getfeedBest, rs.redis, rs.redisBest
		res.FloorRateSteps, res.FloorMaxRate = rs.floor, rs.floorBest
		res.RateStepBoundMs, res.RateStepConc = ms(opts.ReadP99Bound), opts.ReadStepConcurrency
		end()
	}

	// 4. Tail under trouble: a slice of the primary's reads slowed, hedging off then on.
	if err := sys.SlowPrimary(ctx, opts.SlowFraction, opts.SlowBy); err != nil {
		res.Notes = append(res.Notes, "hedging: "+err.Error())
	} else {
		repl.begin()
		end := opts.phase("hedging")
		for _, on := range []bool{false, true} {
			if err := sys.Hedging(ctx, on); err != nil {
				return nil, err
			}
			h0, c0 := sys.Hedges()
			hl, _, _, _ := reads(ctx, opts.ReadRate, opts.HedgeFor, opts.Concurrency, func(i int) error {
				return sys.GetFeed(ctx, w.IDs[readers[i%len(readers)]], opts.PageSize)
			})
			h1, c1 := sys.Hedges()
			cut, _ := sys.Cutoff(ctx)
			hr := HedgeResult{Hedging: on, GetFeed: hl.Summary(), ExtraLoad: ratio(h1-h0, c1-c0), CutoffMs: ms(cut),
				StandbyP999: ms(sys.StandbyP999())}
			res.Hedging = append(res.Hedging, hr)
			say("hedging %v: GetFeed p99.9 %.1f ms, extra load %.2f%%, cutoff %.1f ms", on, hr.GetFeed.P999, 100*hr.ExtraLoad, hr.CutoffMs)
		}
		_ = sys.SlowPrimary(ctx, 0, 0)
		end()
		repl.end("hedging")
	}
	res.Replication = repl.result()
	if r := res.Replication; r != nil {
		say("replication (%s): lag p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d measurements under write load",
			r.Mechanism, r.UnderLoad.P50, r.UnderLoad.P99, r.UnderLoad.Max, r.UnderLoad.N)
	}

	// 5. Scale: cost per event as users grow.
	sizes := opts.Users
	end = opts.phase("scale")
	for i, n := range sizes {
		s, closeS := sys, func() {}
		sw := w
		if i > 0 {
			if opts.Scale == nil {
				break
			}
			var err error
			if s, closeS, err = opts.Scale(ctx, n); err != nil {
				return nil, fmt.Errorf("scale %d users: %w", n, err)
			}
			say("scale: building %d users", n)
			if sw, err = Build(ctx, s, NewModelSpec(n, opts.Seed, opts.MaxFollowers), progress); err != nil {
				closeS()
				return nil, err
			}
		}
		ins0, c0, st := s.PoolInserts(), cpuTime(), time.Now()
		ev, _, _ := fanout(ctx, s, sw, 20, time.Duration(float64(opts.ScaleEvents)/20*float64(time.Second)), 7, nil, t0)
		drain(ctx, s, time.Minute)
		ins := s.PoolInserts() - ins0
		cpu := cpuTime() - c0
		wall := time.Since(st)
		rd := sw.M.Readers(400, 9)
		rc0 := cpuTime()
		l, _, _, _ := reads(ctx, 100, 4*time.Second, 16, func(j int) error {
			return s.GetFeed(ctx, sw.IDs[rd[j%len(rd)]], opts.PageSize)
		})
		rcpu := cpuTime() - rc0
		ls := l.Summary()
		sr := ScaleResult{Users: n, Follows: sw.M.Edges(), Events: ev, Inserts: ins, CPUSecPerEvent: ratio(ms(cpu), float64(ev)),
			WallPerInsert: ratio(float64(wall.Microseconds()), ins), GetFeedP99Ms: ls.P99, Reads: ls.N, CPUMsPerRead: ratio(ms(rcpu), float64(ls.N))}
		res.Scale = append(res.Scale, sr)
		say("scale: %d users: %.2f ms CPU per event, %.1f µs wall per insert; %.2f ms CPU per GetFeed page, p99 %.1f ms",
			n, sr.CPUSecPerEvent, sr.WallPerInsert, sr.CPUMsPerRead, ls.P99)
		closeS()
	}
	end()
	res.RSSMiB = peakRSSMiB()
	res.PhaseLoad = mon.results()
	res.Processes = append(processRSS(opts.Processes), res.Processes...)
	res.Seconds = time.Since(res.Started).Seconds()

	if opts.LoadGen == nil {
		// Without the load generator the serving phase's in-process calls are the only
		// GetFeed-against-Redis figure; with it, they are a microbenchmark (client and server
		// share a process) and stay in the report, out of the ratios.
		res.Ratios["getfeed_p99_vs_redis"] = ratio(res.Reads.GetFeed.P99, res.Reads.Redis.P99)
	}
	res.Ratios["getfeed_max_rate_vs_redis"] = ratio(res.GetFeedMaxRate, res.RedisMaxRate)
	if len(res.FloorRateSteps) > 0 {
		res.Ratios["getfeed_max_rate_vs_grpc_floor"] = ratio(res.GetFeedMaxRate, res.FloorMaxRate)
	}
	res.setHedgeRatios()
	res.Ratios["fanout_lag_p99_s_at_read_load"] = 0
	if lr := res.LagUnderReads; lr != nil {
		res.Ratios["fanout_lag_p99_s_at_read_load"] = lr.LagP99AtEventRate
	}
	res.setScaleRatios()
	return res, nil
}

// setScaleRatios sets scale_cost_growth_<size>: CPU per event at the largest graph over the
// smallest, named by the largest ("100k", "1m"), so that a quick run's 100,000-user figure is
// never read as the full profile's 1,000,000-user one.
func (res *Results) setScaleRatios() {
	if len(res.Scale) < 2 {
		return
	}
	lo, hi := res.Scale[0], res.Scale[0]
	for _, s := range res.Scale {
		if s.Users < lo.Users {
			lo = s
		}
		if s.Users > hi.Users {
			hi = s
		}
	}
	if hi.Users == lo.Users {
		return
	}
	res.Ratios["scale_cost_growth_"+sizeLabel(hi.Users)] = ratio(hi.CPUSecPerEvent, lo.CPUSecPerEvent)
	res.Ratios["scale_read_cost_growth_"+sizeLabel(hi.Users)] = ratio(hi.CPUMsPerRead, lo.CPUMsPerRead)
}

// sizeLabel names a user count the way the ratio keys do: 1000000 → "1m", 100000 → "100k".
func sizeLabel(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
