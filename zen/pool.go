package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Source is the origin of a pool entry; each (user, source) is one priority queue.
type Source uint8

// Pool sources.
const (
	SourceFollowing Source = 1 // pins and repins by followed users and boards
	SourceInterest  Source = 2 // pins of followed interests
	SourceRelated   Source = 3 // related pins
)

// Pool limits.
const (
	MaxPoolPage  = 10000 // Top's n
	MaxReasonLen = 256   // PoolEntry.Reason bytes
)

// PoolEntry is one candidate pin in a user's pool.
type PoolEntry struct {
	User      ID
	Source    Source
	Score     float64
	Pin       ID
	Author    ID
	Board     ID
	Interest  ID
	CreatedMs int64
	Reason    string
}

// Pools stores per-(user, source) priority queues in one Table. Rows, all led by the user ID:
//
//	pool row  user(8) | source(1, ≥1) | ^score(8) | pin(8) -> author(8) | board(8) | interest(8) |
//	                                                          created ms(8) | reason
//	gone row  user(8) | 0x00 | pin(8)                      -> 0x00 | kind | at ms | nonce
//
// Inserting is append-only: Insert writes pool rows blind, in one key-sorted batch, and their
// bytes depend only on the entry, so a retried job writes the same rows again. Nothing is read
// before an insert; what an index read used to decide at insert time is decided when reading
// (docs/pools.md gives the argument for each invariant):
//
//   - Dedup: a pin's rows in one source are read best first, so Top keeps the first and skips
//     the rest; across sources, a pin's live entry is its best row (BestAcrossSources for lists
//     read with Top, and every whole-pool operation). Upkeep deletes the rows that lost.
//   - Gone: a gone row is a tombstone: the pin left the user's pools on purpose, and every
//     reader leaves out a pin that has one, whatever rows a late or repeated job wrote. Take
//     claims a pin by creating its gone row with compare-and-set (absent → "taken": the one
//     winner); Forget and Remove write a "forgotten" one (nothing puts the pin back); Restore
//     lifts a taken one (via a short-lived "restoring" mark while it writes the rows back).
//
// Rows under a tombstone are dead to readers. Take deletes the row it took; readers delete the
// rows they meet under a forgotten tombstone (nothing brings those back). Rows under a taken
// tombstone or a restoring mark are only skipped, never deleted by a reader: a reader's delete
// decided on a tombstone read before a Restore's mark could land after the Restore rewrote the
// same row, and lose the pin. They go with age: Expire deletes rows created before its cut-off,
// and tombstones once they are older than the pool TTL (or the tombstone TTL,
// WithTombstoneTTL): a pin's rows carry its creation time, never later than its tombstone, so
// by then they are expired too. DeleteUser deletes everything of a user. Pools is safe for
// concurrent use.
type Pools struct {
	t       Table
	now     func() time.Time
	tombTTL time.Duration
}

// PoolsOption configures Pools.
type PoolsOption func(*Pools)

// WithTombstoneTTL makes Expire delete tombstones older than d, whatever cut-off it is given
// (0, the default, means Expire's own cut-off). A TTL shorter than the pool TTL bounds storage
// tighter but lets a job that runs later than d re-insert a pin already served.
func WithTombstoneTTL(d time.Duration) PoolsOption {
	return func(p *Pools) { p.tombTTL = max(d, 0) }
}

