package generator

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/zen"
)

// Rows of the "genstate" table, all keyed by the user first (so they live on the user's shard):
//
//	user(8) 's'                  userState, JSON: last visit, owed size, last expiry sweep
//	user(8) 'n'                  counter of chunk numbers: no longer written (numbers come from the clock, see nextNo)
//	user(8) 'd'                  counter: pins dropped as expired by this generator's sweeps
//	user(8) 'c' chunkNo(8)       record of an in-flight chunk (record.go)
//	user(8) 'p' pin(8)           claim of a pin by an in-flight chunk: the chunk ID
const (
	tagState   = 's'
	tagCounter = 'n'
	tagDrops   = 'd'
	tagChunk   = 'c'
	tagClaim   = 'p'
)

func userKey(user zen.ID, tag byte) []byte {
	k := make([]byte, 9, 17)
	binary.BigEndian.PutUint64(k, uint64(user))
	k[8] = tag
	return k
}

func userKey2(user zen.ID, tag byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(userKey(user, tag), v)
}

// userState is the per-user row.
type userState struct {
	LastVisitMs  int64 `json:"last_visit_ms,omitempty"`
	Owed         int   `json:"owed,omitempty"`
	LastExpireMs int64 `json:"last_expire_ms,omitempty"`
}

// Record states.
const (
	stateIntent = "intent" // pins chosen, claims possibly under way: ownership is read from the claim rows
	stateReady  = "ready"  // every listed pin is claimed by this chunk and out of the pools, in serving order
)

// record is an in-flight chunk.
type record struct {
	ID        string     `json:"id"`
	State     string     `json:"state"`
	CreatedMs int64      `json:"created_ms"`
	Entries   []recEntry `json:"entries"`
}

// recEntry is one pin of a record: the pool entry as taken (so it can be put back) and the
// reason it was chosen.
type recEntry struct {
	Entry  zen.PoolEntry `json:"entry"`
	Reason string        `json:"reason"`
}

// chunkID formats the ID of the user's chunk number no.
func chunkID(user zen.ID, no uint64) string {
	return strconv.FormatUint(uint64(user), 10) + "-" + strconv.FormatUint(no, 10)
}

// parseChunkID returns the chunk number of id, which must belong to user.
func parseChunkID(user zen.ID, id string) (uint64, error) {
	u, n, ok := strings.Cut(id, "-")
	if !ok {
		return 0, fmt.Errorf("%w: chunk id %s: want <user>-<number>", ErrInvalidArgument, quote.Q(id))
	}
	uv, err := strconv.ParseUint(u, 10, 64)
	if err != nil || zen.ID(uv) != user {
		return 0, fmt.Errorf("%w: chunk id %s does not belong to user %d", ErrInvalidArgument, quote.Q(id), uint64(user))
	}
	no, err := strconv.ParseUint(n, 10, 64)
	if err != nil || no == 0 {
		return 0, fmt.Errorf("%w: chunk id %s: bad number", ErrInvalidArgument, quote.Q(id))
	}
	return no, nil
}

func (g *Generator) loadState(ctx context.Context, user zen.ID) (userState, []byte, error) {
	raw, err := g.state.Get(ctx, userKey(user, tagState))
	if errors.Is(err, zen.ErrNotFound) {
		return userState{}, nil, nil
	}
	if err != nil {
		return userState{}, nil, fmt.Errorf("read state of %d: %w", uint64(user), err)
	}
	var st userState
	if err := json.Unmarshal(raw, &st); err != nil {
		return userState{}, nil, fmt.Errorf("decode state of %d: %w", uint64(user), err)
	}
	return st, raw, nil
}

