package zen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
)

// ShardRange maps the shards From..To (inclusive) to a named store. New objects are only placed
// on shards of an Open range; closed ranges keep serving the objects they already hold. A Fenced
// range is being moved to another store (zen/zenmove): its reads still go to Store, its writes
// wait for the fence to lift (a few seconds at most) and then go wherever the map says.
type ShardRange struct {
	From   uint16 `json:"from"`
	To     uint16 `json:"to"`
	Store  string `json:"store"`
	Open   bool   `json:"open"`
	Fenced bool   `json:"fenced,omitempty"`
}

// ShardMap maps shard ranges to named stores (clusters) with open flags. Capacity moves by
// moving whole ranges, never single rows. A ShardMap is immutable once built and safe for
// concurrent use.
type ShardMap struct {
	ranges []ShardRange // sorted by From, non-overlapping
	open   []uint16     // every open shard, ascending
}

// shardMapFile is the JSON form: {"ranges": [{"from":0,"to":2047,"store":"pools-a","open":true}]}.
type shardMapFile struct {
	Ranges []ShardRange `json:"ranges"`
}

// DefaultShardMap returns shards 0–4095 on store "default", all open.
func DefaultShardMap() *ShardMap {
	m := &ShardMap{ranges: []ShardRange{{From: 0, To: 4095, Store: "default", Open: true}}}
	m.open = make([]uint16, 4096)
	for i := range m.open {
		m.open[i] = uint16(i)
	}
	return m
}

// NewShardMap validates ranges (From ≤ To, a store name, no overlaps, no gaps: the ranges cover
// shards 0 to the highest To without a hole, at least one open shard).
func NewShardMap(ranges []ShardRange) (*ShardMap, error) {
	rs := append([]ShardRange(nil), ranges...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].From < rs[j].From })
	m := &ShardMap{ranges: rs}
	for i, r := range rs {
		if r.From > r.To {
			return nil, fmt.Errorf("shard map: range %d–%d: from above to", r.From, r.To)
		}
		if r.Store == "" {
			return nil, fmt.Errorf("shard map: range %d–%d: no store name", r.From, r.To)
		}
		if i > 0 && rs[i-1].To >= r.From {
			return nil, fmt.Errorf("shard map: ranges %d–%d and %d–%d overlap", rs[i-1].From, rs[i-1].To, r.From, r.To)
		}
		switch {
		case i == 0 && r.From != 0:
			return nil, fmt.Errorf("shard map: gap: shards 0–%d are in no range", r.From-1)
		case i > 0 && int(rs[i-1].To)+1 != int(r.From):
			return nil, fmt.Errorf("shard map: gap: shards %d–%d are in no range", rs[i-1].To+1, r.From-1)
		}
		if r.Open {
			for s := int(r.From); s <= int(r.To); s++ {
				m.open = append(m.open, uint16(s))
			}
		}
	}
	if len(m.open) == 0 {
		return nil, errors.New("shard map: no open shard")
	}
	return m, nil
}

// ShardCount is the number of shards of a deployment: a shard map in use covers shards 0 to
// ShardCount-1 exactly (zen.ModShard hashes keys onto them, the default map opens them all).
const ShardCount = 4096

// CheckComplete reports a map that does not cover shards 0 to ShardCount-1 exactly: one that
// ends early leaves the last shards in no range (their rows would be routed by the last range,
// whatever it says), one that ends late names shards no key is on. NewShardMap already refuses
// gaps and overlaps inside the map; every map a process is to route by is checked with this too.
func (m *ShardMap) CheckComplete() error {
	switch h := int(m.HighestShard()); {
	case h < ShardCount-1:
		return fmt.Errorf("shard map: gap: shards %d–%d are in no range (a map covers shards 0–%d)", h+1, ShardCount-1, ShardCount-1)
	case h > ShardCount-1:
		return fmt.Errorf("shard map: shards %d–%d are past the last shard (a map covers shards 0–%d)", ShardCount, h, ShardCount-1)
	}
	return nil
}

// CheckStores reports the first range whose store is not among known: a map naming a store
// the process cannot reach is refused before it is used.
func (m *ShardMap) CheckStores(known ...string) error {
	ok := make(map[string]bool, len(known))
	for _, k := range known {
		ok[k] = true
	}
	for _, r := range m.ranges {
		if !ok[r.Store] {
			return fmt.Errorf("shard map: range %d–%d: unknown store %q (known: %v)", r.From, r.To, r.Store, known)
		}
	}
	return nil
}

// ParseShardMap decodes the JSON form of a shard map (see LoadShardMap) and validates it.
func ParseShardMap(b []byte) (*ShardMap, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f shardMapFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("shard map: %w", err)
	}
	return NewShardMap(f.Ranges)
}

// MarshalJSON encodes the map in the form ParseShardMap reads.
func (m *ShardMap) MarshalJSON() ([]byte, error) {
	return json.Marshal(shardMapFile{Ranges: m.ranges})
}

