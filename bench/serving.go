package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// servesInProcess reports whether the run has the in-process serving phase: without the load
// generator it is the only read measurement, and the HBase peers beside it (Beside,
// UnderFanout) need it; with the load generator and no such peer it would measure the read
// path again from a client sharing the server's process, a friendlier world, and is skipped.
func servesInProcess(opts Options) bool {
	return opts.LoadGen == nil || opts.Beside != nil || opts.UnderFanout != nil
}

// serving is the in-process serving phase: GetFeed, Redis ZREVRANGE and an empty gRPC call
// at opts.ReadRate each, in turns, the fanout running, after every reader's first visit; then
// the peers beside GetFeed and under the fanout.
func serving(ctx context.Context, sys System, base Baseline, w *World, readers []int, opts Options, res *Results, repl *replRecorder, t0 time.Time, say func(string, ...any)) error {
	// Every reader visits once before the phase, as the returning users they stand for did;
	// those visits are reported on their own (firstVisits).
	firstVisits, distinct := visitOnce(ctx, sys, w, readers, opts.PageSize)
	if firstVisits.N > 0 {
		say("reads: %d readers' first visits, one after the other, before the phase: p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			firstVisits.N, firstVisits.P50, firstVisits.P99, firstVisits.Max)
	}
	kinds, pinger := servingKinds(ctx, sys, base, w, readers, opts)
	bg, stopBG := context.WithCancel(ctx)
	var bgw sync.WaitGroup
	bgw.Add(1)
	go func() {
		defer bgw.Done()
		// The fanout runs until the last of the calls below is made, and through the peers
		// measured under it (Options.UnderFanout; stopBG ends it).
		_, _, _ = fanout(bg, sys, w, opts.EventRate, time.Duration(len(kinds)+1)*opts.ReadFor+10*time.Minute, 4, nil, t0)
	}()
	turns := opts.servingTurns()
	say("reads: GetFeed, Redis ZREVRANGE%s at %.0f/s each, %d concurrent, for %v each, %s, fanout running; %d distinct readers (each back every %.2f s on average)",
		map[bool]string{true: " and an empty gRPC call", false: ""}[pinger != nil], opts.ReadRate, opts.Concurrency, opts.ReadFor, turns,
		len(distinct), float64(len(distinct))/opts.ReadRate)
	repl.begin()
	genCalls0, genTime0 := sys.GeneratorTime()
	st0, fresh0, prep0 := stages(sys), freshCounts(sys), preparedCounts(sys)
	end := opts.phase("serving")
	servingStart := time.Now()
	tr := rotate(ctx, opts.ReadRate, opts.ReadFor, opts.ReadSlice, opts.Concurrency, kinds...)
	servingEnd := time.Now()
	end()
	// The Redis and empty calls touch none of the service's histograms: the stages are the
	// GetFeeds' (and the background work they left).
	genCalls1, genTime1 := sys.GeneratorTime()
	stagesServing, freshServing := stageDiff(st0, stages(sys)), freshDiff(fresh0, freshCounts(sys))
	prepServing := freshDiff(prep0, preparedCounts(sys))
	repl.end("serving")
	besidePeer := servingPeers(ctx, sys, w, readers, opts, res, say)
	stopBG()
	bgw.Wait()
	if opts.Beside != nil || opts.UnderFanout != nil {
		// The peers ran the fanout on past the phase: what it queued is not the next phase's.
		drain(ctx, sys, time.Minute)
	}
	g, r := tr[0], tr[1]
	var floor *Summary
	if pinger != nil {
		if f := tr[2]; f.errs == 0 {
			fs := f.summary()
			floor = &fs
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("grpc floor: %d of the empty calls failed", f.errs))
		}
	}
	order := g.inOrder
	res.Reads = ReadResult{Offered: opts.ReadRate, Concurrency: opts.Concurrency, GetFeed: g.summary(), GetFeedRate: g.rate(),
		Errors: g.errs, Redis: r.summary(), RedisRate: r.rate(), Stages: stagesServing, Fresh: freshServing, Prepared: prepServing,
		Sched: g.sched.result(), RedisSched: r.sched.result(), Floor: floor, Readers: len(distinct),
		Turns: turns, FirstVisits: firstVisits, BesidePeer: besidePeer}
	if n := genCalls1 - genCalls0; n > 0 {
		res.Reads.GeneratorCalls = n
		res.Reads.GeneratorMeanMs = float64((genTime1 - genTime0).Microseconds()) / 1000 / n
	}
	if third := len(order) / 3; third > 0 {
		res.Reads.FirstP99Ms = Summarize(order[:third]).P99
		res.Reads.LastP99Ms = Summarize(order[len(order)-third:]).P99
	}
	if byMin := g.p99ByWindow(servingStart, servingEnd, time.Minute); len(byMin) >= 2 {
		res.Reads.P99ByMinuteMs = byMin
		res.Reads.FirstMinuteP99Ms, res.Reads.LastMinuteP99Ms = byMin[0], byMin[len(byMin)-1]
		// The peers' minutes beside GetFeed's: a minute slow for all of them is the machine's.
		res.Reads.RedisP99ByMinuteMs = r.p99ByWindow(servingStart, servingEnd, time.Minute)
		if pinger != nil {
			res.Reads.FloorP99ByMinuteMs = tr[2].p99ByWindow(servingStart, servingEnd, time.Minute)
		}
	}
	res.getfeed, res.redis = g.sorted(), r.sorted()
	sayServing(res, g.errs, say)
	return nil
}

