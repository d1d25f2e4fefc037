package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
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
	// StaleGrace is how old a pool row without a matching index row must be before Top deletes
	// it: younger ones may belong to an insert still in flight, and are only skipped.
	StaleGrace = time.Minute
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
//	pool row  user(8) | source(1, ≥1) | ^score(8) | pin(8) -> written-at ms (8)   (the sorted view)
//	index row user(8) | 0x00 | pin(8)                      -> source | score | author | board |
//	                                                          interest | created ms | reason
//	                                                       or a tombstone: 0x00 | kind | at ms | nonce
//
// The index row is the truth, one per (user, pin) across sources: it dedups, and Take claims a
// pin by replacing it with a tombstone by compare-and-set (the one winner). A pool row whose
// index row does not name the same source and score is stale; Top skips it. Writes go pool row
// first, index row second, old pool row last, so a crash between them leaves only stale rows: a
// pin is never shown twice and a better score is never lost.
//
// A tombstone remembers that the pin left the user's pools on purpose, so a late or repeated
// job cannot put it back: Insert ignores a (user, pin) whose index row is a tombstone. Take
// leaves a "taken" tombstone (the pin went to a chunk; Restore may give it back), Remove and
// Forget a "forgotten" one (nothing puts it back). Every reader treats a tombstone as an absent
// entry; Expire deletes tombstones once they are older than the pool TTL (or the tombstone TTL,
// WithTombstoneTTL), and DeleteUser deletes them with the rest. Pools is safe for concurrent use.
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

const (
	poolKeyLen  = 8 + 1 + 8 + 8
	indexKeyLen = 8 + 1 + 8
	indexValMin = 1 + 8 + 8 + 8 + 8 + 8
	tombLen     = 1 + 1 + 8 + 8 // a tombstone: 0x00 | kind | at ms | nonce
)

// tombKind says why a pin left a user's pools.
type tombKind byte

const (
	tombTaken     tombKind = 1 // taken for a chunk: Restore may put it back
	tombForgotten tombKind = 2 // removed for good (saved by the user, deleted): nothing puts it back
)

// tombstone is the index value that claims a pin out of the pools: source byte 0 (no entry), why,
// when (the writer's clock, for Expire), and a nonce naming the claiming call, so a call whose
// compare-and-set returned an error can re-read the row and recognise its own write.
func tombstone(kind tombKind, atMs int64, nonce uint64) []byte {
	v := make([]byte, 0, tombLen)
	v = append(v, 0, byte(kind))
	v = binary.BigEndian.AppendUint64(v, uint64(atMs))
	return binary.BigEndian.AppendUint64(v, nonce)
}

// isTomb reports whether an index value is a tombstone (no entry). Any value led by 0x00 is one:
// an older 9-byte claim marker (0x00 | nonce) left by a crash reads as taken, at time 0.
func isTomb(v []byte) bool { return len(v) > 0 && v[0] == 0 }

// tombInfo decodes a tombstone; unknown shapes read as taken at time 0 (Expire drops them).
func tombInfo(v []byte) (tombKind, int64) {
	if len(v) != tombLen {
		return tombTaken, 0
	}
	return tombKind(v[1]), int64(binary.BigEndian.Uint64(v[2:10]))
}

