package zenpebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/smartfeed/smartfeed/zen"
)

// checkAndSet is CheckAndSetWith, untraced.
func (t *Table) checkAndSet(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	if err := t.s.enter(ctx); err != nil {
		return false, err
	}
	defer t.s.life.RUnlock()
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("check-and-set %s: %w", t.name, err)
	}
	unlock, err := t.lockWith(key, extra)
	if err != nil {
		return false, fmt.Errorf("check-and-set %s: %w", t.name, err)
	}
	cur, err := t.get(key)
	if t.s.afterRead != nil {
		t.s.afterRead()
	}
	switch {
	case errors.Is(err, zen.ErrNotFound):
		if expected != nil {
			unlock()
			return false, nil
		}
	case err != nil:
		unlock()
		return false, fmt.Errorf("check-and-set %s %x: %w", t.name, key, err)
	case expected == nil || !bytes.Equal(cur, expected):
		unlock()
		return false, nil
	}
	b := t.s.db.NewBatch()
	if value == nil {
		err = b.Delete(t.key(key), nil)
	} else {
		err = b.Set(t.key(key), value, nil)
	}
	if err == nil {
		err = t.batchExtra(b, extra)
	}
	var wait func() error
	if err == nil {
		wait, err = t.s.applyVisible(ctx, b)
	} else {
		_ = b.Close()
	}
	unlock()
	if err == nil {
		err = wait()
	}
	if err != nil {
		return false, fmt.Errorf("check-and-set %s %x: %w", t.name, key, err)
	}
	return true, nil
}

