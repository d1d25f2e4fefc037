package generator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/zen"
)

// abandon tries to put back what a failed GenerateChunk claimed, and returns err. If that
// fails too, the intent record stays for Pending/Settle to recover.
func (g *Generator) abandon(ctx context.Context, user zen.ID, no uint64, rec *record, err error) error {
	if rec == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := g.release(ctx, user, no, rec, false); rerr != nil {
		g.log.Warn("put back failed chunk; left for recovery", zap.String("chunk", rec.ID), zap.Error(rerr))
	}
	return err
}

// owned returns the record's entries whose claim row names this chunk.
func (g *Generator) owned(ctx context.Context, user zen.ID, rec *record) ([]recEntry, error) {
	keys := make([][]byte, len(rec.Entries))
	for i, re := range rec.Entries {
		keys[i] = userKey2(user, tagClaim, uint64(re.Entry.Pin))
	}
	vals, err := zen.GetMany(ctx, g.state, keys)
	if err != nil {
		return nil, fmt.Errorf("read claims of chunk %s: %w", rec.ID, err)
	}
	var out []recEntry
	for i, re := range rec.Entries {
		if vals[i] != nil && string(vals[i]) == rec.ID {
			out = append(out, re)
		}
	}
	return out, nil
}

// finish turns an intent record left by a crash into a ready one: it keeps the pins this
// chunk claimed, makes sure they are out of the pools, and orders them for serving.
func (g *Generator) finish(ctx context.Context, user zen.ID, no uint64, rec *record) error {
	own, err := g.owned(ctx, user, rec)
	if err != nil {
		return err
	}
	es := make([]zen.PoolEntry, len(own))
	picks := make([]pick, len(own))
	for i, re := range own {
		es[i] = re.Entry
		picks[i] = pick{e: re.Entry, reason: re.Reason}
	}
	if len(es) > 0 {
		// Claimed pins not yet taken are taken now; already-taken ones are simply not won again.
		if _, err := g.pools.Take(ctx, user, es); err != nil {
			return fmt.Errorf("take pins of chunk %s: %w", rec.ID, err)
		}
	}
	arranged, _ := arrange(picks, g.cfg.Load().MaxRun)
	rec.State = stateReady
	rec.Entries = rec.Entries[:0]
	for _, p := range arranged {
		rec.Entries = append(rec.Entries, recEntry{Entry: p.e, Reason: p.reason})
	}
	return g.putRecord(ctx, user, no, rec)
}

// release closes a record: unless delivered is set, the pins it owns go back into the pools
// first; then its claims and the record itself are deleted. Every step is safe to repeat.
func (g *Generator) release(ctx context.Context, user zen.ID, no uint64, rec *record, delivered bool) error {
	own, err := g.owned(ctx, user, rec)
	if err != nil {
		return err
	}
	if !delivered && len(own) > 0 {
		es := make([]zen.PoolEntry, len(own))
		for i, re := range own {
			es[i] = re.Entry
		}
		// Restore, not Insert: Take left taken tombstones that a plain Insert must respect (so a
		// late fanout cannot re-add a served pin); giving the chunk back is what lifts them.
		if _, err := g.pools.Restore(ctx, es); err != nil {
			return fmt.Errorf("put back chunk %s: %w", rec.ID, err)
		}
	}
	if delivered && len(own) > 0 {
		// A delivered pin never comes back, so its taken tombstone becomes a forgotten one. Rows
		// that late jobs write for it (append-only inserts: another source, a redelivered
		// fanout) then are deleted by the readers that meet them. Under a taken tombstone they
		// would stay until the pool TTL, because a Restore may still want them, and every read
		// of the pool's head would step over them. Lazily: a crash that loses it leaves the
		// tombstones taken, which only keeps those rows longer.
		pins := make([]zen.ID, len(own))
		for i, re := range own {
			pins[i] = re.Entry.Pin
		}
		if _, err := g.pools.Forget(zen.Lazily(ctx), user, pins); err != nil {
			return fmt.Errorf("forget delivered pins of chunk %s: %w", rec.ID, err)
		}
	}
	if len(own) > 0 {
		conds := make([]zen.Cond, len(own))
		for i, re := range own {
			conds[i] = zen.Cond{Key: userKey2(user, tagClaim, uint64(re.Entry.Pin)), Expected: []byte(rec.ID)}
		}
		if _, err := zen.CheckAndSetMany(ctx, g.state, conds); err != nil {
			return fmt.Errorf("release %d pins of chunk %s: %w", len(own), rec.ID, err)
		}
	}
	if err := g.state.Apply(ctx, []zen.Mutation{{Key: userKey2(user, tagChunk, no), Delete: true},
		{Key: inflightKey(user, no), Delete: true}}); err != nil {
		return fmt.Errorf("delete chunk %s: %w", rec.ID, err)
	}
	return nil
}