// replaceable reports whether an insert of index value v may overwrite old: an absent row, a
// worse entry, or (restore only) a taken tombstone. An unreadable old value is left alone.
func replaceable(old, v []byte, restore bool) bool {
	switch {
	case old == nil:
		return true
	case isTomb(old):
		kind, _ := tombInfo(old)
		return restore && kind == tombTaken
	case len(old) < indexValMin:
		return false
	}
	return better(v, old)
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
	k := make([]byte, 0, poolKeyLen)
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

func indexKey(user, pin ID) []byte {
	k := make([]byte, 0, indexKeyLen)
	k = appendID(k, user)
	k = append(k, 0)
	return appendID(k, pin)
}

func userPrefix(user ID) []byte { return appendID(make([]byte, 0, 8), user) }

func sourcePrefix(user ID, src Source) []byte { return append(userPrefix(user), byte(src)) }

// indexValue encodes an entry (its score already checked).
func indexValue(e PoolEntry) []byte {
	enc, _ := EncodeScore(e.Score)
	v := make([]byte, 0, indexValMin+len(e.Reason))
	v = append(v, byte(e.Source))
	v = append(v, enc[:]...)
	v = appendID(v, e.Author)
	v = appendID(v, e.Board)
	v = appendID(v, e.Interest)
	v = binary.BigEndian.AppendUint64(v, uint64(e.CreatedMs))
	return append(v, e.Reason...)
}

func decodeIndex(user, pin ID, v []byte) (PoolEntry, error) {
	if len(v) < indexValMin || v[0] == 0 {
		return PoolEntry{}, fmt.Errorf("pool index %d/%d: malformed value (%d bytes)", user, pin, len(v))
	}
	score, err := DecodeScore(v[1:9])
	if err != nil {
		return PoolEntry{}, fmt.Errorf("pool index %d/%d: %w", user, pin, err)
	}
	return PoolEntry{
		User: user, Source: Source(v[0]), Score: score, Pin: pin,
		Author:    ID(binary.BigEndian.Uint64(v[9:17])),
		Board:     ID(binary.BigEndian.Uint64(v[17:25])),
		Interest:  ID(binary.BigEndian.Uint64(v[25:33])),
		CreatedMs: int64(binary.BigEndian.Uint64(v[33:41])),
		Reason:    string(v[41:]),
	}, nil
}

// poolKeyOfIndex returns the pool row key the index value v points at.
func poolKeyOfIndex(user, pin ID, v []byte) []byte {
	var enc [8]byte
	copy(enc[:], v[1:9])
	return poolKeyEnc(user, Source(v[0]), enc, pin)
}

// better reports whether index value a outranks b (higher score; on a tie, neither does).
func better(a, b []byte) bool { return bytes.Compare(a[1:9], b[1:9]) > 0 }

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

func (p *Pools) rowValue() []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(p.now().UnixMilli()))
}

// Insert adds entries to their users' pools. Per (user, pin) across sources the better score
// wins (an equal score keeps the entry already there), so inserting the same entry twice is the
// same as once, and a retried batch changes nothing. A pin that left the user's pools (taken,
// removed, forgotten: its index row is a tombstone) is not put back: a late or repeated job is
// harmless. It returns how many entries were added or improved. Invalid input (bad IDs, NaN,
// source 0) fails the whole batch before any write.
func (p *Pools) Insert(ctx context.Context, es []PoolEntry) (int, error) {
	n, err := p.insert(ctx, es, false)
	if err != nil {
		return n, fmt.Errorf("insert: %w", err)
	}
	return n, nil
}

// Restore puts entries back into the pools after a Take whose chunk was not delivered: like
// Insert, and it also replaces a "taken" tombstone (never a forgotten one: a pin the user saved
// or that was deleted meanwhile stays out). Only the taker of the pins should call it.
func (p *Pools) Restore(ctx context.Context, es []PoolEntry) (int, error) {
	n, err := p.insert(ctx, es, true)
	if err != nil {
		return n, fmt.Errorf("restore: %w", err)
	}
	return n, nil
}

func (p *Pools) insert(ctx context.Context, es []PoolEntry, restore bool) (int, error) {
	if len(es) == 0 {
		return 0, nil
	}
	type pk struct{ user, pin ID }
	nowMs := p.now().UnixMilli()
	best := make(map[pk]int, len(es))
	batch := make([]PoolEntry, 0, len(es))
	for _, e := range es {
		if err := checkEntry(&e); err != nil {
			return 0, err
		}
		if e.CreatedMs == 0 {
			e.CreatedMs = nowMs
		}
		k := pk{e.User, e.Pin}
		if i, ok := best[k]; ok {
			if e.Score > batch[i].Score {
				batch[i] = e
			}
			continue
		}
		best[k] = len(batch)
		batch = append(batch, e)
	}
	keys := make([][]byte, len(batch))
	for i, e := range batch {
		keys[i] = indexKey(e.User, e.Pin)
	}
	olds, err := GetMany(ctx, p.t, keys)
	if err != nil {
		return 0, fmt.Errorf("read index: %w", err)
	}
	// Keep only entries that beat what is stored; write their pool rows first.
	rv := p.rowValue()
	var cands []indexClaim
	var puts []Mutation
	for i, e := range batch {
		v := indexValue(e)
		if !replaceable(olds[i], v, restore) {
			continue // something at least as good, a tombstone (or unreadable) is stored
		}
		c := indexClaim{user: e.User, pin: e.Pin, key: keys[i], old: olds[i], val: v, row: poolKeyOfIndex(e.User, e.Pin, v)}
		cands = append(cands, c)
		puts = append(puts, Mutation{Key: c.row, Value: rv})
	}
	if len(cands) == 0 {
		return 0, nil
	}
	if err := p.t.Apply(ctx, puts); err != nil {
		return 0, fmt.Errorf("write pool rows: %w", err)
	}
	won, dels, err := p.claimIndexes(ctx, cands, restore)
	n := 0
	for _, w := range won {
		if w {
			n++
		}
	}
	if err != nil {
		return n, err
	}
	if len(dels) > 0 {
		if err := p.t.Apply(ctx, dels); err != nil {
			return n, fmt.Errorf("delete replaced rows: %w", err)
		}
	}
	return n, nil
}

