package zen

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Table names used by Graph.
const (
	TableObjects  = "objects"
	TableEdges    = "edges"
	TableCounters = "counters"
	TableModShard = "modshard"
)

// Limits on object and key sizes.
const (
	MaxObjectBytes = 1 << 20 // encoded JSON of one object
	MaxKindLen     = 64      // MapKey kind
	MaxKeyLen      = 1024    // MapKey key
	maxCASAttempts = 64      // Update / Delete retries under contention
)

// Counter row tags in the counters table (after the 8-byte ID).
const (
	counterAlloc byte = 'a' // per-(shard, type) local-ID allocator: key ID(shard, type, 0) | 'a'
	counterEdges byte = 'e' // per-(from, edge type) edge count: key from | 'e' | type
	// counterDeletions: the deletion log (deletions.go): key 0 | 'x' | n.
	counterDeletions byte = 'x'
	// counterDeletionSnapshot: the deletion log's snapshot (deletionsnap.go): key 0 | 'y' | ….
	counterDeletionSnapshot byte = 'y'
)

// Graph stores objects and edges over a Store: tables "objects" (id -> version|JSON), "edges"
// (edge and point rows, see AddEdge), "counters" (ID allocators, edge counts) and "modshard"
// (unique non-ID keys). It is safe for concurrent use.
type Graph struct {
	objects, edges, counters, modshard Table
	shards                             atomic.Pointer[ShardMap]
	now                                func() time.Time
	rr                                 atomic.Uint64 // round-robin position over open shards
	live                               *liveCache    // LiveMany's answers; nil: no cache
	// lazyEdgeSteps: edges and counters commit through one sequential log (SameLog), so
	// AddEdge writes its steps lazily and waits for durability once, at its last write;
	// lazyAlloc: counters and objects do, so Create's ID allocation is lazy, made durable by
	// the object's write.
	lazyEdgeSteps, lazyAlloc bool
}

// Object is one JSON object. Data["active"] == false means soft-deleted. Numbers in Data read
// back from the store are json.Number (so 64-bit IDs keep every digit); use DataID to read an ID.
type Object struct {
	ID      ID
	Version uint64
	Data    map[string]any
}

// NewGraph opens the graph tables of s. shards nil means DefaultShardMap; now nil means time.Now.
// New objects are spread round-robin over the open shards from a random start (SeedShards fixes
// the start for reproducible runs).
func NewGraph(ctx context.Context, s Store, shards *ShardMap, now func() time.Time) (*Graph, error) {
	if shards == nil {
		shards = DefaultShardMap()
	}
	if now == nil {
		now = time.Now
	}
	g := &Graph{now: now}
	g.shards.Store(shards)
	for _, tt := range []struct {
		name string
		dst  *Table
	}{{TableObjects, &g.objects}, {TableEdges, &g.edges}, {TableCounters, &g.counters}, {TableModShard, &g.modshard}} {
		t, err := s.Table(ctx, tt.name)
		if err != nil {
			return nil, fmt.Errorf("open table %s: %w", tt.name, err)
		}
		*tt.dst = t
	}
	g.lazyEdgeSteps = SameLog(g.edges, g.counters)
	g.lazyAlloc = SameLog(g.counters, g.objects)
	g.rr.Store(rand.Uint64())
	return g, nil
}

// SharesLog reports whether every table of the graph commits through t's sequential log
// (SameLog), so that a durable write to t makes every earlier write of the graph durable. A
// caller whose sequence of graph writes ends with a durable write to t (an event's outbox row)
// may then make the graph writes lazily (Lazily): a crash leaves a prefix of the sequence, as a
// crash between durable writes would. Tables behind a router are not Logged: false.
func (g *Graph) SharesLog(t Table) bool {
	for _, gt := range []Table{g.objects, g.edges, g.counters, g.modshard} {
		if !SameLog(gt, t) {
			return false
		}
	}
	return true
}

// SeedShards restarts the round-robin choice of open shards at position n (for reproducible
// tests: two graphs seeded alike place the same sequence of objects on the same shards).
func (g *Graph) SeedShards(n uint64) { g.rr.Store(n) }

// Shards returns the graph's current shard map.
func (g *Graph) Shards() *ShardMap { return g.shards.Load() }

// SetShards swaps the shard map atomically (a live map pushed from a file or ZooKeeper): calls
// that start afterwards place new objects by it. A nil map is ignored.
func (g *Graph) SetShards(m *ShardMap) {
	if m != nil {
		g.shards.Store(m)
	}
}

