package zen

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Restore puts entries back into the pools after a Take whose chunk was not delivered: it
// writes their rows and lifts a "taken" tombstone (never a forgotten one: a pin the user saved
// or that was deleted meanwhile stays out). Only the taker of the pins should call it; running
// it again is harmless. It returns how many pins it put back (taken ones and absent ones).
func (p *Pools) Restore(ctx context.Context, es []PoolEntry) (int, error) {
	n, err := p.restore(ctx, es)
	if err != nil {
		return n, fmt.Errorf("restore: %w", err)
	}
	return n, nil
}

func (p *Pools) restore(ctx context.Context, es []PoolEntry) (int, error) {
	muts, batch, err := p.rows(es)
	if err != nil || len(muts) == 0 {
		return 0, err
	}
	type up struct{ user, pin ID }
	idx := map[up]int{}
	var keys [][]byte
	var pins []up
	for _, e := range batch {
		k := up{e.User, e.Pin}
		if _, ok := idx[k]; !ok {
			idx[k] = len(pins)
			pins = append(pins, k)
			keys = append(keys, goneKey(e.User, e.Pin))
		}
	}
	// Mark the taken pins "restoring" first: readers then keep the rows written below (and
	// still leave the pin out) until the mark is lifted.
	mark := tombstone(tombRestoring, p.now().UnixMilli(), rand.Uint64())
	allowed, marked, err := p.markRestoring(ctx, keys, mark)
	if err != nil {
		return 0, err
	}
	var puts []Mutation
	for _, m := range muts {
		user, pin := ID(binary.BigEndian.Uint64(m.Key[:8])), ID(binary.BigEndian.Uint64(m.Key[17:]))
		if allowed[idx[up{user, pin}]] {
			puts = append(puts, m)
		}
	}
	if len(puts) > 0 {
		if err := p.t.Apply(ctx, puts); err != nil {
			return 0, fmt.Errorf("write rows: %w", err)
		}
	}
	var lift []Cond
	n := 0
	for i := range pins {
		if allowed[i] {
			n++
		}
		if marked[i] {
			// Only our mark: a Forget meanwhile wins.
			lift = append(lift, Cond{Key: keys[i], Expected: mark})
		}
	}
	if _, err := CheckAndSetMany(ctx, p.t, lift); err != nil {
		return n, fmt.Errorf("lift tombstones: %w", err)
	}
	return n, nil
}

// markRestoring sets mark on each tombstone key of keys that holds a "taken" tombstone (never a
// forgotten one), retrying the keys changed meanwhile. allowed[i] says keys[i]'s pin may be put
// back (its tombstone is marked, or there is none); marked[i], that this call set the mark.
func (p *Pools) markRestoring(ctx context.Context, keys [][]byte, mark []byte) (allowed, marked []bool, err error) {
	allowed, marked = make([]bool, len(keys)), make([]bool, len(keys))
	pending := make([]int, len(keys))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == maxCASAttempts {
			return nil, nil, fmt.Errorf("tombstones still conflicting after %d attempts", maxCASAttempts)
		}
		ks := make([][]byte, len(pending))
		for j, i := range pending {
			ks[j] = keys[i]
		}
		curs, err := GetMany(ctx, p.t, ks)
		if err != nil {
			return nil, nil, fmt.Errorf("read tombstones: %w", err)
		}
		var conds []Cond
		var at []int
		for j, i := range pending {
			cur := curs[j]
			if !isTomb(cur) {
				allowed[i] = true // nothing there (or an index row of the older layout)
				continue
			}
			if kind, _ := tombInfo(cur); kind == tombForgotten {
				continue
			}
			conds = append(conds, Cond{Key: keys[i], Expected: cur, Value: mark})
			at = append(at, i)
		}
		ok, err := CheckAndSetMany(ctx, p.t, conds)
		if err != nil {
			return nil, nil, fmt.Errorf("mark restoring: %w", err)
		}
		pending = pending[:0]
		for j, i := range at {
			if ok[j] {
				allowed[i], marked[i] = true, true
			} else {
				pending = append(pending, i) // changed meanwhile: look again
			}
		}
	}
	return allowed, marked, nil
}