// indexClaim is one entry of an Insert whose pool row is written and whose index row is to move
// from old to val.
type indexClaim struct {
	user, pin ID
	key, old  []byte
	val, row  []byte
}

// claimIndexes moves each claim's index row from old to val by compare-and-set, all of them in
// one CheckAndSetMany per round when the table is a CondBatcher (else one CheckAndSet each, in
// parallel). A claim whose compare-and-set lost re-reads its row (one getAll for the round's
// losers) and tries again until val is stored or something it may not replace is (at least as
// good, or a tombstone: a concurrent Take wins over an Insert). It reports which claims won and
// returns the pool rows to delete: the replaced one of each winner, the own (already written) row
// of each loser.
func (p *Pools) claimIndexes(ctx context.Context, cands []indexClaim, restore bool) ([]bool, []Mutation, error) {
	won := make([]bool, len(cands))
	var dels []Mutation
	pending := make([]int, len(cands))
	for i := range pending {
		pending[i] = i
	}
	for range maxCASAttempts {
		conds := make([]Cond, len(pending))
		for j, i := range pending {
			c := cands[i]
			conds[j] = Cond{Key: c.key, Expected: c.old, Value: c.val}
		}
		ok, err := casAll(ctx, p.t, conds)
		if err != nil {
			return won, nil, fmt.Errorf("index: %w", err)
		}
		var lost []int
		for j, i := range pending {
			if !ok[j] {
				lost = append(lost, i)
				continue
			}
			won[i] = true
			c := cands[i]
			if len(c.old) >= indexValMin && !isTomb(c.old) {
				if oldRow := poolKeyOfIndex(c.user, c.pin, c.old); !bytes.Equal(oldRow, c.row) {
					dels = append(dels, Mutation{Key: oldRow, Delete: true})
				}
			}
		}
		if len(lost) == 0 {
			return won, dels, nil
		}
		keys := make([][]byte, len(lost))
		for j, i := range lost {
			keys[j] = cands[i].key
		}
		curs, err := GetMany(ctx, p.t, keys)
		if err != nil {
			return won, nil, fmt.Errorf("re-read index: %w", err)
		}
		pending = pending[:0]
		for j, i := range lost {
			c, cur := &cands[i], curs[j]
			if replaceable(cur, c.val, restore) {
				c.old = cur
				pending = append(pending, i)
				continue
			}
			// Something at least as good, or a tombstone, is stored: our row is dead unless it
			// is that entry's row.
			if !isTomb(cur) && len(cur) >= indexValMin && bytes.Equal(poolKeyOfIndex(c.user, c.pin, cur), c.row) {
				continue
			}
			dels = append(dels, Mutation{Key: c.row, Delete: true})
		}
		if len(pending) == 0 {
			return won, dels, nil
		}
	}
	return won, nil, fmt.Errorf("index still conflicting after %d attempts", maxCASAttempts)
}

