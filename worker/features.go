package worker

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/zen"
)

// Feature kinds kept by featureCache.
const (
	featAffinity byte = 'f' // (receiver, author) -> the affinity row's count (0 when absent)
	featInterest byte = 'i' // (receiver, interest) -> 1 when receiver follows interest, else 0
	featActive   byte = 'a' // (receiver, 0) -> its last-active row, only when it said "deliver" (Worker.active)
)

// featureKey names one cached feature of one receiver.
type featureKey struct {
	kind byte
	user zen.ID
	of   zen.ID // the author or the interest
}

// featureCache keeps the per-receiver scoring features a fanout reads (the affinity for the
// pin's author, whether the receiver follows each of the pin's interests) for at most ttl, so
// that the pins of one author, or on one interest, arriving within that time read each
// receiver's features once instead of once per pin. On the fanout's hot path these were up to
// five point reads per receiver beside its one pool write; on HBase each is a Get.
//
// Only ranking signals are kept in the Worker's feats cache. What decides whether a receiver
// gets the pin at all (the last-active row, with the deleted-user tombstone) has a second cache
// of this type, Worker.active, with a much shorter ttl (Config.ActiveTTL), which keeps only
// rows that said "deliver". A cached feature is at most ttl old: an engagement or an interest
// follow recorded meanwhile by another process changes that receiver's scores ttl late, never
// which pins reach whom. The worker's own writes
// (RecordEngagement, follow backfills, unfollow cleanups) drop the entries they change in this
// process's cache only: with roles split (IngestService on a graph process, several worker
// processes) the other processes see the change within ttl.
//
// Two generations bound the memory: entries go into the current one; when it is half a ttl old,
// or holds max entries, it becomes the old one (and the old one is dropped). A lookup finds an
// entry in either, the old one only while it is younger than ttl. A nil *featureCache keeps
// nothing.
type featureCache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu       sync.Mutex
	cur, old map[featureKey]int64
	curBorn  time.Time // when cur started: its entries were put at or after it
	oldBorn  time.Time

	hits, misses prometheus.Counter
}

// newFeatureCache returns a cache of entries at most ttl old, at most max in a generation, or nil
// (keep nothing) when ttl is not positive.
func newFeatureCache(ttl time.Duration, max int, now func() time.Time, hits, misses prometheus.Counter) *featureCache {
	if ttl <= 0 || max <= 0 {
		return nil
	}
	return &featureCache{ttl: ttl, max: max, now: now, cur: map[featureKey]int64{}, curBorn: now(),
		hits: hits, misses: misses}
}

// rotateLocked starts a new generation when the current one is half a ttl old or full.
func (c *featureCache) rotateLocked(now time.Time) {
	if now.Sub(c.curBorn) < c.ttl/2 && len(c.cur) < c.max {
		return
	}
	c.old, c.oldBorn = c.cur, c.curBorn
	c.cur, c.curBorn = make(map[featureKey]int64, len(c.old)), now
}

// get looks up each of keys: vals[i] is set and ok[i] true where keys[i] is cached. One lock
// for the whole batch.
func (c *featureCache) get(keys []featureKey, vals []int64, ok []bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	now := c.now()
	c.rotateLocked(now)
	oldLive := c.old != nil && now.Sub(c.oldBorn) < c.ttl
	n := 0
	for i, k := range keys {
		v, hit := c.cur[k]
		if !hit && oldLive {
			v, hit = c.old[k]
		}
		if hit {
			vals[i], ok[i] = v, true
			n++
		}
	}
	c.mu.Unlock()
	c.hits.Add(float64(n))
	c.misses.Add(float64(len(keys) - n))
}

// put caches vals[i] for keys[i]. Values read before a concurrent forget may land after it; the
// ttl bounds how long such a value is served.
func (c *featureCache) put(keys []featureKey, vals []int64) {
	if c == nil || len(keys) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotateLocked(c.now())
	for i, k := range keys {
		c.cur[k] = vals[i]
		if len(c.cur) >= c.max {
			c.rotateLocked(c.now())
		}
	}
}

// forget drops the entry of key from both generations.
func (c *featureCache) forget(key featureKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, key)
	delete(c.old, key)
}