// Equal reports whether two maps have the same ranges.
func (m *ShardMap) Equal(o *ShardMap) bool {
	if m == nil || o == nil {
		return m == o
	}
	if len(m.ranges) != len(o.ranges) {
		return false
	}
	for i := range m.ranges {
		if m.ranges[i] != o.ranges[i] {
			return false
		}
	}
	return true
}

// LoadShardMap reads a JSON shard map file:
//
//	{"ranges": [{"from": 0, "to": 2047, "store": "pools-a", "open": false},
//	            {"from": 2048, "to": 4095, "store": "pools-b", "open": true}]}
//
// Unknown fields are refused so a typo does not silently close every shard.
func LoadShardMap(path string) (*ShardMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load shard map: %w", err)
	}
	m, err := ParseShardMap(b)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return m, nil
}

// Ranges returns a copy of the ranges, sorted by From.
func (m *ShardMap) Ranges() []ShardRange { return append([]ShardRange(nil), m.ranges...) }

// RangeFor returns the range holding shard, and false when no range covers it.
func (m *ShardMap) RangeFor(shard uint16) (ShardRange, bool) { return m.lookup(shard) }

// HighestShard returns the highest shard the map covers (the last range's To).
func (m *ShardMap) HighestShard() uint16 { return m.ranges[len(m.ranges)-1].To }

// With returns a new map in which the shards from..to (inclusive) carry the attributes fn sets on
// a copy of their range (fn must leave From and To alone); ranges cut by from or to are split,
// and neighbours left with equal attributes are merged. The result is validated like any map.
func (m *ShardMap) With(from, to uint16, fn func(r *ShardRange)) (*ShardMap, error) {
	if from > to {
		return nil, fmt.Errorf("shard map: range %d–%d: from above to", from, to)
	}
	if to > m.HighestShard() {
		return nil, fmt.Errorf("shard map: shards %d–%d: the map covers shards 0–%d only", from, to, m.HighestShard())
	}
	var out []ShardRange
	add := func(r ShardRange) {
		if n := len(out); n > 0 && sameAttrs(out[n-1], r) && int(out[n-1].To)+1 == int(r.From) {
			out[n-1].To = r.To
			return
		}
		out = append(out, r)
	}
	for _, r := range m.ranges {
		if r.To < from || r.From > to {
			add(r)
			continue
		}
		if r.From < from {
			head := r
			head.To = from - 1
			add(head)
		}
		mid := r
		mid.From, mid.To = max(r.From, from), min(r.To, to)
		fn(&mid)
		mid.From, mid.To = max(r.From, from), min(r.To, to)
		add(mid)
		if r.To > to {
			tail := r
			tail.From = to + 1
			add(tail)
		}
	}
	return NewShardMap(out)
}

func sameAttrs(a, b ShardRange) bool {
	return a.Store == b.Store && a.Open == b.Open && a.Fenced == b.Fenced
}

// ShardKeyRange returns the key range [start, stop) of the rows of shards from..to in every table
// whose keys lead with an ID or a shard base (objects, edges, counters, modshard, pools): an ID is
// shard<<46 | …, big-endian, so one shard range is one contiguous key range. The bounds are the
// smallest keys KeyShard places on from and on to+1 (trailing zero bytes trimmed, so even keys
// shorter than 8 bytes fall on the side KeyShard says); start is nil for shard 0 and stop is nil
// past shard 65535.
func ShardKeyRange(from, to uint16) (start, stop []byte) {
	start = shardBase(uint64(from))
	if int(to) < MaxShard {
		stop = shardBase(uint64(to) + 1)
	}
	return start, stop
}

// shardBase is the smallest key on shard s: s<<46 big-endian without trailing zero bytes (nil
// for shard 0).
func shardBase(s uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, s<<46)
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil
	}
	return b
}

// KeyShard returns the shard of a row key: bits 61–46 of its first 8 bytes read big-endian (a
// shorter key is padded with zero bytes), so shards grow with keys in bytewise order. A key
// whose top two bits are set is beyond every shard: it reports MaxShard+1 or more.
func KeyShard(key []byte) uint32 {
	var b [8]byte
	copy(b[:], key)
	return uint32(binary.BigEndian.Uint64(b[:]) >> 46)
}

// lookup returns the range holding shard.
func (m *ShardMap) lookup(shard uint16) (ShardRange, bool) {
	i := sort.Search(len(m.ranges), func(i int) bool { return m.ranges[i].To >= shard })
	if i < len(m.ranges) && m.ranges[i].From <= shard {
		return m.ranges[i], true
	}
	return ShardRange{}, false
}

// StoreFor returns the name of the store holding shard, or an error when no range covers it.
func (m *ShardMap) StoreFor(shard uint16) (string, error) {
	r, ok := m.lookup(shard)
	if !ok {
		return "", fmt.Errorf("shard %d: not in the shard map", shard)
	}
	return r.Store, nil
}

// IsOpen reports whether new objects may be placed on shard.
func (m *ShardMap) IsOpen(shard uint16) bool {
	r, ok := m.lookup(shard)
	return ok && r.Open
}

// OpenShards returns every open shard, ascending (a fresh slice).
func (m *ShardMap) OpenShards() []uint16 { return append([]uint16(nil), m.open...) }