// casAll runs conds with CheckAndSetMany when t is a CondBatcher, else with one CheckAndSet per
// condition, in parallel.
func casAll(ctx context.Context, t Table, conds []Cond) ([]bool, error) {
	if cb, ok := t.(CondBatcher); ok {
		out, err := cb.CheckAndSetMany(ctx, conds)
		if err == nil && len(out) != len(conds) {
			return nil, fmt.Errorf("check-and-set many: %d results for %d conditions", len(out), len(conds))
		}
		return out, err
	}
	out := make([]bool, len(conds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallel)
	for i, c := range conds {
		g.Go(func() error {
			ok, err := t.CheckAndSet(gctx, c.Key, c.Expected, c.Value)
			if err != nil {
				return fmt.Errorf("%x: %w", c.Key, err)
			}
			out[i] = ok
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// Top returns up to n of the best live entries of (user, src), best first, ties by smaller pin.
// Stale pool rows are skipped; those superseded by a better index row, or older than StaleGrace,
// are deleted on the way.
func (p *Pools) Top(ctx context.Context, user ID, src Source, n int) ([]PoolEntry, error) {
	if err := user.Check(TypeUser); err != nil {
		return nil, fmt.Errorf("top: %w", err)
	}
	if src == 0 {
		return nil, errors.New("top: source 0")
	}
	if n < 1 || n > MaxPoolPage {
		return nil, fmt.Errorf("top %d/%d: n %d out of range [1, %d]", user, src, n, MaxPoolPage)
	}
	prefix := sourcePrefix(user, src)
	start, stop := prefix, PrefixEnd(prefix)
	nowMs := p.now().UnixMilli()
	var out []PoolEntry
	for len(out) < n {
		want := n - len(out)
		rows, err := p.t.Scan(ctx, ScanOptions{Start: start, Stop: stop, Limit: want})
		if err != nil {
			return nil, fmt.Errorf("top %d/%d: %w", user, src, err)
		}
		keys := make([][]byte, len(rows))
		for i, r := range rows {
			if len(r.Key) != poolKeyLen {
				return nil, fmt.Errorf("top %d/%d: malformed row key %x", user, src, r.Key)
			}
			keys[i] = indexKey(user, ID(binary.BigEndian.Uint64(r.Key[17:])))
		}
		idx, err := GetMany(ctx, p.t, keys)
		if err != nil {
			return nil, fmt.Errorf("top %d/%d: %w", user, src, err)
		}
		var stale []Mutation
		for i, r := range rows {
			pin := ID(binary.BigEndian.Uint64(r.Key[17:]))
			v := idx[i]
			if !isTomb(v) && len(v) >= indexValMin && bytes.Equal(poolKeyOfIndex(user, pin, v), r.Key) {
				e, err := decodeIndex(user, pin, v)
				if err != nil {
					return nil, fmt.Errorf("top: %w", err)
				}
				out = append(out, e)
				continue
			}
			if p.deadRow(r, v, nowMs) {
				stale = append(stale, Mutation{Key: r.Key, Delete: true})
			}
		}
		if len(stale) > 0 {
			_ = p.t.Apply(ctx, stale) // best effort: stale rows are skipped either way
		}
		if len(rows) < want {
			break
		}
		start = keyAfter(rows[len(rows)-1].Key)
	}
	return out, nil
}

// deadRow reports whether a non-matching pool row can be deleted: the index row holds a score at
// least as good (the row's insert lost, or was replaced), or the row is older than StaleGrace
// (its insert crashed, or a claim crashed before deleting it). A row under a tombstone may belong
// to a Restore in flight, so only age makes it dead.
func (p *Pools) deadRow(r KV, idx []byte, nowMs int64) bool {
	if !isTomb(idx) && len(idx) >= indexValMin {
		var rowScore [8]byte
		for i := range rowScore {
			rowScore[i] = ^r.Key[9+i]
		}
		if bytes.Compare(idx[1:9], rowScore[:]) >= 0 {
			return true
		}
	}
	if len(r.Value) != 8 {
		return true
	}
	return nowMs-int64(binary.BigEndian.Uint64(r.Value)) > StaleGrace.Milliseconds()
}

// claim takes (user, pin) out of the pools: it replaces the index row by a tombstone of kind
// with compare-and-set (the one winner), then deletes the pool row. It returns the entry and true
// when this call won; false when the pin is not in the pools (or another caller claimed it
// first). A compare-and-set that errs after landing is recognised by the tombstone's nonce, so
// the pin is not lost to an ambiguous failure.
func (p *Pools) claim(ctx context.Context, user, pin ID, kind tombKind) (PoolEntry, bool, error) {
	key := indexKey(user, pin)
	tomb := tombstone(kind, p.now().UnixMilli(), rand.Uint64())
	for range maxCASAttempts {
		cur, err := p.t.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			return PoolEntry{}, false, nil
		}
		if err != nil {
			return PoolEntry{}, false, err
		}
		if isTomb(cur) {
			return PoolEntry{}, false, nil // taken or removed already
		}
		e, err := decodeIndex(user, pin, cur)
		if err != nil {
			return PoolEntry{}, false, err
		}
		won, err := p.t.CheckAndSet(ctx, key, cur, tomb)
		if err != nil {
			if now, gerr := p.t.Get(ctx, key); gerr != nil || !bytes.Equal(now, tomb) {
				return PoolEntry{}, false, err
			}
			won = true // our write landed
		}
		if !won {
			continue // re-scored or claimed meanwhile: look again
		}
		// The claim stands even if this delete fails: a leftover pool row is stale (Top skips
		// it, and deletes it after StaleGrace).
		_ = p.t.Apply(ctx, []Mutation{{Key: poolKeyOfIndex(user, pin, cur), Delete: true}})
		return e, true, nil
	}
	return PoolEntry{}, false, fmt.Errorf("claim %d/%d: still conflicting after %d attempts", user, pin, maxCASAttempts)
}

// Take claims the pins of es (from any source) for user: each pin is won by exactly one caller
// across concurrent Takes, Removes and trims. It returns the stored entries this call won, in the
// order of es. Entries whose User is set must name user. A pin taken leaves a tombstone, so a
// later Insert of it for user is ignored; Restore gives it back.
func (p *Pools) Take(ctx context.Context, user ID, es []PoolEntry) ([]PoolEntry, error) {
	return p.take(ctx, user, es, tombTaken)
}

func (p *Pools) take(ctx context.Context, user ID, es []PoolEntry, kind tombKind) ([]PoolEntry, error) {
	if err := user.Check(TypeUser); err != nil {
		return nil, fmt.Errorf("take: %w", err)
	}
	for _, e := range es {
		if e.User != 0 && e.User != user {
			return nil, fmt.Errorf("take for %d: entry of user %d", user, e.User)
		}
		if err := e.Pin.Check(TypePin); err != nil {
			return nil, fmt.Errorf("take for %d: %w", user, err)
		}
	}
	pins := make([]ID, 0, len(es))
	seen := make(map[ID]bool, len(es))
	for _, e := range es {
		if !seen[e.Pin] {
			seen[e.Pin] = true
			pins = append(pins, e.Pin)
		}
	}
	return p.claimAll(ctx, user, pins, kind)
}

// claimAll is claim for many pins at once: one read of their index rows, one batched
// compare-and-set of the tombstones (one synced commit on the embedded backend, whatever the
// number of pins), one batch deleting the winners' pool rows. A pin whose compare-and-set lost
// (re-scored or claimed meanwhile) falls back to claim, which looks again. It returns the
// entries won, in the order of pins. After an error, the entries won so far are returned with
// it (a batch whose outcome is unknown is settled by re-reading: a row holding this call's
// tombstone was won).
func (p *Pools) claimAll(ctx context.Context, user ID, pins []ID, kind tombKind) ([]PoolEntry, error) {
	if len(pins) == 0 {
		return nil, nil
	}
	keys := make([][]byte, len(pins))
	for i, pin := range pins {
		keys[i] = indexKey(user, pin)
	}
	curs, err := GetMany(ctx, p.t, keys)
	if err != nil {
		return nil, fmt.Errorf("take %d: read index: %w", user, err)
	}
	tomb := tombstone(kind, p.now().UnixMilli(), rand.Uint64())
	got := make([]PoolEntry, len(pins))
	var conds []Cond
	var at []int // conds[j] is pins[at[j]]
	for i, cur := range curs {
		if cur == nil || isTomb(cur) {
			continue // not in the pools, or taken or removed already
		}
		e, err := decodeIndex(user, pins[i], cur)
		if err != nil {
			return nil, fmt.Errorf("take %d: %w", user, err)
		}
		got[i] = e
		conds = append(conds, Cond{Key: keys[i], Expected: cur, Value: tomb})
		at = append(at, i)
	}
	won := make([]bool, len(pins))
	ok, err := casAll(ctx, p.t, conds)
	if err != nil {
		// Some may have landed: ours are the rows that now hold this call's tombstone.
		now, gerr := GetMany(ctx, p.t, keys)
		if gerr != nil {
			return nil, fmt.Errorf("take %d: %w", user, err)
		}
		ok = make([]bool, len(conds))
		for j, i := range at {
			ok[j] = bytes.Equal(now[i], tomb)
		}
		out, _ := p.finishClaims(ctx, user, pins, got, won, at, ok, curs, kind, false)
		return out, fmt.Errorf("take %d: %w", user, err)
	}
	return p.finishClaims(ctx, user, pins, got, won, at, ok, curs, kind, true)
}

// finishClaims deletes the pool rows of the compare-and-sets that won (best effort, as in
// claim: a leftover pool row is stale), retries the lost ones one by one with claim when retry
// is set, and returns the entries won in the order of pins.
func (p *Pools) finishClaims(ctx context.Context, user ID, pins []ID, got []PoolEntry, won []bool, at []int, ok []bool, curs [][]byte, kind tombKind, retry bool) ([]PoolEntry, error) {
	var dels []Mutation
	var lost []int
	for j, i := range at {
		if ok[j] {
			won[i] = true
			dels = append(dels, Mutation{Key: poolKeyOfIndex(user, pins[i], curs[i]), Delete: true})
		} else {
			lost = append(lost, i)
		}
	}
	if len(dels) > 0 {
		_ = p.t.Apply(ctx, dels)
	}
	var err error
	if retry {
		for _, i := range lost {
			e, w, cerr := p.claim(ctx, user, pins[i], kind)
			if cerr != nil {
				err = fmt.Errorf("take %d/%d: %w", user, pins[i], cerr)
				break
			}
			if w {
				got[i], won[i] = e, true
			}
		}
	}
	var out []PoolEntry
	for i := range pins {
		if won[i] {
			out = append(out, got[i])
		}
	}
	return out, err
}

// Remove drops pins from all of user's pools; it returns how many were present. Each pin
// present leaves a forgotten tombstone (later Inserts and Restores of it are ignored); an absent
// pin is left absent (Forget remembers those too).
func (p *Pools) Remove(ctx context.Context, user ID, pins []ID) (int, error) {
	es := make([]PoolEntry, len(pins))
	for i, pin := range pins {
		es[i] = PoolEntry{User: user, Pin: pin}
	}
	got, err := p.take(ctx, user, es, tombForgotten)
	if err != nil {
		return len(got), fmt.Errorf("remove: %w", err)
	}
	return len(got), nil
}

// Forget drops pins from all of user's pools and remembers them, present or not: each (user,
// pin) gets a forgotten tombstone, so no later Insert or Restore puts the pin in user's pools
// until Expire drops the tombstone. Use it when the user has the pin already (they saved it). It
// returns how many were present.
func (p *Pools) Forget(ctx context.Context, user ID, pins []ID) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("forget: %w", err)
	}
	for _, pin := range pins {
		if err := pin.Check(TypePin); err != nil {
			return 0, fmt.Errorf("forget for %d: %w", user, err)
		}
	}
	n := 0
	seen := make(map[ID]bool, len(pins))
	for _, pin := range pins {
		if seen[pin] {
			continue
		}
		seen[pin] = true
		was, err := p.forget(ctx, user, pin)
		if err != nil {
			return n, fmt.Errorf("forget %d/%d: %w", user, pin, err)
		}
		if was {
			n++
		}
	}
	return n, nil
}

// forget sets (user, pin)'s index row to a forgotten tombstone by compare-and-set from whatever
// is there (an entry, nothing, a taken tombstone), deleting the entry's pool row when it
// replaced one. It reports whether it replaced a live entry.
func (p *Pools) forget(ctx context.Context, user, pin ID) (bool, error) {
	key := indexKey(user, pin)
	tomb := tombstone(tombForgotten, p.now().UnixMilli(), rand.Uint64())
	for range maxCASAttempts {
		cur, err := p.t.Get(ctx, key)
		if errors.Is(err, ErrNotFound) {
			cur = nil
		} else if err != nil {
			return false, err
		}
		if isTomb(cur) {
			if kind, _ := tombInfo(cur); kind == tombForgotten {
				return false, nil
			}
		}
		won, err := p.t.CheckAndSet(ctx, key, cur, tomb)
		if err != nil {
			if now, gerr := p.t.Get(ctx, key); gerr != nil || !bytes.Equal(now, tomb) {
				return false, err
			}
			won = true // our write landed
		}
		if !won {
			continue
		}
		if cur == nil || isTomb(cur) || len(cur) < indexValMin {
			return false, nil
		}
		// Best effort, as in claim: a leftover pool row is stale.
		_ = p.t.Apply(ctx, []Mutation{{Key: poolKeyOfIndex(user, pin, cur), Delete: true}})
		return true, nil
	}
	return false, fmt.Errorf("still conflicting after %d attempts", maxCASAttempts)
}

// entries returns the live entries of user (src 0 = every source), read from the index rows.
func (p *Pools) entries(ctx context.Context, user ID, src Source) ([]PoolEntry, error) {
	es, _, err := p.index(ctx, user, src)
	return es, err
}

// index returns the live entries of user (src 0 = every source) and the tombstone rows.
func (p *Pools) index(ctx context.Context, user ID, src Source) ([]PoolEntry, []KV, error) {
	prefix := append(userPrefix(user), 0)
	start, stop := prefix, PrefixEnd(prefix)
	var out []PoolEntry
	var tombs []KV
	for {
		rows, err := p.t.Scan(ctx, ScanOptions{Start: start, Stop: stop, Limit: 1000})
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			if len(r.Key) != indexKeyLen {
				return nil, nil, fmt.Errorf("malformed index key %x", r.Key)
			}
			if isTomb(r.Value) {
				tombs = append(tombs, r)
				continue
			}
			e, err := decodeIndex(user, ID(binary.BigEndian.Uint64(r.Key[9:])), r.Value)
			if err != nil {
				return nil, nil, err
			}
			if src == 0 || e.Source == src {
				out = append(out, e)
			}
		}
		if len(rows) < 1000 {
			return out, tombs, nil
		}
		start = keyAfter(rows[len(rows)-1].Key)
	}
}

// removeEntries claims each entry's pin (only if its index row is still the one read) and
// counts the wins.
func (p *Pools) removeEntries(ctx context.Context, user ID, es []PoolEntry) (int, error) {
	n := 0
	var dels []Mutation
	for _, e := range es {
		v := indexValue(e)
		won, err := p.t.CheckAndSet(ctx, indexKey(user, e.Pin), v, nil)
		if err != nil {
			return n, err
		}
		if won {
			n++
			dels = append(dels, Mutation{Key: poolKeyOfIndex(user, e.Pin, v), Delete: true})
		}
		if len(dels) >= 1000 {
			if err := p.t.Apply(ctx, dels); err != nil {
				return n, err
			}
			dels = dels[:0]
		}
	}
	if len(dels) > 0 {
		if err := p.t.Apply(ctx, dels); err != nil {
			return n, err
		}
	}
	return n, nil
}

// RemoveWhere drops the entries of (user, src) for which match is true (src 0 = every source);
// it returns how many it removed.
func (p *Pools) RemoveWhere(ctx context.Context, user ID, src Source, match func(PoolEntry) bool) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("remove where: %w", err)
	}
	es, err := p.entries(ctx, user, src)
	if err != nil {
		return 0, fmt.Errorf("remove where %d/%d: %w", user, src, err)
	}
	var drop []PoolEntry
	for _, e := range es {
		if match(e) {
			drop = append(drop, e)
		}
	}
	n, err := p.removeEntries(ctx, user, drop)
	if err != nil {
		return n, fmt.Errorf("remove where %d/%d: %w", user, src, err)
	}
	return n, nil
}