func objectKey(id ID) []byte { return appendID(make([]byte, 0, 8), id) }

func allocKey(shard uint16, t Type) []byte {
	return append(appendID(make([]byte, 0, 9), ID(uint64(shard)<<46|uint64(t)<<36)), counterAlloc)
}

// pickShard returns the shard for a new object: near's shard when near is set and that shard is
// open, else the next open shard round-robin.
func (g *Graph) pickShard(near ID) uint16 {
	m := g.shards.Load()
	if near != 0 && m.IsOpen(near.Shard()) {
		return near.Shard()
	}
	open := m.open
	return open[(g.rr.Add(1)-1)%uint64(len(open))]
}

// NewLocalID allocates the next local ID of (shard, t) from the store's atomic counter: unique
// across processes, increasing, starting at 1.
func (g *Graph) NewLocalID(ctx context.Context, shard uint16, t Type) (ID, error) {
	if t == 0 || t > MaxType {
		return 0, fmt.Errorf("allocate id: type %d out of range [1, %d]", t, MaxType)
	}
	n, err := g.counters.Increment(ctx, allocKey(shard, t), 1)
	if err != nil {
		return 0, fmt.Errorf("allocate id on shard %d type %d: %w", shard, t, err)
	}
	if n <= 0 || uint64(n) > MaxLocal {
		return 0, fmt.Errorf("allocate id on shard %d type %d: local ids exhausted (%d)", shard, t, n)
	}
	return NewID(shard, t, uint64(n))
}

// applyDefaults fills known fields that are absent: "active" = true.
func applyDefaults(data map[string]any) {
	if _, ok := data["active"]; !ok {
		data["active"] = true
	}
}

func isActive(data map[string]any) bool {
	a, ok := data["active"].(bool)
	return !ok || a // a non-bool "active" is treated as present-and-live
}

func encodeObject(version uint64, data map[string]any) ([]byte, error) {
	j, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	if len(j) > MaxObjectBytes {
		return nil, fmt.Errorf("object is %d bytes, over the %d limit", len(j), MaxObjectBytes)
	}
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(j)), version), j...), nil
}

func decodeObject(id ID, v []byte) (Object, error) {
	if len(v) < 8 {
		return Object{}, fmt.Errorf("object %d: value is %d bytes", id, len(v))
	}
	dec := json.NewDecoder(bytes.NewReader(v[8:]))
	dec.UseNumber()
	var data map[string]any
	if err := dec.Decode(&data); err != nil {
		return Object{}, fmt.Errorf("object %d: %w", id, err)
	}
	if data == nil {
		data = map[string]any{}
	}
	applyDefaults(data)
	return Object{ID: id, Version: binary.BigEndian.Uint64(v[:8]), Data: data}, nil
}

// cloneData returns a JSON-normalised deep copy of data (so callers' maps are never shared).
func cloneData(data map[string]any) (map[string]any, error) {
	j, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}

// Create allocates an ID of type t and stores data under it at version 1. near (0 = none) places
// the object on near's shard when that shard is open (a Pin on its board's shard); otherwise an
// open shard is chosen. Missing known fields get defaults ("active": true).
func (g *Graph) Create(ctx context.Context, t Type, near ID, data map[string]any) (Object, error) {
	if t == 0 || t > MaxType {
		return Object{}, fmt.Errorf("create: type %d out of range [1, %d]", t, MaxType)
	}
	if near != 0 && !near.Valid() {
		return Object{}, fmt.Errorf("create %s: near %d is not a valid id", t, uint64(near))
	}
	d, err := cloneData(data)
	if err != nil {
		return Object{}, fmt.Errorf("create %s: %w", t, err)
	}
	applyDefaults(d)
	// Encode before allocating so bad data consumes no ID.
	v, err := encodeObject(1, d)
	if err != nil {
		return Object{}, fmt.Errorf("create %s: %w", t, err)
	}
	// The allocation need not wait for its own fsync where the object's write makes it
	// durable: a crash that loses it loses the object too, and nobody was given the ID.
	actx := ctx
	if g.lazyAlloc {
		actx = Lazily(ctx)
	}
	id, err := g.NewLocalID(actx, g.pickShard(near), t)
	if err != nil {
		return Object{}, fmt.Errorf("create %s: %w", t, err)
	}
	ok, err := g.objects.CheckAndSet(ctx, objectKey(id), nil, v)
	g.live.forget(id)
	if err != nil {
		return Object{}, fmt.Errorf("create %s %d: %w", t, id, err)
	}
	if !ok {
		return Object{}, fmt.Errorf("create %s %d: id already in use (allocator behind the data)", t, id)
	}
	return Object{ID: id, Version: 1, Data: d}, nil
}