// NewPools returns pools over t (the "pools" table of a store). now nil means time.Now.
func NewPools(t Table, now func() time.Time, opts ...PoolsOption) *Pools {
	if now == nil {
		now = time.Now
	}
	p := &Pools{t: t, now: now}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Table returns the table the pools are stored in.
func (p *Pools) Table() Table { return p.t }

const (
	poolKeyLen = 8 + 1 + 8 + 8
	goneKeyLen = 8 + 1 + 8
	rowValMin  = 8 + 8 + 8 + 8
	tombLen    = 1 + 1 + 8 + 8 // a tombstone: 0x00 | kind | at ms | nonce
	scanPage   = 1000
)

// tombKind says why a pin left a user's pools.
type tombKind byte

const (
	tombTaken     tombKind = 1 // taken for a chunk: Restore may put it back
	tombForgotten tombKind = 2 // removed for good (saved by the user, deleted): nothing puts it back
	tombRestoring tombKind = 3 // a Restore is writing the pin's rows back (lifted when done)
)

// tombstone is the gone-row value: 0x00, why, when (the writer's clock, for Expire), and a nonce
// naming the writing call, so a call whose compare-and-set returned an error can re-read the row
// and recognise its own write.
func tombstone(kind tombKind, atMs int64, nonce uint64) []byte {
	v := make([]byte, 0, tombLen)
	v = append(v, 0, byte(kind))
	v = binary.BigEndian.AppendUint64(v, uint64(atMs))
	return binary.BigEndian.AppendUint64(v, nonce)
}

// isTomb reports whether a gone-row value is a tombstone. Any value led by 0x00 is one (an
// unknown shape reads as taken, at time 0); anything else at a gone key is an index row of the
// older layout, which readers ignore and upkeep deletes.
func isTomb(v []byte) bool { return len(v) > 0 && v[0] == 0 }

// tombInfo decodes a tombstone; unknown shapes read as taken at time 0 (Expire drops them).
func tombInfo(v []byte) (tombKind, int64) {
	if len(v) != tombLen {
		return tombTaken, 0
	}
	return tombKind(v[1]), int64(binary.BigEndian.Uint64(v[2:10]))
}

// deadUnder reports whether a reader may delete the rows of a pin whose gone row holds tomb:
// only under a forgotten tombstone (see Pools).
func deadUnder(tomb []byte) bool {
	kind, _ := tombInfo(tomb)
	return kind == tombForgotten
}

// PoolKey returns the row key user | source | ^score | pin of a pool row.
func PoolKey(user ID, src Source, score float64, pin ID) ([]byte, error) {
	if src == 0 {
		return nil, errors.New("pool key: source 0")
	}
	enc, err := EncodeScore(score)
	if err != nil {
		return nil, fmt.Errorf("pool key: %w", err)
	}
	return poolKeyEnc(user, src, enc, pin), nil
}

func poolKeyEnc(user ID, src Source, enc [8]byte, pin ID) []byte {
	return appendPoolKey(make([]byte, 0, poolKeyLen), user, src, enc, pin)
}

// appendPoolKey appends the pool row key of (user, src, encoded score, pin) to k.
func appendPoolKey(k []byte, user ID, src Source, enc [8]byte, pin ID) []byte {
	k = appendID(k, user)
	k = append(k, byte(src))
	for _, b := range enc {
		k = append(k, ^b)
	}
	return appendID(k, pin)
}

// ParsePoolKey decodes a pool row key, refusing any other shape.
func ParsePoolKey(k []byte) (user ID, src Source, score float64, pin ID, err error) {
	if len(k) != poolKeyLen {
		return 0, 0, 0, 0, fmt.Errorf("parse pool key: %d bytes, want %d", len(k), poolKeyLen)
	}
	user = ID(binary.BigEndian.Uint64(k[:8]))
	src = Source(k[8])
	pin = ID(binary.BigEndian.Uint64(k[17:]))
	if !user.Valid() || !pin.Valid() {
		return 0, 0, 0, 0, fmt.Errorf("parse pool key %x: invalid id", k)
	}
	if src == 0 {
		return 0, 0, 0, 0, fmt.Errorf("parse pool key %x: source 0", k)
	}
	var enc [8]byte
	for i := range enc {
		enc[i] = ^k[9+i]
	}
	score, err = DecodeScore(enc[:])
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("parse pool key: %w", err)
	}
	return user, src, score, pin, nil
}

func goneKey(user, pin ID) []byte {
	k := make([]byte, 0, goneKeyLen)
	k = appendID(k, user)
	k = append(k, 0)
	return appendID(k, pin)
}

func userPrefix(user ID) []byte { return appendID(make([]byte, 0, 8), user) }

func sourcePrefix(user ID, src Source) []byte { return append(userPrefix(user), byte(src)) }

// appendRowValue appends what a pool row carries besides its key to v (deterministic: a retry
// writes the same bytes).
func appendRowValue(v []byte, e PoolEntry) []byte {
	v = appendID(v, e.Author)
	v = appendID(v, e.Board)
	v = appendID(v, e.Interest)
	v = binary.BigEndian.AppendUint64(v, uint64(e.CreatedMs))
	return append(v, e.Reason...)
}