// Size returns the number of live entries of (user, src) (src 0 = every source).
func (p *Pools) Size(ctx context.Context, user ID, src Source) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("size: %w", err)
	}
	es, err := p.entries(ctx, user, src)
	if err != nil {
		return 0, fmt.Errorf("size %d/%d: %w", user, src, err)
	}
	return len(es), nil
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
	es, err := p.entries(ctx, user, src)
	if err != nil {
		return 0, fmt.Errorf("trim %d/%d: %w", user, src, err)
	}
	if len(es) <= keep {
		return 0, nil
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Score != es[j].Score {
			return es[i].Score > es[j].Score
		}
		return es[i].Pin < es[j].Pin
	})
	n, err := p.removeEntries(ctx, user, es[keep:])
	if err != nil {
		return n, fmt.Errorf("trim %d/%d: %w", user, src, err)
	}
	return n, nil
}

// Expire drops every entry of user (all sources) created before olderThanMs and returns how
// many. It also deletes user's tombstones written before olderThanMs (before now minus the
// tombstone TTL when one is set): a pin's entries are created no later than its tombstone, so
// with the pool TTL as the cut-off, a job re-inserting the pin after that is past the TTL itself
// (expired on arrival: skipped by readers, dropped by the next Expire). Tombstones are not
// counted.
func (p *Pools) Expire(ctx context.Context, user ID, olderThanMs int64) (int, error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, fmt.Errorf("expire: %w", err)
	}
	es, tombs, err := p.index(ctx, user, 0)
	if err != nil {
		return 0, fmt.Errorf("expire %d: %w", user, err)
	}
	var drop []PoolEntry
	for _, e := range es {
		if e.CreatedMs < olderThanMs {
			drop = append(drop, e)
		}
	}
	n, err := p.removeEntries(ctx, user, drop)
	if err != nil {
		return n, fmt.Errorf("expire %d: %w", user, err)
	}
	if err := p.expireTombs(ctx, user, tombs, olderThanMs); err != nil {
		return n, fmt.Errorf("expire %d: %w", user, err)
	}
	return n, nil
}