// Settle closes an in-flight chunk. delivered=true: it has been materialized, its pins are
// forgotten in the pools (nothing puts them back), the record and its claims go away. delivered=false: its pins return to the pools and the next chunk of the
// user is at least as large. Settling a chunk already settled (or the empty chunk ID) does
// nothing; a malformed ID or one of another user is refused.
func (g *Generator) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if chunkID == "" {
		return nil
	}
	no, err := parseChunkID(user, chunkID)
	if err != nil {
		return err
	}
	rec, err := g.getRecord(ctx, user, no)
	if errors.Is(err, zen.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read chunk %s: %w", chunkID, err)
	}
	if rec.State == stateIntent {
		if err := g.finish(ctx, user, no, rec); err != nil {
			return err
		}
	}
	if !delivered {
		size := len(rec.Entries)
		if err := g.updateState(ctx, user, func(s *userState) { s.Owed = max(s.Owed, size) }); err != nil {
			return err
		}
	}
	if err := g.release(ctx, user, no, rec, delivered); err != nil {
		return err
	}
	g.m.settled.WithLabelValues(fmt.Sprint(delivered)).Inc()
	return nil
}

// Pending lists the user's chunks taken from the pools and not yet settled, oldest first.
// Chunks a crash left unfinished are finished first (their claimed pins, in serving order),
// once they are older than InFlightGrace so a request still running is not disturbed; a
// crashed chunk that owns no pin is deleted.
func (g *Generator) Pending(ctx context.Context, user zen.ID) ([]Chunk, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	recs, err := g.records(ctx, user)
	if err != nil {
		return nil, err
	}
	grace := time.Duration(g.cfg.Load().InFlightGrace).Milliseconds()
	nowMs := g.now().UnixMilli()
	var out []Chunk
	records := make(map[uint64]bool, len(recs))
	for _, nr := range recs {
		no, rec := nr.no, nr.rec
		records[no] = true
		if rec.State == stateIntent {
			if nowMs-rec.CreatedMs < grace {
				continue
			}
			if err := g.finish(ctx, user, no, rec); err != nil {
				return nil, err
			}
			if len(rec.Entries) == 0 {
				if err := g.release(ctx, user, no, rec, true); err != nil {
					return nil, err
				}
				continue
			}
		}
		c := Chunk{ID: rec.ID, User: user, CreatedMs: rec.CreatedMs}
		for _, re := range rec.Entries {
			c.Items = append(c.Items, itemOf(re.Entry, re.Reason))
		}
		out = append(out, c)
	}
	if err := g.pruneIndex(ctx, user, records); err != nil {
		g.log.Warn("prune in-flight index", zap.Uint64("user", uint64(user)), zap.Error(err))
	}
	return out, nil
}

// Unfinished returns the pins claimed by user's chunks that no GenerateChunk has finished: one
// running now, or one a crash left that is younger than InFlightGrace (Pending skips those until
// then). It changes nothing. A pin claimed and not yet taken is still in the pools as well. It
// lets an audit account for every pin while a recovery is pending.
func (g *Generator) Unfinished(ctx context.Context, user zen.ID) ([]zen.ID, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	recs, err := g.records(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []zen.ID
	for _, nr := range recs {
		if nr.rec.State != stateIntent {
			continue
		}
		own, err := g.owned(ctx, user, nr.rec)
		if err != nil {
			return nil, err
		}
		for _, re := range own {
			out = append(out, re.Entry.Pin)
		}
	}
	return out, nil
}

// numberedRecord is one of a user's chunk records with its number.
type numberedRecord struct {
	no  uint64
	rec *record
}

// records reads and decodes all of user's chunk records, in number order.
func (g *Generator) records(ctx context.Context, user zen.ID) ([]numberedRecord, error) {
	prefix := userKey(user, tagChunk)
	rows, err := g.state.Scan(ctx, zen.ScanOptions{Start: prefix, Stop: userKey(user, tagChunk+1)})
	if err != nil {
		return nil, fmt.Errorf("scan chunks of %d: %w", uint64(user), err)
	}
	out := make([]numberedRecord, 0, len(rows))
	for _, kv := range rows {
		if len(kv.Key) != len(prefix)+8 {
			continue
		}
		no := beUint64(kv.Key[len(prefix):])
		rec, err := decodeRecord(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", no, uint64(user), err)
		}
		out = append(out, numberedRecord{no: no, rec: rec})
	}
	return out, nil
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
