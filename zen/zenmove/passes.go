package zenmove

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/smartfeed/smartfeed/zen"
)

// The copy passes of a move: each one diffs every table's rows of the plan on the source and
// the target and writes the difference to the target, retried after a failure.

// passes copies the plan's rows in passes, saving st before each, until a pass changes few rows
// (Options.Remainder), no fewer than the one before, or Options.MaxPasses were run; it adds them
// to res and returns how long the last pass took.
func (mv *Mover) passes(ctx context.Context, eps map[string][2]zen.Table, p Plan, st *state, report func(Progress), res *Result) (time.Duration, error) {
	last := int64(-1)
	var lastDur time.Duration
	for pass := 1; ; pass++ {
		st.Pass = pass
		if err := mv.saveState(ctx, st); err != nil {
			return 0, err
		}
		var passStart time.Time // of the run that succeeded: the fence is judged on it, not on the retries' waits
		put, del, err := mv.retryPass(ctx, p, pass, report, func() (int64, int64, error) {
			passStart = time.Now()
			return mv.pass(ctx, eps, p, "pass", pass, st.Total, report, nil)
		})
		if err != nil {
			return 0, err
		}
		lastDur = time.Since(passStart)
		res.Passes, res.RowsCopied, res.RowsDeleted = pass, res.RowsCopied+put, res.RowsDeleted+del
		changed := put + del
		mv.log.Info("shard move pass", zap.Stringer("plan", p), zap.Int("pass", pass), zap.Int64("copied", put), zap.Int64("deleted", del))
		if pass > 1 && (changed <= int64(mv.o.Remainder) || (last >= 0 && changed >= last)) || pass >= mv.o.MaxPasses {
			return lastDur, nil
		}
		last = changed
	}
}

// Recover lifts a fence that a move which crashed while fenced left in the map, so the shards'
// writes do not wait on a mover that is gone; the shards stay on the source and a rerun of the
// move finishes it. It reports the unfinished plan (nil when there is none) and whether it lifted
// a fence. A process that runs moves calls it once it serves.
func (mv *Mover) Recover(ctx context.Context) (*Plan, bool, error) {
	st, err := mv.loadState(ctx)
	if err != nil || st == nil {
		return nil, false, err
	}
	p := st.Plan
	cur := mv.maps.Current()
	_, fenced, onTarget, err := source(cur, p)
	if err != nil {
		return &p, false, err
	}
	if !fenced {
		return &p, false, nil
	}
	if onTarget { // switched, then the fence came back with a stale map: only lift it
		return &p, true, mv.maps.Publish(ctx, mustWith(cur, p, func(r *zen.ShardRange) { r.Fenced = false }))
	}
	if err := mv.maps.Publish(ctx, mustWith(cur, p, func(r *zen.ShardRange) { r.Fenced = false })); err != nil {
		return &p, false, fmt.Errorf("lift the fence of an unfinished move: %w", err)
	}
	st.Phase = "passes"
	if err := mv.saveState(ctx, st); err != nil {
		return &p, true, err
	}
	mv.met.moves.WithLabelValues("rolled_back").Inc()
	mv.log.Warn("shard move: lifted the fence an unfinished move left; rerun the move to finish it", zap.Stringer("plan", p))
	return &p, true, nil
}

func mustWith(m *zen.ShardMap, p Plan, fn func(r *zen.ShardRange)) *zen.ShardMap {
	out, err := m.With(p.From, p.To, fn)
	if err != nil {
		return m // the plan was checked against m; With cannot fail on it
	}
	return out
}