// Upkeep does in one read of user's index what Expire and then Trim of every source do:
// it drops the entries created before olderThanMs, then each source's lowest-scored entries
// beyond keep (ties: the larger pin goes first), then the tombstones Expire would delete. It
// returns the entries expired and trimmed.
func (p *Pools) Upkeep(ctx context.Context, user ID, keep int, olderThanMs int64) (expired, trimmed int, err error) {
	if err := user.Check(TypeUser); err != nil {
		return 0, 0, fmt.Errorf("upkeep: %w", err)
	}
	if keep < 0 {
		return 0, 0, fmt.Errorf("upkeep %d: keep %d: want keep ≥ 0", user, keep)
	}
	es, tombs, err := p.index(ctx, user, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("upkeep %d: %w", user, err)
	}
	var old []PoolEntry
	bySrc := map[Source][]PoolEntry{}
	for _, e := range es {
		if e.CreatedMs < olderThanMs {
			old = append(old, e)
			continue
		}
		bySrc[e.Source] = append(bySrc[e.Source], e)
	}
	if expired, err = p.removeEntries(ctx, user, old); err != nil {
		return expired, 0, fmt.Errorf("upkeep %d: expire: %w", user, err)
	}
	var over []PoolEntry
	for _, ses := range bySrc {
		if len(ses) <= keep {
			continue
		}
		sort.Slice(ses, func(i, j int) bool {
			if ses[i].Score != ses[j].Score {
				return ses[i].Score > ses[j].Score
			}
			return ses[i].Pin < ses[j].Pin
		})
		over = append(over, ses[keep:]...)
	}
	if trimmed, err = p.removeEntries(ctx, user, over); err != nil {
		return expired, trimmed, fmt.Errorf("upkeep %d: trim: %w", user, err)
	}
	if err := p.expireTombs(ctx, user, tombs, olderThanMs); err != nil {
		return expired, trimmed, fmt.Errorf("upkeep %d: %w", user, err)
	}
	return expired, trimmed, nil
}