// decodeRow decodes a pool row of user (its key already of pool-row length).
func decodeRow(user ID, k, v []byte) (PoolEntry, error) {
	if len(v) < rowValMin {
		return PoolEntry{}, fmt.Errorf("pool row %x: malformed value (%d bytes)", k, len(v))
	}
	var enc [8]byte
	for i := range enc {
		enc[i] = ^k[9+i]
	}
	score, err := DecodeScore(enc[:])
	if err != nil {
		return PoolEntry{}, fmt.Errorf("pool row %x: %w", k, err)
	}
	return PoolEntry{
		User: user, Source: Source(k[8]), Score: score, Pin: ID(binary.BigEndian.Uint64(k[17:])),
		Author:    ID(binary.BigEndian.Uint64(v[0:8])),
		Board:     ID(binary.BigEndian.Uint64(v[8:16])),
		Interest:  ID(binary.BigEndian.Uint64(v[16:24])),
		CreatedMs: int64(binary.BigEndian.Uint64(v[24:32])),
		Reason:    string(v[32:]),
	}, nil
}

// rowKey returns the pool row key of e (its score already checked).
func rowKey(e PoolEntry) []byte {
	enc, _ := EncodeScore(e.Score)
	return poolKeyEnc(e.User, e.Source, enc, e.Pin)
}

// outranks reports whether a beats b as a pin's live entry: a higher score; on a tie, the
// smaller source.
func outranks(a, b PoolEntry) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Source < b.Source
}

// BestAcrossSources keeps each pin in only one of lists (each read with Top, one per source):
// the list where its entry outranks the others (a higher score; on a tie, the smaller source),
// as the pin's live entry is its best row across sources. Order within a list is kept.
func BestAcrossSources(lists [][]PoolEntry) [][]PoolEntry {
	best := map[ID]PoolEntry{}
	dup := false
	for _, l := range lists {
		for _, e := range l {
			if cur, ok := best[e.Pin]; ok {
				dup = true
				if !outranks(e, cur) {
					continue
				}
			}
			best[e.Pin] = e
		}
	}
	if !dup {
		return lists
	}
	out := make([][]PoolEntry, len(lists))
	for i, l := range lists {
		for _, e := range l {
			if b := best[e.Pin]; b.Source == e.Source && b.Score == e.Score {
				out[i] = append(out[i], e)
			}
		}
	}
	return out
}

