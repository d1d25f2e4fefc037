package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
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
	r := &runner{sys: sys, base: base, opts: opts, res: res, m: m, w: w, repl: newReplRecorder(sys), t0: t0, say: say, progress: progress}
	events := r.sustained(ctx)
	if err := r.capacity(ctx, events); err != nil {
		return nil, err
	}
	r.steps(ctx)
	if err := r.readPhases(ctx); err != nil {
		return nil, err
	}
	if err := r.hedging(ctx); err != nil {
		return nil, err
	}
	if err := r.scale(ctx); err != nil {
		return nil, err
	}
	res.PhaseLoad = mon.results()
	r.finish()
	return res, nil
}

// runner runs Run's phases one after the other on one system, world and results.
type runner struct {
	sys      System
	base     Baseline
	opts     Options
	res      *Results
	m        *Model
	w        *World
	repl     *replRecorder
	t0       time.Time
	say      func(string, ...any)
	progress Progress
	readers  []int // the serving phase's readers, by model index, read again by hedging
}

// sustained is phase 1: the sustained fanout, with the lag of sampled followers; it returns the
// events published.
func (r *runner) sustained(ctx context.Context) int {
	sys, opts, res, w, say, t0 := r.sys, r.opts, r.res, r.w, r.say, r.t0
	r.repl.begin()
	say("fanout: %.0f events/s for %v", opts.EventRate, opts.FanoutFor)
	ins0, start := sys.PoolInserts(), time.Now()
	end := opts.phase("fanout")
	events, lags, err := fanout(ctx, sys, w, opts.EventRate, opts.FanoutFor, 1, &res.lagSeries, t0)
	if err != nil {
		res.Notes = append(res.Notes, "fanout: "+err.Error())
	}
	dr := drain(ctx, sys, time.Minute)
	end()
	r.repl.end("fanout")
	el := time.Since(start).Seconds()
	inserts := sys.PoolInserts() - ins0
	res.Fanout = FanoutResult{Events: events, EventRate: opts.EventRate, Inserts: inserts, InsertsPerSec: inserts / el,
		LagMs: lags.Summary(), DrainSeconds: dr.Seconds()}
	return events
}

