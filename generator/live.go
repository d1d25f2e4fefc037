package generator

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// Liveness tells which pins may still be served: deleted (soft-deleted or absent) pins are not
// live. cmd wires it to one batched zen.Graph.GetMany; the generator declares it as its consumer.
type Liveness interface {
	// Live returns the live pins among pins (true); a pin missing from the map is not live.
	Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error)
}

// dropDead removes the candidates that are no longer live from lists, excludes them for the
// rest of the request, takes them out of the pools (the lazy half of a pin delete: the worker
// purges the pools it can reach, this catches the rest on read) and counts them as drops.
// checked remembers pins already found live in an earlier round.
//
// A Liveness error fails the request (fail closed): serving a pin that may have been deleted
// is what this check exists to prevent, and a failed GenerateChunk costs nothing (feedsvc
// serves the materialized feed alone and the pools are untouched).
func (g *Generator) dropDead(ctx context.Context, user zen.ID, lists [][]zen.PoolEntry, excluded, checked map[zen.ID]bool, dbg *debugLog) (int, error) {
	var ask []zen.ID
	for _, l := range lists {
		for _, e := range l {
			if !checked[e.Pin] {
				ask = append(ask, e.Pin)
			}
		}
	}
	if len(ask) == 0 {
		return 0, nil
	}
	live, err := g.live.Live(ctx, ask)
	if err != nil {
		return 0, fmt.Errorf("liveness of %d pins of %d: %w", len(ask), uint64(user), err)
	}
	var dead []zen.PoolEntry
	for i, l := range lists {
		kept := l[:0]
		for _, e := range l {
			switch {
			case checked[e.Pin] || live[e.Pin]:
				checked[e.Pin] = true
				kept = append(kept, e)
			case !excluded[e.Pin]:
				excluded[e.Pin] = true
				dead = append(dead, e)
				dbg.add("deleted: %s, dropped from the pools", describe(e))
			}
		}
		lists[i] = kept
	}
	if len(dead) == 0 {
		return 0, nil
	}
	// Take, not a claim: a concurrent chunk that claimed one of these finds it gone from the
	// pools and replaces it, as for any pin removed meanwhile.
	gone, err := g.pools.Take(ctx, user, dead)
	if err != nil {
		return 0, fmt.Errorf("drop deleted pins of %d: %w", uint64(user), err)
	}
	if len(gone) > 0 {
		if _, err := g.state.Increment(ctx, userKey(user, tagDrops), int64(len(gone))); err != nil {
			return 0, fmt.Errorf("count drops of %d: %w", uint64(user), err)
		}
		g.m.deleted.Add(float64(len(gone)))
	}
	return len(dead), nil
}

// maxLiveRereads bounds how many times one take round reads the pools again after finding
// deleted candidates.
const maxLiveRereads = 4

// In-flight index rows of the "genstate" table, one per chunk record, written with the record's
// first write and deleted with the record:
//
//	0xFF 'i' user(8) chunkNo(8)   (empty value)
//
// User IDs have their two top bits zero, so 0xFF sorts after every per-user row. The index
// lets a recovery pass find the users with chunks a crash left behind (InFlightUsers).
const (
	inflightTag0 = 0xFF
	inflightTag1 = 'i'
)

func inflightUserKey(user zen.ID) []byte {
	return binary.BigEndian.AppendUint64([]byte{inflightTag0, inflightTag1}, uint64(user))
}

func inflightKey(user zen.ID, no uint64) []byte {
	return binary.BigEndian.AppendUint64(inflightUserKey(user), no)
}

// InFlightUsers returns up to limit users, in ID order after `after` (0: from the start), that
// have in-flight chunks: taken from the pools and not yet settled. A recovery pass calls
// Pending and Settle for each (see cmd/smartfeed), then continues after the last user returned;
// fewer than limit users means the end.
func (g *Generator) InFlightUsers(ctx context.Context, after zen.ID, limit int) ([]zen.ID, error) {
	if limit < 1 || limit > 100000 {
		return nil, fmt.Errorf("%w: limit %d not in [1, 100000]", ErrInvalidArgument, limit)
	}
	start := []byte{inflightTag0, inflightTag1}
	if after != 0 {
		start = inflightUserKey(after + 1)
	}
	stop := []byte{inflightTag0, inflightTag1 + 1}
	var out []zen.ID
	for len(out) < limit {
		rows, err := g.state.Scan(ctx, zen.ScanOptions{Start: start, Stop: stop, Limit: limit})
		if err != nil {
			return nil, fmt.Errorf("scan in-flight index: %w", err)
		}
		for _, kv := range rows {
			if len(kv.Key) != 2+8+8 {
				continue
			}
			u := zen.ID(binary.BigEndian.Uint64(kv.Key[2:]))
			if len(out) == 0 || out[len(out)-1] != u {
				out = append(out, u)
				if len(out) == limit {
					break
				}
			}
		}
		if len(rows) < limit || len(out) == limit {
			break
		}
		start = inflightUserKey(out[len(out)-1] + 1)
	}
	return out, nil
}

// pruneIndex deletes the user's in-flight index rows whose record is gone (a write cut short
// between the two on a store without atomic batches).
func (g *Generator) pruneIndex(ctx context.Context, user zen.ID, records map[uint64]bool) error {
	prefix := inflightUserKey(user)
	rows, err := g.state.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: inflightUserKey(user + 1)})
	if err != nil {
		return fmt.Errorf("scan in-flight index of %d: %w", uint64(user), err)
	}
	var del []zen.Mutation
	for _, kv := range rows {
		if len(kv.Key) != len(prefix)+8 || !bytes.HasPrefix(kv.Key, prefix) {
			continue
		}
		if !records[binary.BigEndian.Uint64(kv.Key[len(prefix):])] {
			del = append(del, zen.Mutation{Key: kv.Key, Delete: true})
		}
	}
	if len(del) == 0 {
		return nil
	}
	if err := g.state.Apply(ctx, del); err != nil {
		return fmt.Errorf("prune in-flight index of %d: %w", uint64(user), err)
	}
	return nil
}
