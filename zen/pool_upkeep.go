package zen

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
)

// poolView is one read of all of a user's rows: the rows of live pins in key order (so each
// source's best first), the best row of each pin, the dead rows to delete (a live pin's worse
// rows among them), and the tombstones.
type poolView struct {
	rows   []viewRow
	best   map[ID]int // pin -> its live entry, an index into rows
	dead   []Mutation
	tombs  []KV
	hidden []hiddenRow // rows under a taken tombstone or a restoring mark
}

// viewRow is a row of a live pin; lost when a better row of the pin came later in the scan
// (from another source).
type viewRow struct {
	e    PoolEntry
	key  []byte
	lost bool
}

// liveEntry returns pin's live entry, if the pin is in the pools.
func (v *poolView) liveEntry(pin ID) (PoolEntry, bool) {
	i, ok := v.best[pin]
	if !ok {
		return PoolEntry{}, false
	}
	return v.rows[i].e, true
}

// hiddenRow is a row under a taken tombstone or a restoring mark: readers skip it; only its
// age deletes it.
type hiddenRow struct {
	key       []byte
	createdMs int64
}

// view reads all of user's rows in one range scan (tombstones sort first, then the sources).
func (p *Pools) view(ctx context.Context, user ID) (*poolView, error) {
	v := &poolView{best: map[ID]int{}}
	gone := map[ID][]byte{}
	start, stop := userPrefix(user), PrefixEnd(userPrefix(user))
	for {
		rows, err := p.t.Scan(ctx, ScanOptions{Start: start, Stop: stop, Limit: scanPage})
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			switch {
			case len(r.Key) == goneKeyLen && r.Key[8] == 0:
				pin := ID(binary.BigEndian.Uint64(r.Key[9:]))
				if !isTomb(r.Value) {
					v.dead = append(v.dead, Mutation{Key: r.Key, Delete: true}) // older layout
					continue
				}
				gone[pin] = r.Value
				v.tombs = append(v.tombs, r)
			case len(r.Key) == poolKeyLen && r.Key[8] != 0:
				pin := ID(binary.BigEndian.Uint64(r.Key[17:]))
				if g, ok := gone[pin]; ok {
					switch {
					case deadUnder(g):
						v.dead = append(v.dead, Mutation{Key: r.Key, Delete: true})
					case len(r.Value) >= rowValMin:
						v.hidden = append(v.hidden, hiddenRow{r.Key, int64(binary.BigEndian.Uint64(r.Value[24:32]))})
					}
					continue
				}
				e, err := decodeRow(user, r.Key, r.Value)
				if err != nil {
					v.dead = append(v.dead, Mutation{Key: r.Key, Delete: true})
					continue
				}
				// Every row of a live pin but its best one lost: rows come best first within a
				// source, so a later row wins only from another source.
				j, ok := v.best[pin]
				switch {
				case !ok:
					v.best[pin] = len(v.rows)
				case outranks(e, v.rows[j].e):
					v.rows[j].lost = true
					v.dead = append(v.dead, Mutation{Key: v.rows[j].key, Delete: true})
					v.best[pin] = len(v.rows)
				default:
					v.dead = append(v.dead, Mutation{Key: r.Key, Delete: true})
					continue
				}
				v.rows = append(v.rows, viewRow{e: e, key: r.Key})
			default:
				return nil, fmt.Errorf("malformed pools row key %x", r.Key)
			}
		}
		if len(rows) < scanPage {
			break
		}
		start = keyAfter(rows[len(rows)-1].Key)
	}
	return v, nil
}

// entries returns the live entries of src (0: every source), best first, ties by smaller pin.
// Within a source that is key order, the order of the view's rows.
func (v *poolView) entries(src Source) []PoolEntry {
	var out []PoolEntry
	for _, r := range v.rows {
		if !r.lost && (src == 0 || r.e.Source == src) {
			out = append(out, r.e)
		}
	}
	if src != 0 {
		return out
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].Pin < out[j].Pin
	})
	return out
}