// capacity publishes BurstEvents events at once, with the peers on the same events, each as
// fast as it can.
func (r *runner) capacity(ctx context.Context, events int) error {
	sys, base, opts, res, w, m, say := r.sys, r.base, r.opts, r.res, r.w, r.m, r.say
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
	end := opts.phase("peers")
	eq, err := equalWork(ctx, sys, peers, recv, authorIDs, opts, say)
	end()
	res.EqualWork = eq
	if err != nil {
		return fmt.Errorf("fanout peers: %w", err)
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
	return nil
}

// steps is phase 2: the highest event rate whose fanout lag p99 stays under the bound.
func (r *runner) steps(ctx context.Context) {
	sys, opts, res, w, say, t0 := r.sys, r.opts, r.res, r.w, r.say, r.t0
	// 2. The highest event rate whose lag p99 stays under the bound: while the load generator
	// offers GetFeed at LagReadRate when it can (lagUnderReads), alone otherwise.
	r.repl.begin()
	end := opts.phase("steps")
	if opts.ReadLoad != nil {
		lr, err := lagUnderReads(ctx, sys, w, w.IDs, opts, say)
		res.LagUnderReads = lr
		res.Processes = append(res.Processes, ProcessRSS{Name: "smartfeed loadgen (GetFeed beside the event-rate steps)", PeakMiB: lr.GeneratorPeakRSSMiB,
			Source: "VmHWM, read by the generator as it ended"})
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
	r.repl.end("rate steps")
}

// readPhases is phase 3: GetFeed, Redis and the empty call, in process (serving) and from the
// load generator (read rates), fanout running.
func (r *runner) readPhases(ctx context.Context) error {
	sys, base, opts, res, w, m, say, t0 := r.sys, r.base, r.opts, r.res, r.w, r.m, r.say, r.t0
	// 3. Reads while fanout runs: GetFeed against Redis ZREVRANGE (and an empty gRPC call),
	// same offered load, in turns.
	readers := m.Readers(int(opts.ReadRate*opts.ReadFor.Seconds())+1, 3)
	r.readers = readers
	if servesInProcess(opts) {
		if err := serving(ctx, sys, base, w, readers, opts, res, r.repl, t0, say); err != nil {
			return err
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
	return nil
}

// hedging is phase 4: a slice of the primary's reads slowed, hedging off then on.
func (r *runner) hedging(ctx context.Context) error {
	sys, opts, res, w, readers, say := r.sys, r.opts, r.res, r.w, r.readers, r.say
	// 4. Tail under trouble: a slice of the primary's reads slowed, hedging off then on.
	if err := sys.SlowPrimary(ctx, opts.SlowFraction, opts.SlowBy); err != nil {
		res.Notes = append(res.Notes, "hedging: "+err.Error())
	} else {
		r.repl.begin()
		end := opts.phase("hedging")
		for _, on := range []bool{false, true} {
			if err := sys.Hedging(ctx, on); err != nil {
				return err
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
		r.repl.end("hedging")
	}
	res.Replication = r.repl.result()
	if r := res.Replication; r != nil {
		say("replication (%s): lag p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d measurements under write load",
			r.Mechanism, r.UnderLoad.P50, r.UnderLoad.P99, r.UnderLoad.Max, r.UnderLoad.N)
	}
	return nil
}

// scale is phase 5: the cost per event and per page as the users grow.
func (r *runner) scale(ctx context.Context) error {
	sys, opts, res, w, say, t0, progress := r.sys, r.opts, r.res, r.w, r.say, r.t0, r.progress
	// 5. Scale: cost per event as users grow.
	sizes := opts.Users
	end := opts.phase("scale")
	for i, n := range sizes {
		s, closeS := sys, func() {}
		sw := w
		if i > 0 {
			if opts.Scale == nil {
				break
			}
			var err error
			if s, closeS, err = opts.Scale(ctx, n); err != nil {
				return fmt.Errorf("scale %d users: %w", n, err)
			}
			say("scale: building %d users", n)
			if sw, err = Build(ctx, s, NewModelSpec(n, opts.Seed, opts.MaxFollowers), progress); err != nil {
				closeS()
				return err
			}
		}
		ins0, c0, st := s.PoolInserts(), runCPU(opts.Processes), time.Now()
		ev, _, _ := fanout(ctx, s, sw, 20, time.Duration(float64(opts.ScaleEvents)/20*float64(time.Second)), 7, nil, t0)
		drain(ctx, s, time.Minute)
		ins := s.PoolInserts() - ins0
		cpu := runCPU(opts.Processes) - c0
		wall := time.Since(st)
		rd := sw.M.Readers(400, 9)
		rc0 := runCPU(opts.Processes)
		l, _, _, _ := reads(ctx, 100, 4*time.Second, 16, func(j int) error {
			return s.GetFeed(ctx, sw.IDs[rd[j%len(rd)]], opts.PageSize)
		})
		rcpu := runCPU(opts.Processes) - rc0
		ls := l.Summary()
		sr := ScaleResult{Users: n, Follows: sw.M.Edges(), Events: ev, Inserts: ins, CPUSecPerEvent: ratio(ms(cpu), float64(ev)),
			WallPerInsert: ratio(float64(wall.Microseconds()), ins), GetFeedP99Ms: ls.P99, Reads: ls.N, CPUMsPerRead: ratio(ms(rcpu), float64(ls.N))}
		res.Scale = append(res.Scale, sr)
		say("scale: %d users: %.2f ms CPU per event, %.1f µs wall per insert; %.2f ms CPU per GetFeed page, p99 %.1f ms",
			n, sr.CPUSecPerEvent, sr.WallPerInsert, sr.CPUMsPerRead, ls.P99)
		closeS()
	}
	end()
	return nil
}

// finish stamps the run's peak RSS, processes and duration, and sets the ratios.
func (r *runner) finish() {
	opts, res := r.opts, r.res
	res.RSSMiB = peakRSSMiB()
	res.Processes = append(processRSS(opts.Processes), res.Processes...)
	res.Seconds = time.Since(res.Started).Seconds()

	if opts.LoadGen == nil {
		// Without the load generator the serving phase's in-process calls are the only
		// GetFeed-against-Redis figure; with it, they are a microbenchmark (client and server
		// share a process) and stay in the report, out of the ratios.
		res.Ratios["getfeed_p99_vs_redis"] = ratio(res.Reads.GetFeed.P99, res.Reads.Redis.P99)
	}
	res.setMaxRateRatios()
	res.setHedgeRatios()
	res.Ratios["fanout_lag_p99_s_at_read_load"] = 0
	if lr := res.LagUnderReads; lr != nil {
		res.Ratios["fanout_lag_p99_s_at_read_load"] = lr.LagP99AtEventRate
	}
	res.setScaleRatios()
}

// setMaxRateRatios sets the ratios of GetFeed's highest rate held to its peers'. A peer that
// held no rate (a machine too loaded for even Redis's p99 to stay under the bound) gives no
// ratio: 0 over 0 is not "GetFeed held nothing", and Write lists the ratio as not measured.
func (res *Results) setMaxRateRatios() {
	if res.RedisMaxRate > 0 {
		res.Ratios["getfeed_max_rate_vs_redis"] = ratio(res.GetFeedMaxRate, res.RedisMaxRate)
	}
	if res.FloorMaxRate > 0 {
		res.Ratios["getfeed_max_rate_vs_grpc_floor"] = ratio(res.GetFeedMaxRate, res.FloorMaxRate)
	}
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