// expireTombs deletes the tombstones of tombs written before olderThanMs (before now minus the
// tombstone TTL when one is set), each only if unchanged since read.
func (p *Pools) expireTombs(ctx context.Context, user ID, tombs []KV, olderThanMs int64) error {
	tombBefore := olderThanMs
	if p.tombTTL > 0 {
		tombBefore = p.now().Add(-p.tombTTL).UnixMilli()
	}
	for _, r := range tombs {
		if _, at := tombInfo(r.Value); at >= tombBefore {
			continue
		}
		// Only if unchanged: a Restore or a new Take may have replaced it meanwhile.
		if _, err := p.t.CheckAndSet(ctx, r.Key, r.Value, nil); err != nil {
			return fmt.Errorf("tombstone: %w", err)
		}
	}
	return nil
}

// DeleteUser removes all of user's pool and index rows (index rows first, so a crash part-way
// leaves only stale pool rows).
func (p *Pools) DeleteUser(ctx context.Context, user ID) error {
	if err := user.Check(TypeUser); err != nil {
		return fmt.Errorf("delete user pools: %w", err)
	}
	idx := append(userPrefix(user), 0)
	for _, rng := range [][2][]byte{{idx, PrefixEnd(idx)}, {userPrefix(user), PrefixEnd(userPrefix(user))}} {
		for {
			rows, err := p.t.Scan(ctx, ScanOptions{Start: rng[0], Stop: rng[1], Limit: 1000})
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
