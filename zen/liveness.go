package zen

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// liveCache remembers LiveMany's answers for ttl. Every object write of this Graph bumps gen and
// drops the object's entry after the write, and a read fills the cache only if gen did not move
// while it read, so within one process an answer is never older than the last write: a delete
// made through this Graph is seen at once. Writes made by other processes are seen within ttl.
type liveCache struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	gen uint64
	m   map[ID]liveMemo
}

// liveMemo is one cached answer: whether the object was live, and when it was read.
type liveMemo struct {
	live bool
	at   time.Time
}

// CacheLiveness makes LiveMany remember its answers for ttl, for at most maxEntries objects
// (the cache is emptied when it is full). Deletes made through this Graph are seen at once;
// those made by another process (another Graph on the same store) within ttl. A ttl of 0 turns
// the cache off (the default). Call it before the Graph is shared.
func (g *Graph) CacheLiveness(ttl time.Duration, maxEntries int) {
	if ttl <= 0 || maxEntries < 1 {
		g.live = nil
		return
	}
	g.live = &liveCache{ttl: ttl, max: maxEntries, m: make(map[ID]liveMemo)}
}

// forget drops id's cached liveness after a write of it.
func (c *liveCache) forget(id ID) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.gen++
	delete(c.m, id)
	c.mu.Unlock()
}

// LiveMany reports which of ids are live objects (present and not soft-deleted), exactly as
// GetMany would return them, without decoding the objects: it reads only their "active" field.
// It is the liveness check of the read path, where decoding every candidate's whole object
// showed in the profile.
func (g *Graph) LiveMany(ctx context.Context, ids []ID) (map[ID]bool, error) {
	out := make(map[ID]bool, len(ids))
	keys := make([][]byte, 0, len(ids))
	want := make([]ID, 0, len(ids))
	seen := make(map[ID]bool, len(ids))
	c := g.live
	var gen uint64
	var now time.Time
	if c != nil {
		now = g.now()
		c.mu.Lock()
		gen = c.gen
	}
	for _, id := range ids {
		if !id.Valid() || seen[id] {
			continue
		}
		seen[id] = true
		if c != nil {
			if m, ok := c.m[id]; ok && now.Sub(m.at) < c.ttl {
				if m.live {
					out[id] = true
				}
				continue
			}
		}
		want = append(want, id)
		keys = append(keys, objectKey(id))
	}
	if c != nil {
		c.mu.Unlock()
	}
	if len(keys) == 0 {
		return out, nil
	}
	vals, err := GetMany(ctx, g.objects, keys)
	if err != nil {
		return nil, fmt.Errorf("live: get %d objects: %w", len(keys), err)
	}
	lives := make([]bool, len(want))
	for i, v := range vals {
		if v == nil {
			continue
		}
		live, err := liveValue(want[i], v)
		if err != nil {
			return nil, fmt.Errorf("live: %w", err)
		}
		lives[i] = live
		if live {
			out[want[i]] = true
		}
	}
	if c != nil {
		c.mu.Lock()
		if c.gen == gen { // no write of this Graph since the read began
			if len(c.m)+len(want) > c.max {
				clear(c.m)
			}
			for i, id := range want {
				c.m[id] = liveMemo{live: lives[i], at: now}
			}
		}
		c.mu.Unlock()
	}
	return out, nil
}

// liveValue reports whether a stored object value is live, as isActive(decodeObject(v).Data)
// would, decoding only the top level: "active" absent or not a bool is live, false is not.
func liveValue(id ID, v []byte) (bool, error) {
	if len(v) < 8 {
		return false, fmt.Errorf("object %d: value is %d bytes", id, len(v))
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(v[8:], &top); err != nil {
		return false, fmt.Errorf("object %d: %w", id, err)
	}
	a, ok := top["active"]
	if !ok {
		return true, nil
	}
	var b any
	if err := json.Unmarshal(a, &b); err != nil {
		return false, fmt.Errorf("object %d: active: %w", id, err)
	}
	live, isBool := b.(bool)
	return !isBool || live, nil // a non-bool "active" (null included) is present-and-live
}