// drop deletes every row of the pins of es (live entries of v: their best rows, the others
// being among the view's dead rows), after the view's dead rows (no tombstone: a later job may
// bring the pin back), and returns how many pins it dropped. Lazy deletes do not wait
// for their fsync (zen.Lazily): for upkeep (trim, expiry, dedup), which a crash that loses them
// merely leaves to be done again, not for a removal a caller relies on.
func (p *Pools) drop(ctx context.Context, v *poolView, es []PoolEntry, lazy bool) (int, error) {
	muts := v.dead
	for _, e := range es {
		if i, ok := v.best[e.Pin]; ok {
			muts = append(muts, Mutation{Key: v.rows[i].key, Delete: true})
		}
	}
	for len(muts) > 0 {
		n := min(len(muts), scanPage)
		var err error
		if lazy {
			err = ApplyLazy(ctx, p.t, muts[:n])
		} else {
			err = p.t.Apply(ctx, muts[:n])
		}
		if err != nil {
			return 0, err
		}
		muts = muts[n:]
	}
	return len(es), nil
}

// RemoveWhere drops the entries of (user, src) for which match is true (src 0 = every source);
// it returns how many it removed.
func (p *Pools) RemoveWhere(ctx context.Context, user ID, src Source, match func(PoolEntry) bool) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("remove where: %w", err)
	}
	v, err := p.view(ctx, user)
	if err != nil {
		return 0, fmt.Errorf("remove where %d/%d: %w", user, src, err)
	}
	var drop []PoolEntry
	for _, e := range v.entries(src) {
		if match(e) {
			drop = append(drop, e)
		}
	}
	n, err := p.drop(ctx, v, drop, false)
	if err != nil {
		return 0, fmt.Errorf("remove where %d/%d: %w", user, src, err)
	}
	return n, nil
}

// Size returns the number of live entries of (user, src) (src 0 = every source).
func (p *Pools) Size(ctx context.Context, user ID, src Source) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("size: %w", err)
	}
	v, err := p.view(ctx, user)
	if err != nil {
		return 0, fmt.Errorf("size %d/%d: %w", user, src, err)
	}
	return len(v.entries(src)), nil
}

// Trim drops the lowest-scored entries of (user, src) beyond keep (ties: the larger pin goes
// first); it returns how many it dropped.
func (p *Pools) Trim(ctx context.Context, user ID, src Source, keep int) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("trim: %w", err)
	}
	if src == 0 || keep < 0 {
		return 0, fmt.Errorf("trim %d: source %d, keep %d: want source ≥ 1 and keep ≥ 0", user, src, keep)
	}
	v, err := p.view(ctx, user)
	if err != nil {
		return 0, fmt.Errorf("trim %d/%d: %w", user, src, err)
	}
	es := v.entries(src)
	n, err := p.drop(ctx, v, es[min(keep, len(es)):], true)
	if err != nil {
		return 0, fmt.Errorf("trim %d/%d: %w", user, src, err)
	}
	return n, nil
}

// Expire drops every entry of user (all sources) created before olderThanMs and returns how
// many. It also deletes user's tombstones written before olderThanMs (before now minus the
// tombstone TTL when one is set): a pin's rows carry its creation time, no later than its
// tombstone, so with the pool TTL as the cut-off, rows a job writes for the pin after that are
// past the TTL themselves (expired on arrival: skipped by readers, dropped by the next Expire).
// Tombstones are not counted.
func (p *Pools) Expire(ctx context.Context, user ID, olderThanMs int64) (int, error) {
	n, _, err := p.upkeep(ctx, user, -1, olderThanMs)
	if err != nil {
		return n, fmt.Errorf("expire %d: %w", user, err)
	}
	return n, nil
}

