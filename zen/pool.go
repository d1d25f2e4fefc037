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