// retryPass runs a catch-up pass, and runs it again after a failure up to Options.PassRetries
// times, waiting Options.RetryBackoff and then twice as long before each next try: a target that
// stops answering for a while (in one CI run an HBase region server gave no answer for 30 s,
// and a write of seven rows timed out) delays the move instead of ending it. It reports the
// retry as phase "retry" and logs the error. The last error is returned once the retries are
// spent, or at once when ctx ends.
func (mv *Mover) retryPass(ctx context.Context, p Plan, pass int, report func(Progress),
	run func() (int64, int64, error)) (int64, int64, error) {
	wait := mv.o.RetryBackoff
	for try := 0; ; try++ {
		put, del, err := run()
		if err == nil || ctx.Err() != nil || try >= mv.o.PassRetries {
			return put, del, err
		}
		mv.met.retries.Inc()
		mv.log.Warn("shard move pass failed; running it again", zap.Stringer("plan", p), zap.Int("pass", pass),
			zap.Int("retry", try+1), zap.Int("of", mv.o.PassRetries), zap.Duration("after", wait), zap.Error(err))
		report(Progress{Phase: "retry", Pass: pass})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return put, del, err
		case <-t.C:
		}
		wait *= 2
	}
}

// pass diffs every table's range on the source against the target and makes the target equal:
// puts rows missing or different there, deletes rows the source no longer has. The tables run in
// parallel. With dig set (the final pass, under the fence) it also sums, per shard, the rows of
// the source and those of the target as they stand after the pass: rows it left alone as it
// read them, rows it wrote or deleted as it reads them back.
func (mv *Mover) pass(ctx context.Context, eps map[string][2]zen.Table, p Plan, phase string, n int, total int64,
	report func(Progress), dig *digests) (put, del int64, err error) {
	mv.met.passes.Inc()
	var (
		done, puts, dels atomic.Int64
		repMu            sync.Mutex
	)
	rep := func(table string) {
		repMu.Lock()
		defer repMu.Unlock()
		report(Progress{Phase: phase, Pass: n, Table: table, Done: done.Load(), Total: total, Changed: puts.Load() + dels.Load()})
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range mv.o.Tables {
		g.Go(func() error {
			return mv.diffTable(gctx, name, eps[name], p, &done, &puts, &dels, func() { rep(name) }, dig)
		})
	}
	err = g.Wait()
	return puts.Load(), dels.Load(), err
}

func (mv *Mover) diffTable(ctx context.Context, name string, ep [2]zen.Table, p Plan, done, puts, dels *atomic.Int64,
	rep func(), dig *digests) error {
	src, dst := newCursor(ep[0], p, mv.o.Batch), newCursor(ep[1], p, mv.o.Batch)
	var muts []zen.Mutation
	flush := func() error {
		if len(muts) == 0 {
			return nil
		}
		if err := ep[1].Apply(ctx, muts); err != nil {
			return fmt.Errorf("write %d rows of %s: %w", len(muts), name, err)
		}
		if dig != nil {
			if err := readBack(ctx, ep[1], name, muts, dig); err != nil {
				return err
			}
		}
		mv.count(muts, puts, dels)
		muts = muts[:0]
		rep()
		return nil
	}
	for {
		a, aok, err := src.peek(ctx)
		if err != nil {
			return fmt.Errorf("scan %s on the source: %w", name, err)
		}
		b, bok, err := dst.peek(ctx)
		if err != nil {
			return fmt.Errorf("scan %s on the target: %w", name, err)
		}
		if !aok && !bok {
			break
		}
		c := 0
		switch {
		case !aok:
			c = 1
		case !bok:
			c = -1
		default:
			c = bytes.Compare(a.Key, b.Key)
		}
		if aok && c <= 0 && dig != nil {
			dig.add(name, 0, a)
		}
		switch {
		case c < 0:
			muts = append(muts, zen.Mutation{Key: a.Key, Value: a.Value})
			src.next()
			done.Add(1)
		case c > 0:
			muts = append(muts, zen.Mutation{Key: b.Key, Delete: true})
			dst.next()
		default:
			if !bytes.Equal(a.Value, b.Value) {
				muts = append(muts, zen.Mutation{Key: a.Key, Value: a.Value})
			} else if dig != nil {
				dig.add(name, 1, b)
			}
			src.next()
			dst.next()
			done.Add(1)
		}
		if len(muts) >= mv.o.Batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	rep()
	return nil
}