// updateState applies fn to the user's state under compare-and-set, retrying on conflict.
func (g *Generator) updateState(ctx context.Context, user zen.ID, fn func(*userState)) error {
	for range 100 {
		st, raw, err := g.loadState(ctx, user)
		if err != nil {
			return err
		}
		fn(&st)
		next, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("encode state: %w", err)
		}
		ok, err := g.state.CheckAndSet(ctx, userKey(user, tagState), raw, next)
		if err != nil {
			return fmt.Errorf("write state of %d: %w", uint64(user), err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("write state of %d: too much contention", uint64(user))
}

// nextNo returns a chunk number: the clock in µs, bumped past the last one this process handed
// out. Chunk numbers order a user's chunks by creation, as a counter would, without a counter's
// synced write on every first page; createRecord's compare-and-set makes them unique across
// processes.
func (g *Generator) nextNo() uint64 {
	for {
		last := g.lastNo.Load()
		n := max(uint64(g.now().UnixMicro()), last+1)
		if g.lastNo.CompareAndSwap(last, n) {
			return n
		}
	}
}

// createRecord numbers a new chunk of user and writes its intent record (holding entries) only
// if no record has that number, with the in-flight index row: in one commit where the state
// table allows (a zen.Carrier), else the index row first (an index row without its record is
// skipped by recovery). A number taken by another process's chunk is replaced by a fresh one.
func (g *Generator) createRecord(ctx context.Context, user zen.ID, nowMs int64, entries []recEntry) (uint64, *record, []byte, error) {
	const attempts = 4
	for range attempts {
		no := g.nextNo()
		rec := &record{ID: chunkID(user, no), State: stateIntent, CreatedMs: nowMs, Entries: entries}
		b, err := encodeRecord(rec)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("encode chunk %s: %w", rec.ID, err)
		}
		key := userKey2(user, tagChunk, no)
		index := zen.Mutation{Key: inflightKey(user, no), Value: []byte{}}
		var ok bool
		if c, isCarrier := g.state.(zen.Carrier); isCarrier {
			ok, err = c.CheckAndSetWith(ctx, key, nil, b, []zen.Mutation{index})
		}
		if !isCarrierOK(g.state, err) {
			if err = g.state.Apply(ctx, []zen.Mutation{index}); err == nil {
				ok, err = g.state.CheckAndSet(ctx, key, nil, b)
			}
		}
		if err != nil {
			return 0, nil, nil, fmt.Errorf("write chunk %s: %w", rec.ID, err)
		}
		if ok {
			return no, rec, b, nil
		}
	}
	return 0, nil, nil, fmt.Errorf("number chunk of %d: %d numbers taken in a row", uint64(user), attempts)
}

// isCarrierOK reports whether a Carrier call was made on t and did not fail as unsupported.
func isCarrierOK(t zen.Table, err error) bool {
	if _, ok := t.(zen.Carrier); !ok {
		return false
	}
	return !errors.Is(err, errors.ErrUnsupported)
}

// putRecord writes the record, after the extra mutations (the in-flight index row).
func (g *Generator) putRecord(ctx context.Context, user zen.ID, no uint64, rec *record, extra ...zen.Mutation) error {
	_, err := g.putRecordBytes(ctx, user, no, rec, extra...)
	return err
}

// putRecordBytes is putRecord, returning the bytes written.
func (g *Generator) putRecordBytes(ctx context.Context, user zen.ID, no uint64, rec *record, extra ...zen.Mutation) ([]byte, error) {
	b, err := encodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("encode chunk %s: %w", rec.ID, err)
	}
	if err := g.state.Apply(ctx, append(extra, zen.Mutation{Key: userKey2(user, tagChunk, no), Value: b})); err != nil {
		return nil, fmt.Errorf("write chunk %s: %w", rec.ID, err)
	}
	return b, nil
}

// readyWithState turns the user's intent record (stored as intent) into rec, ready, and moves
// the state row from raw (as read, nil when absent) to next, in one batched compare-and-set: one
// synced commit for both. A state row changed meanwhile (a concurrent chunk or settle) is left
// for the caller to update again (stateOK false); a record changed meanwhile is an error.
func (g *Generator) readyWithState(ctx context.Context, user zen.ID, no uint64, rec *record, intent, raw []byte, next userState) (stateOK bool, err error) {
	rb, err := encodeRecord(rec)
	if err != nil {
		return false, fmt.Errorf("encode chunk %s: %w", rec.ID, err)
	}
	sb, err := json.Marshal(next)
	if err != nil {
		return false, fmt.Errorf("encode state: %w", err)
	}
	oks, err := zen.CheckAndSetMany(ctx, g.state, []zen.Cond{
		{Key: userKey2(user, tagChunk, no), Expected: intent, Value: rb},
		{Key: userKey(user, tagState), Expected: raw, Value: sb},
	})
	if err != nil {
		return false, fmt.Errorf("write chunk %s: %w", rec.ID, err)
	}
	if !oks[0] {
		return false, fmt.Errorf("write chunk %s: its record changed under it", rec.ID)
	}
	return oks[1], nil
}

func (g *Generator) getRecord(ctx context.Context, user zen.ID, no uint64) (*record, error) {
	b, err := g.state.Get(ctx, userKey2(user, tagChunk, no))
	if err != nil {
		return nil, err
	}
	return decodeRecord(b)
}