func checkOptID(id ID, want Type, what string) error {
	if id == 0 {
		return nil
	}
	if err := id.Check(want); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// checkEntry validates e and canonicalises its score.
func checkEntry(e *PoolEntry) error {
	if err := e.User.Check(TypeUser); err != nil {
		return fmt.Errorf("pool entry user: %w", err)
	}
	if err := e.Pin.Check(TypePin); err != nil {
		return fmt.Errorf("pool entry pin: %w", err)
	}
	if e.Source == 0 {
		return fmt.Errorf("pool entry %d/%d: source 0", e.User, e.Pin)
	}
	if math.IsNaN(e.Score) {
		return fmt.Errorf("pool entry %d/%d: score NaN", e.User, e.Pin)
	}
	if e.Score == 0 {
		e.Score = 0
	}
	if err := checkOptID(e.Author, TypeUser, "pool entry author"); err != nil {
		return err
	}
	if err := checkOptID(e.Board, TypeBoard, "pool entry board"); err != nil {
		return err
	}
	if err := checkOptID(e.Interest, TypeInterest, "pool entry interest"); err != nil {
		return err
	}
	if len(e.Reason) > MaxReasonLen {
		return fmt.Errorf("pool entry %d/%d: reason is %d bytes, over %d", e.User, e.Pin, len(e.Reason), MaxReasonLen)
	}
	return nil
}

// rows validates es and returns their pool rows, key-sorted, one per (user, source, pin) (the
// best score of the batch), and the entries they hold. Invalid input fails the whole batch.
func (p *Pools) rows(es []PoolEntry) ([]Mutation, []PoolEntry, error) {
	type usp struct {
		user, pin ID
		src       Source
	}
	nowMs := p.now().UnixMilli()
	best := make(map[usp]int, len(es))
	batch := make([]PoolEntry, 0, len(es))
	for _, e := range es {
		if err := checkEntry(&e); err != nil {
			return nil, nil, err
		}
		if e.CreatedMs == 0 {
			e.CreatedMs = nowMs
		}
		k := usp{e.User, e.Pin, e.Source}
		if i, ok := best[k]; ok {
			if e.Score > batch[i].Score {
				batch[i] = e
			}
			continue
		}
		best[k] = len(batch)
		batch = append(batch, e)
	}
	// Every key and value in one slab: a fanout batch is hundreds of rows, and two allocations
	// a row were a good part of the fanout's garbage. Each is capped where it ends.
	size := 0
	for _, e := range batch {
		size += poolKeyLen + rowValMin + len(e.Reason)
	}
	slab := make([]byte, 0, size)
	muts := make([]Mutation, len(batch))
	for i, e := range batch {
		enc, _ := EncodeScore(e.Score)
		at := len(slab)
		slab = appendPoolKey(slab, e.User, e.Source, enc, e.Pin)
		mid := len(slab)
		slab = appendRowValue(slab, e)
		muts[i] = Mutation{Key: slab[at:mid:mid], Value: slab[mid:len(slab):len(slab)]}
	}
	slices.SortFunc(muts, func(a, b Mutation) int { return bytes.Compare(a.Key, b.Key) })
	return muts, batch, nil
}

// Insert adds entries to their users' pools: one blind, key-sorted batch of pool rows, nothing
// read. Writing the same entry twice writes the same row (a retried batch changes nothing); a
// pin that reaches a user twice keeps its best row as its live entry (readers skip the others;
// Upkeep deletes them). A pin that left the user's pools (taken, removed, forgotten: it has a
// tombstone) is not put back: readers leave out its rows. It returns the number of rows written
// (one per user, source and pin of the batch). Invalid input (bad IDs, NaN, source 0) fails the
// whole batch before any write.
func (p *Pools) Insert(ctx context.Context, es []PoolEntry) (int, error) {
	muts, _, err := p.rows(es)
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	if len(muts) == 0 {
		return 0, nil
	}
	if err := p.t.Apply(ctx, muts); err != nil {
		return 0, fmt.Errorf("insert %d rows: %w", len(muts), err)
	}
	return len(muts), nil
}

// Take claims the pins of es for user: each pin is won by exactly one caller across concurrent
// Takes, Removes and Forgets (the one that creates its tombstone). An entry names the row it was
// read from (its Source and Score, as Top returns it): the pin is won only while that row is
// there. An entry with Source 0 names the pin's live entry, found by reading user's whole pools
// (slow: for tests and tools). Entries whose User is set must name user. It returns the stored
// entries this call won, in the order of es. A pin taken leaves a tombstone, so a later Insert
// of it for user is ignored; Restore gives it back.
func (p *Pools) Take(ctx context.Context, user ID, es []PoolEntry) ([]PoolEntry, error) {
	if err := user.Check(TypeUser); err != nil {
		return nil, fmt.Errorf("take: %w", err)
	}
	var lookup bool
	for _, e := range es {
		if e.User != 0 && e.User != user {
			return nil, fmt.Errorf("take for %d: entry of user %d", user, e.User)
		}
		if err := e.Pin.Check(TypePin); err != nil {
			return nil, fmt.Errorf("take for %d: %w", user, err)
		}
		if e.Source == 0 {
			lookup = true
		} else if math.IsNaN(e.Score) {
			return nil, fmt.Errorf("take for %d: pin %d: score NaN", user, e.Pin)
		}
	}
	var v *poolView
	if lookup {
		var err error
		if v, err = p.view(ctx, user); err != nil {
			return nil, fmt.Errorf("take for %d: %w", user, err)
		}
	}
	pins := make([]PoolEntry, 0, len(es))
	seen := make(map[ID]bool, len(es))
	for _, e := range es {
		if seen[e.Pin] {
			continue
		}
		seen[e.Pin] = true
		if e.Source == 0 {
			le, ok := v.liveEntry(e.Pin)
			if !ok {
				continue
			}
			e = le
		}
		e.User = user
		pins = append(pins, e)
	}
	out, err := p.claim(ctx, user, pins)
	if err != nil {
		return out, fmt.Errorf("take for %d: %w", user, err)
	}
	return out, nil
}

// claim takes each of es (distinct pins of user, each naming its row): one read of their rows
// and tombstones, one batched compare-and-set creating the "taken" tombstones (one synced
// commit on the embedded backend, whatever the number of pins), one batch deleting the rows
// won. A compare-and-set that errs is settled by re-reading: a tombstone holding this call's
// nonce was won.
func (p *Pools) claim(ctx context.Context, user ID, es []PoolEntry) ([]PoolEntry, error) {
	if len(es) == 0 {
		return nil, nil
	}
	keys := make([][]byte, 2*len(es))
	for i, e := range es {
		keys[i] = rowKey(e)
		keys[len(es)+i] = goneKey(user, e.Pin)
	}
	vals, err := GetMany(ctx, p.t, keys)
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	tomb := tombstone(tombTaken, p.now().UnixMilli(), rand.Uint64())
	got := make([]PoolEntry, len(es))
	var conds []Cond
	var at []int
	for i := range es {
		row, gone := vals[i], vals[len(es)+i]
		if len(row) < rowValMin || isTomb(gone) {
			continue // not in the pools (any more), or taken or removed already
		}
		e, err := decodeRow(user, keys[i], row)
		if err != nil {
			continue
		}
		got[i] = e
		conds = append(conds, Cond{Key: keys[len(es)+i], Expected: gone, Value: tomb})
		at = append(at, i)
	}
	ok, cerr := CheckAndSetMany(ctx, p.t, conds)
	if cerr != nil {
		// Some may have landed: ours are the rows that now hold this call's tombstone.
		ok = make([]bool, len(conds))
		ks := make([][]byte, len(at))
		for j, i := range at {
			ks[j] = keys[len(es)+i]
		}
		now, gerr := GetMany(ctx, p.t, ks)
		if gerr != nil {
			return nil, fmt.Errorf("claim: %w", cerr)
		}
		for j := range at {
			ok[j] = bytes.Equal(now[j], tomb)
		}
	}
	var out []PoolEntry
	var dels []Mutation
	for j, i := range at {
		if ok[j] {
			out = append(out, got[i])
			dels = append(dels, Mutation{Key: keys[i], Delete: true})
		}
	}
	if len(dels) > 0 {
		// The claim stands even if this fails or is lost in a crash: rows under a tombstone are
		// dead to readers. So the deletes need not wait for their own fsync.
		_ = ApplyLazy(ctx, p.t, dels)
	}
	if cerr != nil {
		return out, fmt.Errorf("claim: %w", cerr)
	}
	return out, nil
}

// Remove drops pins from all of user's pools for good: like Forget. It returns how many pins it
// marked.
func (p *Pools) Remove(ctx context.Context, user ID, pins []ID) (int, error) {
	n, err := p.forget(ctx, user, pins)
	if err != nil {
		return n, fmt.Errorf("remove: %w", err)
	}
	return n, nil
}

// Forget drops pins from all of user's pools and remembers them, present or not: each (user,
// pin) gets a forgotten tombstone, written blind in one batch, so no later Insert or Restore
// puts the pin in user's pools until Expire drops the tombstone (its rows are dead to readers,
// and deleted by them). Use it when the user has the pin already (they saved it) or the pin is
// gone. It returns how many pins it marked.
func (p *Pools) Forget(ctx context.Context, user ID, pins []ID) (int, error) {
	n, err := p.forget(ctx, user, pins)
	if err != nil {
		return n, fmt.Errorf("forget: %w", err)
	}
	return n, nil
}

func (p *Pools) forget(ctx context.Context, user ID, pins []ID) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, err
	}
	for _, pin := range pins {
		if err := pin.Check(TypePin); err != nil {
			return 0, fmt.Errorf("for %d: %w", user, err)
		}
	}
	// No nonce: a blind write needs none, and the same call again writes the same bytes.
	tomb := tombstone(tombForgotten, p.now().UnixMilli(), 0)
	seen := make(map[ID]bool, len(pins))
	var muts []Mutation
	for _, pin := range pins {
		if !seen[pin] {
			seen[pin] = true
			muts = append(muts, Mutation{Key: goneKey(user, pin), Value: tomb})
		}
	}
	if len(muts) == 0 {
		return 0, nil
	}
	sort.Slice(muts, func(i, j int) bool { return bytes.Compare(muts[i].Key, muts[j].Key) < 0 })
	if err := p.t.Apply(ctx, muts); err != nil {
		return 0, fmt.Errorf("%d/%d pins: %w", user, len(muts), err)
	}
	return len(muts), nil
}
