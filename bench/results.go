package bench

import (
	"time"
)

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
