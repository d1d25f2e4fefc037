package feedsvc

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// The applier: it reads the change log in pages and copies the keys it names to the standby.

func (r *Replicator) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run applies the change log to the standby until ctx is done: first whatever an earlier
// process left, then each write as it lands. Failed reads or applies are retried with backoff.
// It returns ctx's error.
func (r *Replicator) Run(ctx context.Context) error {
	backoff := time.Millisecond
	for {
		n, more, err := r.pass(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := 250 * time.Millisecond // a safety poll: the log is the truth, wake-ups an optimisation
		switch {
		case err != nil:
			r.m.retries.Inc()
			r.log.Warn("replicate to standby", zap.Error(err))
			wait, backoff = backoff, min(2*backoff, time.Second)
		case more:
			backoff, wait = time.Millisecond, 0
		default:
			backoff = time.Millisecond
			if n > 0 {
				wait = 5 * time.Millisecond // pending entries only: let their writers finish
			}
		}
		if wait == 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// pass applies one page of the log. It returns the entries left in place (pending ones),
// whether a full page was acknowledged (so more may follow at once), and the first error.
func (r *Replicator) pass(ctx context.Context) (left int, more bool, err error) {
	defer func() {
		r.mu.Lock()
		r.passes++
		r.cond.Broadcast()
		r.mu.Unlock()
	}()
	low := r.lowWater()
	start := logKey(r.floor.Load())
	if now := time.Now(); now.Sub(r.lastFull) >= fullScanEvery {
		start, r.lastFull = logPrefix, now
	}
	rows, err := r.primary.Scan(ctx, zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(logPrefix), Limit: r.maxBatch})
	if err != nil {
		return 0, false, fmt.Errorf("read change log: %w", err)
	}
	if len(rows) == 0 {
		r.oldest.Store(0)
		r.floor.Store(max(r.floor.Load(), low))
		return 0, false, nil
	}
	// The next floor: below the first entry left in place, the next page, and what may still
	// be written.
	floor := low
	if len(rows) == r.maxBatch {
		if k := rows[len(rows)-1].Key; len(k) == len(logPrefix)+8 {
			floor = min(floor, binary.BigEndian.Uint64(k[len(logPrefix):])+1)
		} else {
			floor = r.floor.Load()
		}
	}
	r.oldest.Store(int64(binary.BigEndian.Uint64(rows[0].Key[len(logPrefix):])))
	pg := r.sortEntries(rows, floor)
	if err := r.copyKeys(ctx, pg.keys); err != nil {
		return pg.left, false, err
	}
	if len(pg.acks) > 0 {
		if err := r.primary.Apply(ctx, pg.acks); err != nil {
			return pg.left, false, fmt.Errorf("acknowledge %d change-log entries: %w", len(pg.acks), err)
		}
	}
	r.floor.Store(pg.floor)
	done := time.Now()
	lags := make([]time.Duration, len(pg.ackTimes))
	for i, at := range pg.ackTimes {
		lags[i] = done.Sub(time.Unix(0, at))
		r.m.lag.Observe(lags[i].Seconds())
	}
	r.lags.add(lags...)
	r.m.applied.Add(float64(len(pg.ackTimes)))
	if pg.left == 0 && len(rows) < r.maxBatch {
		r.oldest.Store(0)
	}
	return pg.left, len(rows) == r.maxBatch && len(pg.acks) > 0, nil
}

// logPage is what one page of the change log asks of a pass.
type logPage struct {
	keys     [][]byte       // the keys the entries name, each once: to copy
	acks     []zen.Mutation // deletes of the entries to acknowledge once their keys are copied
	ackTimes []int64        // the write times of those entries
	left     int            // pending entries left in place
	floor    uint64         // the next pass's floor, lowered below each entry left in place
}

// sortEntries sorts a page of log rows into the keys to copy, the entries to acknowledge (committed
// ones, pending ones past PendingTimeout, and corrupt ones, dropped) and those left in place.
func (r *Replicator) sortEntries(rows []zen.KV, floor uint64) logPage {
	pg := logPage{floor: floor}
	seen := map[string]bool{}
	now := time.Now()
	for _, kv := range rows {
		if len(kv.Key) != len(logPrefix)+8 {
			r.log.Error("corrupt change-log key; dropped", zap.Int("len", len(kv.Key)))
			pg.acks = append(pg.acks, zen.Mutation{Key: kv.Key, Delete: true})
			continue
		}
		at := int64(binary.BigEndian.Uint64(kv.Key[len(logPrefix):]))
		state, ks, err := decodeEntry(kv.Value)
		if err != nil {
			r.log.Error("corrupt change-log entry; dropped (run smartfeed resync)", zap.Int64("seq", at))
			pg.acks = append(pg.acks, zen.Mutation{Key: kv.Key, Delete: true})
			continue
		}
		for _, k := range ks {
			if !seen[string(k)] {
				seen[string(k)] = true
				pg.keys = append(pg.keys, k)
			}
		}
		if state == entryPending && now.Sub(time.Unix(0, at)) < r.pendingTimeout {
			pg.left++
			pg.floor = min(pg.floor, uint64(at))
			continue
		}
		pg.acks = append(pg.acks, zen.Mutation{Key: kv.Key, Delete: true})
		pg.ackTimes = append(pg.ackTimes, at)
	}
	return pg
}

// copyKeys copies the primary's current value of each key to the standby (a delete where the
// primary has none).
func (r *Replicator) copyKeys(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	vals, err := zen.GetMany(ctx, r.primary, keys)
	if err != nil {
		return fmt.Errorf("read primary: %w", err)
	}
	muts := make([]zen.Mutation, len(keys))
	for i, k := range keys {
		muts[i] = zen.Mutation{Key: k, Value: vals[i], Delete: vals[i] == nil}
	}
	if err := r.standby.Apply(ctx, muts); err != nil {
		return fmt.Errorf("apply %d rows to the standby: %w", len(muts), err)
	}
	return nil
}

// Flush waits until every write that completed before the call is on the standby, or ctx is
// done. Sequences are write times, so this covers other processes' entries (ResyncAll) too.
func (r *Replicator) Flush(ctx context.Context) error {
	target := max(r.lastSeq.Load(), uint64(time.Now().UnixNano()))
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	for {
		rows, err := r.primary.Scan(ctx, zen.ScanOptions{Start: logKey(r.floor.Load()), Stop: logKey(target + 1), Limit: 1})
		if err != nil {
			return fmt.Errorf("flush: read change log: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		r.poke()
		r.mu.Lock()
		for p := r.passes; r.passes < p+2 && ctx.Err() == nil; {
			r.cond.Wait()
		}
		r.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