// increment is IncrementWith, untraced.
func (t *Table) increment(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	if err := t.s.enter(ctx); err != nil {
		return 0, err
	}
	defer t.s.life.RUnlock()
	if err := checkKey(key); err != nil {
		return 0, fmt.Errorf("increment %s: %w", t.name, err)
	}
	unlock, err := t.lockWith(key, extra)
	if err != nil {
		return 0, fmt.Errorf("increment %s: %w", t.name, err)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	var n int64
	cur, err := t.get(key)
	if t.s.afterRead != nil {
		t.s.afterRead()
	}
	switch {
	case errors.Is(err, zen.ErrNotFound):
	case err != nil:
		return 0, fmt.Errorf("increment %s %x: %w", t.name, key, err)
	case len(cur) != 8:
		return 0, fmt.Errorf("increment %s %x: value is %d bytes, not a counter", t.name, key, len(cur))
	default:
		n = int64(binary.BigEndian.Uint64(cur))
	}
	n += delta
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	batch := t.s.db.NewBatch()
	if err := batch.Set(t.key(key), b[:], nil); err != nil {
		_ = batch.Close()
		return 0, fmt.Errorf("increment %s %x: %w", t.name, key, err)
	}
	if err := t.batchExtra(batch, extra); err != nil {
		_ = batch.Close()
		return 0, fmt.Errorf("increment %s %x: %w", t.name, key, err)
	}
	wait, err := t.s.applyVisible(ctx, batch)
	unlock()
	locked = false
	if err == nil {
		err = wait()
	}
	if err != nil {
		return 0, fmt.Errorf("increment %s %x: %w", t.name, key, err)
	}
	return n, nil
}

// lockWith checks extra's keys and takes the stripe locks of key and of extra's keys, in stripe
// order; it returns their unlock.
func (t *Table) lockWith(key []byte, extra []zen.Mutation) (func(), error) {
	if len(extra) == 0 {
		mu := &t.s.locks[t.stripe(key)]
		mu.Lock()
		return mu.Unlock, nil
	}
	st := make([]int, 0, len(extra)+1)
	st = append(st, t.stripe(key))
	for i, m := range extra {
		if err := checkKey(m.Key); err != nil {
			return nil, fmt.Errorf("extra mutation %d: %w", i, err)
		}
		st = append(st, t.stripe(m.Key))
	}
	slices.Sort(st)
	st = slices.Compact(st)
	for _, i := range st {
		t.s.locks[i].Lock()
	}
	return func() {
		for _, i := range st {
			t.s.locks[i].Unlock()
		}
	}, nil
}

// batchExtra adds extra to b.
func (t *Table) batchExtra(b *pebble.Batch, extra []zen.Mutation) error {
	for _, m := range extra {
		var err error
		if m.Delete {
			err = b.Delete(t.key(m.Key), nil)
		} else {
			err = b.Set(t.key(m.Key), m.Value, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkAndSetMany is CheckAndSetMany, untraced.
func (t *Table) checkAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	if err := t.s.enter(ctx); err != nil {
		return nil, err
	}
	defer t.s.life.RUnlock()
	out := make([]bool, len(conds))
	if len(conds) == 0 {
		return out, nil
	}
	st := make([]int, 0, len(conds))
	for i, c := range conds {
		if err := checkKey(c.Key); err != nil {
			return nil, fmt.Errorf("check-and-set many %s: condition %d: %w", t.name, i, err)
		}
		st = append(st, t.stripe(c.Key))
	}
	slices.Sort(st)
	st = slices.Compact(st)
	wait, err := t.casManyLocked(ctx, conds, st, out)
	if err != nil {
		return nil, err
	}
	if err := wait(); err != nil {
		return nil, fmt.Errorf("check-and-set many %s: %w", t.name, err)
	}
	return out, nil
}

// casManyLocked is CheckAndSetMany's evaluation and apply, under the stripe locks st (released
// when the batch is visible, before the fsync: see applyVisible). It fills out and returns the
// wait for durability.
func (t *Table) casManyLocked(ctx context.Context, conds []zen.Cond, st []int, out []bool) (func() error, error) {
	for _, i := range st {
		t.s.locks[i].Lock()
	}
	defer func() {
		for _, i := range st {
			t.s.locks[i].Unlock()
		}
	}()
	// cur holds, per key already seen, its value as the earlier conditions left it (nil = absent).
	cur := make(map[string][]byte, len(conds))
	// A large call reads its keys first, through one iterator (see seekMany), under the locks.
	if len(conds) >= seekManyFrom {
		keys := make([][]byte, len(conds))
		for i, c := range conds {
			keys[i] = c.Key
		}
		vals := make([][]byte, len(keys))
		if err := t.seekMany(keys, vals); err != nil {
			return nil, fmt.Errorf("check-and-set many %s: %w", t.name, err)
		}
		for i, c := range conds {
			if _, ok := cur[string(c.Key)]; !ok {
				cur[string(c.Key)] = vals[i]
			}
		}
	}
	b := t.s.db.NewBatch()
	for i, c := range conds {
		v, seen := cur[string(c.Key)]
		if !seen {
			got, err := t.get(c.Key)
			switch {
			case errors.Is(err, zen.ErrNotFound):
			case err != nil:
				_ = b.Close()
				return nil, fmt.Errorf("check-and-set many %s %x: %w", t.name, c.Key, err)
			default:
				v = got
			}
		}
		if !condHolds(v, c.Expected) {
			cur[string(c.Key)] = v
			continue
		}
		var err error
		if c.Value == nil {
			err = b.Delete(t.key(c.Key), nil)
		} else {
			err = b.Set(t.key(c.Key), c.Value, nil)
		}
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("check-and-set many %s %x: %w", t.name, c.Key, err)
		}
		cur[string(c.Key)] = bytes.Clone(c.Value) // nil stays nil (absent), empty stays non-nil
		out[i] = true
	}
	if t.s.afterRead != nil {
		t.s.afterRead()
	}
	if b.Empty() {
		_ = b.Close()
		return func() error { return nil }, nil
	}
	wait, err := t.s.applyVisible(ctx, b)
	if err != nil {
		clear(out)
		return nil, fmt.Errorf("check-and-set many %s: %w", t.name, err)
	}
	return wait, nil
}

// condHolds reports whether a row whose value is cur (nil = absent) satisfies expected (nil =
// absent).
func condHolds(cur, expected []byte) bool {
	if expected == nil || cur == nil {
		return expected == nil && cur == nil
	}
	return bytes.Equal(cur, expected)
}
