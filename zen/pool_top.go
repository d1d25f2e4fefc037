package zen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Top returns up to n of the best live entries of (user, src), best first, ties by smaller pin:
// per pin its best row of src, pins with a tombstone left out. A pin may also be in another
// source's Top, with another score; BestAcrossSources keeps its best. Rows of pins with a
// tombstone met on the way are deleted, best effort (worse rows of a live pin are left to
// Upkeep).
func (p *Pools) Top(ctx context.Context, user ID, src Source, n int) ([]PoolEntry, error) {
	out, err := p.TopMany(ctx, user, []Source{src}, n)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// TopMany is Top of each of srcs (one list per source, in order), read together: the first
// page of every source in one ScanMany (at once on a backend that sends scans concurrently,
// such as HBase) and the tombstones of all their rows in one GetMany, so that reading k
// sources costs about the round trips of one.
func (p *Pools) TopMany(ctx context.Context, user ID, srcs []Source, n int) ([][]PoolEntry, error) {
	if err := user.Check(TypeUser); err != nil {
		return nil, fmt.Errorf("top: %w", err)
	}
	if n < 1 || n > MaxPoolPage {
		return nil, fmt.Errorf("top %d: n %d out of range [1, %d]", user, n, MaxPoolPage)
	}
	reads := make([]topRead, len(srcs))
	for i, src := range srcs {
		if src == 0 {
			return nil, errors.New("top: source 0")
		}
		prefix := sourcePrefix(user, src)
		reads[i] = topRead{start: prefix, stop: PrefixEnd(prefix), seen: make(map[ID]bool, n)}
	}
	out := make([][]PoolEntry, len(srcs))
	for {
		var active []int
		var opts []ScanOptions
		for i := range reads {
			if !reads[i].done && len(out[i]) < n {
				active = append(active, i)
				opts = append(opts, ScanOptions{Start: reads[i].start, Stop: reads[i].stop, Limit: n - len(out[i])})
			}
		}
		if len(active) == 0 {
			return out, nil
		}
		pages, err := ScanMany(ctx, p.t, opts)
		if err != nil {
			return nil, fmt.Errorf("top %d: %w", user, err)
		}
		keys, cand, dead, err := topCandidates(user, srcs, reads, active, pages)
		if err != nil {
			return nil, err
		}
		gone, err := GetMany(ctx, p.t, keys)
		if err != nil {
			return nil, fmt.Errorf("top %d: tombstones: %w", user, err)
		}
		g := 0
		for j, i := range active {
			rows := pages[j]
			for _, k := range cand[j] {
				r, tomb := rows[k], gone[g]
				g++
				if isTomb(tomb) {
					if deadUnder(tomb) {
						dead = append(dead, Mutation{Key: r.Key, Delete: true})
					}
					continue
				}
				e, err := decodeRow(user, r.Key, r.Value)
				if err != nil {
					dead = append(dead, Mutation{Key: r.Key, Delete: true})
					continue
				}
				out[i] = append(out[i], e)
			}
			if len(rows) < opts[j].Limit {
				reads[i].done = true
			} else {
				reads[i].start = keyAfter(rows[len(rows)-1].Key)
			}
		}
		if len(dead) > 0 {
			// Best effort, and lazily: readers skip dead rows either way.
			_ = ApplyLazy(ctx, p.t, dead)
		}
	}
}

// topRead is TopMany's read of one source: the key range left and the pins seen.
type topRead struct {
	start, stop []byte
	seen        map[ID]bool
	done        bool
}

// topCandidates picks, from each active source's page, the rows to check against the pins'
// tombstones (cand, per active source, with their tombstone keys in keys, in order): the best
// row of each pin not seen before. Rows not of this layout are returned in dead.
func topCandidates(user ID, srcs []Source, reads []topRead, active []int, pages [][]KV) (keys [][]byte, cand [][]int, dead []Mutation, err error) {
	for j, i := range active {
		rs := &reads[i]
		var c []int
		for k, r := range pages[j] {
			if len(r.Key) != poolKeyLen {
				return nil, nil, nil, fmt.Errorf("top %d/%d: malformed row key %x", user, srcs[i], r.Key)
			}
			pin := ID(binary.BigEndian.Uint64(r.Key[17:]))
			if rs.seen[pin] {
				// A worse row of a pin read already: skipped, left to Upkeep (deleting it
				// here would fail a concurrent Take that read it as the pin's best a
				// moment ago).
				continue
			}
			if len(r.Value) < rowValMin {
				dead = append(dead, Mutation{Key: r.Key, Delete: true}) // not a row of this layout
				continue
			}
			rs.seen[pin] = true
			c = append(c, k)
			keys = append(keys, goneKey(user, pin))
		}
		cand = append(cand, c)
	}
	return keys, cand, dead, nil
}
