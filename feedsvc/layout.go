package feedsvc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/smartfeed/smartfeed/internal/binrec"
	"github.com/smartfeed/smartfeed/zen"
)

// Row layout of the "feed" table (all integers big-endian). Every key begins with an 8-byte
// zen.ID whose top bits are the shard (docs/data-model.md §4), so on HBase, pre-split on shard boundaries
// (split key of shard s: BE64(s<<46)), a user's rows live in the region of the user's shard and
// feed writes spread across regions without salting:
//
//	user(8) | 'f'                       head version: writer's incarnation(8) | counter(8) (headcache.go)
//	user(8) | 'f' | ^seq(8)             a pending chunk: served, not yet materialized
//	user(8) | 'f' | ^seq(8) | pos(4)    one materialized item
//	user(8) | 'p' | pin(8)              pin index: where the pin sits, seq(8) | pos(4)
//	user(8) | 'c'                       reserved (a per-user counter; not written: see below)
//	user(8) | 'd' | chunk ID            chunk marker: seq(8) | state(1), 0 pending, 1 done
//	base(8) | 'q' | user(8) | seq(8)    pending-chunk index (live.go); base = BE64(shard<<46)
//
// base is the "ID" of type 0 and local 0 on the user's shard: it sorts before every real ID
// of the shard (whose type is at least 1), so the index of a shard is one contiguous range in
// that shard's region, apart from every user's rows.
//
// A forward scan of user | 'f' is newest chunk first, each chunk's items in the generator's
// order, and a pending chunk sorts just before the item rows its materialization writes.
// A chunk's sequence is taken from the clock when it is served (nextSeq; the pending row's
// compare-and-set makes it unique per user), so its place in the feed is fixed before the user
// sees it, and a cursor (seq, pos) is stable while newer chunks arrive. No counter row is
// written; the 'c' kind stays reserved, and Resync copies such rows like any other.
const (
	prefixFeed    = 'f'
	prefixPin     = 'p'
	prefixCounter = 'c'
	prefixDone    = 'd'

	// kindAt is the offset of the kind byte in a per-user key (after the user ID).
	kindAt = 8

	pendingKeyLen = 8 + 1 + 8
	itemKeyLen    = pendingKeyLen + 4

	itemVersion    = 1
	pendingVersion = 1
	// preparedVersion marks a pending row that holds a prepared chunk not yet served (see
	// Config.PrepareAfter); serving it rewrites the row with pendingVersion. Rows of this
	// version name no owner (a prepared chunk recorded with Owner 0), so no process shows
	// them as fresh.
	preparedVersion = 2
	// ownedPreparedVersion is preparedVersion with the owner (the incarnation of the process
	// that prepared it, which alone may show it as fresh) after the version byte.
	ownedPreparedVersion = 3
)

// errCorrupt marks a row that does not decode.
var errCorrupt = errors.New("corrupt feed row")

// Item is one pin of a chunk or of the materialized feed.
type Item struct {
	Pin    zen.ID
	Source zen.Source
	Score  float64
	Author zen.ID
	Board  zen.ID
	Reason string
}

// Chunk is a batch of new pins from the generator, in its order. ID is unique per user.
type Chunk struct {
	ID    string
	User  zen.ID
	Items []Item
}

// position is an item's place in a user's feed: its chunk's sequence and its index in the chunk.
type position struct {
	Seq uint64
	Pos uint32
}

// userPrefix returns user(8) | kind: the start of every key of one kind of the user's rows.
func userPrefix(kind byte, user zen.ID) []byte {
	b := make([]byte, 0, itemKeyLen)
	return append(binary.BigEndian.AppendUint64(b, uint64(user)), kind)
}

// FeedRange is the row range of the feed table a page of user's feed read from the top scans
// (start inclusive, stop exclusive): every pending-chunk and item row of the user's feed, newest
// chunk first. The bench gives it to HBase's own Java client to make GetFeed's reads.
func FeedRange(user zen.ID) (start, stop []byte) {
	start = userPrefix(prefixFeed, user)
	return start, zen.PrefixEnd(start)
}

// pageSpareRows are the rows a page's scan asks for beyond its size: room for the pending-chunk
// rows and repeated pins a page skips, so most pages take one scan.
const pageSpareRows = 8

// PageScanRows is how many rows a page of size items asks the store for in one scan.
func PageScanRows(size int) int { return size + pageSpareRows }

// keyKind returns the kind byte of a per-user key (0 for a key too short to have one).
func keyKind(k []byte) byte {
	if len(k) <= kindAt {
		return 0
	}
	return k[kindAt]
}

func pendingKey(user zen.ID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(userPrefix(prefixFeed, user), ^seq)
}

func itemKey(user zen.ID, p position) []byte {
	return binary.BigEndian.AppendUint32(pendingKey(user, p.Seq), p.Pos)
}

func pinKey(user, pin zen.ID) []byte {
	return binary.BigEndian.AppendUint64(userPrefix(prefixPin, user), uint64(pin))
}

func doneKey(user zen.ID, chunkID string) []byte {
	return append(userPrefix(prefixDone, user), chunkID...)
}

func encodePosition(p position) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, p.Seq), p.Pos)
}