// servingPeers runs the peers under the serving phase's write load, right after it, the same
// fanout running: first the one beside GetFeed (both measured; its GetFeed summary returned),
// then the others.
func servingPeers(ctx context.Context, sys System, w *World, readers []int, opts Options, res *Results, say func(string, ...any)) *Summary {
	ids := make([]uint64, len(readers))
	for i, r := range readers {
		ids[i] = w.IDs[r]
	}
	var besidePeer *Summary
	if opts.Beside != nil {
		say("beside: a peer making GetFeed's reads while GetFeed goes on at %.0f/s, %d concurrent, the fanout at %.0f events/s",
			opts.ReadRate, opts.Concurrency, opts.EventRate)
		s, err := beside(ctx, opts.ReadRate, opts.Concurrency, func(ctx context.Context, i int) error {
			return sys.GetFeed(ctx, ids[i%len(ids)], opts.PageSize)
		}, func(ctx context.Context) error { return opts.Beside(ctx, ids) })
		if err != nil {
			res.Notes = append(res.Notes, "beside: "+err.Error())
			say("beside: %v", err)
		} else {
			besidePeer = &s
			say("beside: GetFeed p50 %.2f p99 %.2f ms over %d calls beside the peer", s.P50, s.P99, s.N)
		}
	}
	if opts.UnderFanout != nil {
		say("under fanout: peers' reads right after the serving phase, its fanout at %.0f events/s still running", opts.EventRate)
		if err := opts.UnderFanout(ctx, ids); err != nil {
			res.Notes = append(res.Notes, "under fanout: "+err.Error())
			say("under fanout: %v", err)
		}
	}
	return besidePeer
}

// sayServing logs the serving phase's figures.
func sayServing(res *Results, errs int, say func(string, ...any)) {
	say("reads: GetFeed p50 %.2f p99 %.2f p99.9 %.2f ms (%.0f/s, %d errors); Redis p50 %.2f p99 %.2f ms; generator %.2f ms mean over %.0f calls",
		res.Reads.GetFeed.P50, res.Reads.GetFeed.P99, res.Reads.GetFeed.P999, res.Reads.GetFeedRate, errs, res.Reads.Redis.P50, res.Reads.Redis.P99,
		res.Reads.GeneratorMeanMs, res.Reads.GeneratorCalls)
	if len(res.Reads.P99ByMinuteMs) > 0 {
		say("reads: p99 by minute of the phase: GetFeed %s ms (last over first %.3f); Redis %s ms; empty gRPC call %s ms",
			minuteList(res.Reads.P99ByMinuteMs), ratio(res.Reads.LastMinuteP99Ms, res.Reads.FirstMinuteP99Ms),
			minuteList(res.Reads.RedisP99ByMinuteMs), minuteList(res.Reads.FloorP99ByMinuteMs))
	}
	if len(res.Reads.Fresh) > 0 {
		say("reads: GetFeed by fresh status: %s", freshLine(res.Reads.Fresh))
	}
	if len(res.Reads.Prepared) > 0 {
		say("reads: prepared chunks by outcome: %s", freshLine(res.Reads.Prepared))
	}
	if f := res.Reads.Floor; f != nil {
		say("reads: an empty gRPC call (health check) on GetFeed's connection p50 %.2f p99 %.2f ms, same load", f.P50, f.P99)
	}
	if g, r := res.Reads.Sched, res.Reads.RedisSched; g != nil && r != nil {
		say("reads: goroutines waited for a CPU p50 %.3f p99 %.2f ms during GetFeed, p50 %.3f p99 %.2f ms during Redis", g.P50Ms, g.P99Ms, r.P50Ms, r.P99Ms)
	}
}

// servingKinds are the serving phase's kinds of call on readers: GetFeed, Redis ZREVRANGE and,
// when sys is a Pinger (returned), an empty gRPC call.
func servingKinds(ctx context.Context, sys System, base Baseline, w *World, readers []int, opts Options) ([]func(i int) error, Pinger) {
	kinds := []func(i int) error{
		func(i int) error { return sys.GetFeed(ctx, w.IDs[readers[i%len(readers)]], opts.PageSize) },
		func(i int) error {
			_, err := base.Read(ctx, w.IDs[readers[i%len(readers)]], opts.PageSize)
			return err
		},
	}
	pinger, _ := sys.(Pinger)
	if pinger != nil {
		kinds = append(kinds, func(int) error { return pinger.Ping(ctx) })
	}
	return kinds, pinger
}

// servingTurns says how the serving phase's kinds of call share it.
func (o Options) servingTurns() string {
	if o.ReadSlice > 0 && o.ReadSlice < o.ReadFor {
		return fmt.Sprintf("in turns of %v", o.ReadSlice)
	}
	return "one after the other"
}