// getRaw returns the stored value of id (ErrNotFound when absent).
func (g *Graph) getRaw(ctx context.Context, id ID) ([]byte, error) {
	if !id.Valid() {
		return nil, fmt.Errorf("get %d: invalid id: %w", uint64(id), ErrNotFound)
	}
	v, err := g.objects.Get(ctx, objectKey(id))
	if err != nil {
		return nil, fmt.Errorf("get %d: %w", id, err)
	}
	return v, nil
}

// Get returns the object, or ErrNotFound when it is absent or soft-deleted (ErrDeleted, which
// wraps ErrNotFound, when soft-deleted).
func (g *Graph) Get(ctx context.Context, id ID) (Object, error) {
	v, err := g.getRaw(ctx, id)
	if err != nil {
		return Object{}, err
	}
	o, err := decodeObject(id, v)
	if err != nil {
		return Object{}, fmt.Errorf("get: %w", err)
	}
	if !isActive(o.Data) {
		return Object{}, fmt.Errorf("get %d: %w", id, ErrDeleted)
	}
	return o, nil
}

// GetMany returns the live objects among ids; absent, deleted and invalid IDs are omitted.
func (g *Graph) GetMany(ctx context.Context, ids []ID) (map[ID]Object, error) {
	keys := make([][]byte, 0, len(ids))
	want := make([]ID, 0, len(ids))
	seen := make(map[ID]bool, len(ids))
	for _, id := range ids {
		if !id.Valid() || seen[id] {
			continue
		}
		seen[id] = true
		want = append(want, id)
		keys = append(keys, objectKey(id))
	}
	vals, err := GetMany(ctx, g.objects, keys)
	if err != nil {
		return nil, fmt.Errorf("get %d objects: %w", len(keys), err)
	}
	out := make(map[ID]Object, len(want))
	for i, v := range vals {
		if v == nil {
			continue
		}
		o, err := decodeObject(want[i], v)
		if err != nil {
			return nil, fmt.Errorf("get many: %w", err)
		}
		if isActive(o.Data) {
			out[want[i]] = o
		}
	}
	return out, nil
}

// Update applies fn to a copy of the object's data and writes it back with compare-and-set on the
// stored value, retrying fn on conflict. It returns ErrNotFound for an absent or deleted object;
// an error from fn aborts without writing. fn may set "active" to false (a delete).
func (g *Graph) Update(ctx context.Context, id ID, fn func(data map[string]any) error) (Object, error) {
	for range maxCASAttempts {
		old, err := g.getRaw(ctx, id)
		if err != nil {
			return Object{}, fmt.Errorf("update: %w", err)
		}
		o, err := decodeObject(id, old)
		if err != nil {
			return Object{}, fmt.Errorf("update: %w", err)
		}
		if !isActive(o.Data) {
			return Object{}, fmt.Errorf("update %d: deleted: %w", id, ErrNotFound)
		}
		if err := fn(o.Data); err != nil {
			return Object{}, fmt.Errorf("update %d: %w", id, err)
		}
		if o.Data == nil {
			o.Data = map[string]any{}
		}
		d, err := cloneData(o.Data)
		if err != nil {
			return Object{}, fmt.Errorf("update %d: %w", id, err)
		}
		applyDefaults(d)
		v, err := encodeObject(o.Version+1, d)
		if err != nil {
			return Object{}, fmt.Errorf("update %d: %w", id, err)
		}
		ok, err := g.objects.CheckAndSet(ctx, objectKey(id), old, v)
		g.live.forget(id)
		if err != nil {
			return Object{}, fmt.Errorf("update %d: %w", id, err)
		}
		if ok {
			return Object{ID: id, Version: o.Version + 1, Data: d}, nil
		}
	}
	return Object{}, fmt.Errorf("update %d: still conflicting after %d attempts", id, maxCASAttempts)
}

