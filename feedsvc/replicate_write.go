package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// The write side: every write to the primary goes with a change-log entry naming its keys.

func mutationKeys(muts []zen.Mutation) [][]byte {
	keys := make([][]byte, 0, len(muts))
	seen := make(map[string]bool, len(muts))
	for _, m := range muts {
		if !seen[string(m.Key)] {
			seen[string(m.Key)] = true
			keys = append(keys, m.Key)
		}
	}
	return keys
}

func checkNotLog(keys ...[]byte) error {
	for _, k := range keys {
		if isLogKey(k) {
			return fmt.Errorf("replicator: key %x is in the reserved change-log range", k[:min(len(k), 8)])
		}
	}
	return nil
}

// Apply writes the batch and its change-log entry to the primary in one atomic batch.
func (r *Replicator) Apply(ctx context.Context, muts []zen.Mutation) error {
	if len(muts) == 0 {
		return nil
	}
	keys := mutationKeys(muts)
	if err := checkNotLog(keys...); err != nil {
		return err
	}
	all := make([]zen.Mutation, 0, len(muts)+1)
	seq := r.begin()
	all = append(append(all, muts...), zen.Mutation{Key: logKey(seq), Value: encodeEntry(entryCommitted, keys)})
	err := r.primary.Apply(ctx, all)
	r.end(seq)
	if err != nil {
		return err
	}
	r.poke()
	return nil
}

// single runs a single-row operation between a pending change-log entry and its commit.
func (r *Replicator) single(ctx context.Context, key []byte, op func() error) error {
	return r.logged(ctx, [][]byte{key}, op)
}

// logged runs an operation on the rows of keys between a pending change-log entry naming them
// and its commit.
func (r *Replicator) logged(ctx context.Context, keys [][]byte, op func() error) error {
	if err := checkNotLog(keys...); err != nil {
		return err
	}
	seq := r.begin()
	lk := logKey(seq)
	err := r.primary.Apply(ctx, []zen.Mutation{{Key: lk, Value: encodeEntry(entryPending, keys)}})
	r.end(seq)
	if err != nil {
		return err
	}
	opErr := op()
	// Committed whatever the outcome: the applier copies what the primary holds. If this write
	// fails, the entry stays pending until PendingTimeout, then is applied all the same.
	if err := r.primary.Apply(ctx, []zen.Mutation{{Key: lk, Value: encodeEntry(entryCommitted, keys)}}); err != nil && opErr == nil {
		r.log.Warn("commit change-log entry; applied after the pending timeout", zap.Error(err))
	}
	r.poke()
	return opErr
}

// carried runs a single-row operation that writes its committed change-log entry in the same
// atomic commit (a primary that is a zen.Carrier): one write instead of single's three. It
// reports false when the primary cannot, having written nothing.
func (r *Replicator) carried(ctx context.Context, key []byte, op func(c zen.Carrier, extra []zen.Mutation) error) (bool, error) {
	return r.carriedWith(ctx, key, nil, op)
}

// carriedWith is carried for an operation that also writes more: the log entry names key and
// more's keys, and goes last in the extra rows op writes.
func (r *Replicator) carriedWith(ctx context.Context, key []byte, more []zen.Mutation, op func(c zen.Carrier, extra []zen.Mutation) error) (bool, error) {
	c, ok := r.primary.(zen.Carrier)
	if !ok {
		return false, nil
	}
	keys := append([][]byte{key}, mutationKeys(more)...)
	if err := checkNotLog(keys...); err != nil {
		return true, err
	}
	seq := r.begin()
	extra := append(slices.Clip(more), zen.Mutation{Key: logKey(seq), Value: encodeEntry(entryCommitted, keys)})
	err := op(c, extra)
	r.end(seq)
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	if err == nil {
		r.poke()
	}
	return true, err
}

// CheckAndSetWith is zen.Carrier's: the compare-and-set, extra and their change-log entry in
// one commit. It fails with errors.ErrUnsupported, writing nothing, when the primary cannot.
func (r *Replicator) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	var ok bool
	done, err := r.carriedWith(ctx, key, extra, func(c zen.Carrier, all []zen.Mutation) (err error) {
		ok, err = c.CheckAndSetWith(ctx, key, expected, value, all)
		return err
	})
	if !done {
		return false, fmt.Errorf("replicator: check-and-set with extra rows: %w", errors.ErrUnsupported)
	}
	return ok, err
}

// IncrementWith is zen.Carrier's: the increment, extra and their change-log entry in one
// commit. It fails with errors.ErrUnsupported, writing nothing, when the primary cannot.
func (r *Replicator) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	var n int64
	done, err := r.carriedWith(ctx, key, extra, func(c zen.Carrier, all []zen.Mutation) (err error) {
		n, err = c.IncrementWith(ctx, key, delta, all)
		return err
	})
	if !done {
		return 0, fmt.Errorf("replicator: increment with extra rows: %w", errors.ErrUnsupported)
	}
	return n, err
}

// CheckAndSet runs on the primary with its change-log entry in the same commit where the
// primary allows, else between a pending change-log entry and its commit.
func (r *Replicator) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	var ok bool
	if done, err := r.carried(ctx, key, func(c zen.Carrier, extra []zen.Mutation) (err error) {
		ok, err = c.CheckAndSetWith(ctx, key, expected, value, extra)
		return err
	}); done {
		return ok, err
	}
	err := r.single(ctx, key, func() (err error) {
		ok, err = r.primary.CheckAndSet(ctx, key, expected, value)
		return err
	})
	return ok, err
}

// Increment runs on the primary with its change-log entry in the same commit where the primary
// allows, else between a pending change-log entry and its commit.
func (r *Replicator) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	var n int64
	if done, err := r.carried(ctx, key, func(c zen.Carrier, extra []zen.Mutation) (err error) {
		n, err = c.IncrementWith(ctx, key, delta, extra)
		return err
	}); done {
		return n, err
	}
	err := r.single(ctx, key, func() (err error) {
		n, err = r.primary.Increment(ctx, key, delta)
		return err
	})
	return n, err
}