// Upkeep does in one read of user's rows what Expire and then Trim of every source do: it
// drops the entries created before olderThanMs, then each source's lowest-scored entries beyond
// keep (ties: the larger pin goes first), then the tombstones Expire would delete; on the way it
// deletes the dead rows (the worse rows of each pin, rows under tombstones). It returns the
// entries expired and trimmed.
func (p *Pools) Upkeep(ctx context.Context, user ID, keep int, olderThanMs int64) (expired, trimmed int, err error) {
	if keep < 0 {
		return 0, 0, fmt.Errorf("upkeep %d: keep %d: want keep ≥ 0", user, keep)
	}
	expired, trimmed, err = p.upkeep(ctx, user, keep, olderThanMs)
	if err != nil {
		return expired, trimmed, fmt.Errorf("upkeep %d: %w", user, err)
	}
	return expired, trimmed, nil
}

// upkeep is Upkeep; keep < 0 trims nothing (Expire).
func (p *Pools) upkeep(ctx context.Context, user ID, keep int, olderThanMs int64) (expired, trimmed int, err error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, 0, err
	}
	v, err := p.view(ctx, user)
	if err != nil {
		return 0, 0, err
	}
	var drop []PoolEntry
	bySrc := map[Source][]PoolEntry{}
	for _, r := range v.rows { // key order: each source's entries best first
		if r.lost {
			continue
		}
		e := r.e
		if e.CreatedMs < olderThanMs {
			drop = append(drop, e)
			expired++
			continue
		}
		bySrc[e.Source] = append(bySrc[e.Source], e)
	}
	if keep >= 0 {
		for _, ses := range bySrc {
			if len(ses) > keep {
				drop = append(drop, ses[keep:]...)
				trimmed += len(ses) - keep
			}
		}
	}
	// Hidden rows go by age like the rest: one created before the cut-off is expired whatever
	// happens to its tombstone.
	for _, h := range v.hidden {
		if h.createdMs < olderThanMs {
			v.dead = append(v.dead, Mutation{Key: h.key, Delete: true})
		}
	}
	if _, err := p.drop(ctx, v, drop, true); err != nil {
		return 0, 0, err
	}
	if err := p.expireTombs(ctx, v.tombs, olderThanMs); err != nil {
		return expired, trimmed, err
	}
	return expired, trimmed, nil
}

// expireTombs deletes the tombstones of tombs written before olderThanMs (before now minus the
// tombstone TTL when one is set), each only if unchanged since read, all in one batch.
func (p *Pools) expireTombs(ctx context.Context, tombs []KV, olderThanMs int64) error {
	tombBefore := olderThanMs
	if p.tombTTL > 0 {
		tombBefore = p.now().Add(-p.tombTTL).UnixMilli()
	}
	var conds []Cond
	for _, r := range tombs {
		if _, at := tombInfo(r.Value); at < tombBefore {
			// Only if unchanged: a Restore or a new Take may have replaced it meanwhile.
			conds = append(conds, Cond{Key: r.Key, Expected: r.Value})
		}
	}
	if _, err := CheckAndSetMany(ctx, p.t, conds); err != nil {
		return fmt.Errorf("tombstones: %w", err)
	}
	return nil
}

// DeleteUser removes all of user's rows: pool rows first, tombstones last, so a crash part-way
// never leaves a row without the tombstone that hides it.
func (p *Pools) DeleteUser(ctx context.Context, user ID) error {
	if err := user.Check(TypeUser); err != nil {
		return fmt.Errorf("delete user pools: %w", err)
	}
	gone := append(userPrefix(user), 0)
	for _, rng := range [][2][]byte{{PrefixEnd(gone), PrefixEnd(userPrefix(user))}, {gone, PrefixEnd(gone)}} {
		for {
			rows, err := p.t.Scan(ctx, ScanOptions{Start: rng[0], Stop: rng[1], Limit: scanPage})
			if err != nil {
				return fmt.Errorf("delete user pools %d: %w", user, err)
			}
			if len(rows) == 0 {
				break
			}
			dels := make([]Mutation, len(rows))
			for i, r := range rows {
				dels[i] = Mutation{Key: r.Key, Delete: true}
			}
			if err := p.t.Apply(ctx, dels); err != nil {
				return fmt.Errorf("delete user pools %d: %w", user, err)
			}
		}
	}
	return nil
}