// Delete soft-deletes the object (sets "active" to false). Deleting a deleted object succeeds;
// an absent one gives ErrNotFound.
//
// The deletion is logged (DeletionsAfter) before the object is written, so once Delete returns
// every reader of the log knows of it.
func (g *Graph) Delete(ctx context.Context, id ID) error {
	_, err := g.Update(ctx, id, func(d map[string]any) error {
		if err := g.logDeletion(ctx, id); err != nil {
			return err
		}
		d["active"] = false
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		// Absent, or already deleted (idempotent).
		if v, gerr := g.getRaw(ctx, id); gerr == nil {
			if o, derr := decodeObject(id, v); derr == nil && !isActive(o.Data) {
				return nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// DataID reads an ID stored in object data under name (a json.Number, a decimal string, a float64
// that is exactly an integer, or an ID/uint64), reporting false when absent or not an ID.
func DataID(data map[string]any, name string) (ID, bool) {
	switch v := data[name].(type) {
	case json.Number:
		id, err := ParseID(v.String())
		return id, err == nil
	case string:
		id, err := ParseID(v)
		return id, err == nil
	case ID:
		return v, v.Valid()
	case uint64:
		return ID(v), ID(v).Valid()
	case float64:
		if v >= 0 && v < 1<<62 && v == float64(uint64(v)) {
			return ID(v), ID(v).Valid()
		}
	}
	return 0, false
}

// modShardKey is u64(shard<<46) | kind | 0x00 | key, shard = ModShard(key, 4096). The row
// leads with its mod shard's base (an ID of type 0 on that shard, which no object has), so the
// username and email maps spread over the shard-split regions like every other zen row.
func modShardKey(kind, key string) ([]byte, error) {
	if kind == "" || len(kind) > MaxKindLen || bytes.IndexByte([]byte(kind), 0) >= 0 {
		return nil, fmt.Errorf("map key: kind %q must be 1–%d bytes without NUL", kind, MaxKindLen)
	}
	if key == "" || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("map key %s: key must be 1–%d bytes, got %d", kind, MaxKeyLen, len(key))
	}
	k := make([]byte, 0, 8+len(kind)+1+len(key))
	k = binary.BigEndian.AppendUint64(k, uint64(ModShard(key, 4096))<<46)
	k = append(k, kind...)
	k = append(k, 0)
	return append(k, key...), nil
}

// MapKey maps a non-ID key of a kind (e.g. "username", "email") to id, uniquely: it reports false
// when the key already maps to another ID. Mapping a key to the ID it already has reports true.
func (g *Graph) MapKey(ctx context.Context, kind, key string, id ID) (bool, error) {
	k, err := modShardKey(kind, key)
	if err != nil {
		return false, err
	}
	if !id.Valid() {
		return false, fmt.Errorf("map key %s %q: invalid id %d", kind, key, uint64(id))
	}
	v := appendID(nil, id)
	for range maxCASAttempts {
		ok, err := g.modshard.CheckAndSet(ctx, k, nil, v)
		if err != nil {
			return false, fmt.Errorf("map key %s %q: %w", kind, key, err)
		}
		if ok {
			return true, nil
		}
		cur, err := g.modshard.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue // unmapped in between: try again
		}
		if err != nil {
			return false, fmt.Errorf("map key %s %q: %w", kind, key, err)
		}
		return bytes.Equal(cur, v), nil
	}
	return false, fmt.Errorf("map key %s %q: still conflicting after %d attempts", kind, key, maxCASAttempts)
}

// LookupKey returns the ID a key maps to, or ErrNotFound.
func (g *Graph) LookupKey(ctx context.Context, kind, key string) (ID, error) {
	k, err := modShardKey(kind, key)
	if err != nil {
		return 0, err
	}
	v, err := g.modshard.Get(ctx, k)
	if err != nil {
		return 0, fmt.Errorf("lookup %s %q: %w", kind, key, err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("lookup %s %q: value is %d bytes", kind, key, len(v))
	}
	return ID(binary.BigEndian.Uint64(v)), nil
}

// UnmapKey removes the mapping of key only if it maps to id (so a rename cannot free someone
// else's name). It reports whether it removed the mapping.
func (g *Graph) UnmapKey(ctx context.Context, kind, key string, id ID) (bool, error) {
	k, err := modShardKey(kind, key)
	if err != nil {
		return false, err
	}
	ok, err := g.modshard.CheckAndSet(ctx, k, appendID(nil, id), nil)
	if err != nil {
		return false, fmt.Errorf("unmap %s %q: %w", kind, key, err)
	}
	return ok, nil
}