// feedKey splits a key of the 'f' range: the position, and whether it is a pending chunk row.
func feedKey(k []byte) (pos position, pending bool, err error) {
	switch len(k) {
	case pendingKeyLen, itemKeyLen:
	default:
		return position{}, false, fmt.Errorf("%w: feed key of %d bytes", errCorrupt, len(k))
	}
	if k[kindAt] != prefixFeed {
		return position{}, false, fmt.Errorf("%w: feed key kind %q", errCorrupt, k[kindAt])
	}
	pos.Seq = ^binary.BigEndian.Uint64(k[kindAt+1 : pendingKeyLen])
	if len(k) == pendingKeyLen {
		return pos, true, nil
	}
	pos.Pos = binary.BigEndian.Uint32(k[pendingKeyLen:])
	return pos, false, nil
}

// appendItem encodes one item: pin, source, score, author, board, then the reason with a length.
func appendItem(b []byte, it Item) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(it.Pin))
	b = append(b, byte(it.Source))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(it.Score))
	b = binary.BigEndian.AppendUint64(b, uint64(it.Author))
	b = binary.BigEndian.AppendUint64(b, uint64(it.Board))
	b = binary.AppendUvarint(b, uint64(len(it.Reason)))
	return append(b, it.Reason...)
}

const maxReason = 1 << 12

// readItem reads one item as appendItem wrote it.
func readItem(r *binrec.Reader) Item {
	it := Item{
		Pin:    zen.ID(r.U64("pin")),
		Source: zen.Source(r.U8("source")),
		Score:  math.Float64frombits(r.U64("score")),
		Author: zen.ID(r.U64("author")),
		Board:  zen.ID(r.U64("board")),
	}
	it.Reason = r.String("reason", maxReason)
	return it
}

func encodeItem(it Item) []byte { return appendItem([]byte{itemVersion}, it) }

func decodeItem(b []byte) (Item, error) {
	r := binrec.New(b, errCorrupt)
	if v := r.U8("version"); r.Err() == nil && v != itemVersion {
		return Item{}, fmt.Errorf("%w: item version %d", errCorrupt, v)
	}
	it := readItem(&r)
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%w: %d trailing bytes after item", errCorrupt, r.Len()))
	}
	return it, r.Err()
}

// pendingChunk is the value of a pending row: the chunk as served, with each kept item's
// position in it (pins already in the feed were left out when it was served). A prepared
// chunk (Prepared) was recorded ahead of the visit and not served yet; ServedMs is then when it
// was prepared, and Owner the incarnation of the process that prepared it (0: none named).
type pendingChunk struct {
	ChunkID  string
	ServedMs int64
	Items    []Item
	Pos      []uint32
	Prepared bool
	Owner    uint64
}

const maxChunkItems = 1 << 12

func encodePending(c pendingChunk) []byte {
	b := []byte{pendingVersion}
	switch {
	case c.Prepared && c.Owner != 0:
		b[0] = ownedPreparedVersion
		b = binary.BigEndian.AppendUint64(b, c.Owner)
	case c.Prepared:
		b[0] = preparedVersion
	}
	b = binary.AppendUvarint(b, uint64(len(c.ChunkID)))
	b = append(b, c.ChunkID...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.ServedMs))
	b = binary.AppendUvarint(b, uint64(len(c.Items)))
	for i, it := range c.Items {
		b = binary.AppendUvarint(b, uint64(c.Pos[i]))
		b = appendItem(b, it)
	}
	return b
}

func decodePending(b []byte) (pendingChunk, error) {
	r := binrec.New(b, errCorrupt)
	var c pendingChunk
	switch v := r.U8("version"); {
	case r.Err() != nil:
	case v == preparedVersion:
		c.Prepared = true
	case v == ownedPreparedVersion:
		c.Prepared, c.Owner = true, r.U64("owner")
		if r.Err() == nil && c.Owner == 0 {
			return pendingChunk{}, fmt.Errorf("%w: prepared chunk owner 0", errCorrupt)
		}
	case v != pendingVersion:
		return pendingChunk{}, fmt.Errorf("%w: pending chunk version %d", errCorrupt, v)
	}
	c.ChunkID = r.String("chunk id", maxChunkID)
	c.ServedMs = int64(r.U64("served time"))
	n := r.Uvarint("item count", maxChunkItems)
	last := int64(-1)
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		pos := r.Uvarint("position", math.MaxUint32)
		if r.Err() == nil && int64(pos) <= last {
			return pendingChunk{}, fmt.Errorf("%w: positions not increasing", errCorrupt)
		}
		last = int64(pos)
		c.Pos = append(c.Pos, uint32(pos))
		c.Items = append(c.Items, readItem(&r))
	}
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%w: %d trailing bytes after pending chunk", errCorrupt, r.Len()))
	}
	if r.Err() != nil {
		return pendingChunk{}, r.Err()
	}
	return c, nil
}

// chunkMarker records a served chunk's sequence and whether it is materialized. It is written
// just before the pending row, so a marker without a pending row is a chunk already saved (or
// never recorded: a write that failed half way, whose chunk was given back).
type chunkMarker struct {
	seq  uint64
	done bool
}

func encodeMarker(m chunkMarker) []byte {
	b := binary.BigEndian.AppendUint64(nil, m.seq)
	if m.done {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeMarker(b []byte) (chunkMarker, error) {
	if len(b) != 9 || b[8] > 1 || binary.BigEndian.Uint64(b) == 0 {
		return chunkMarker{}, fmt.Errorf("%w: chunk marker of %d bytes", errCorrupt, len(b))
	}
	return chunkMarker{seq: binary.BigEndian.Uint64(b), done: b[8] == 1}, nil
}
