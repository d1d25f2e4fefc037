package feedsvc

import (
	"bytes"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/zen"
)

// The feed-head cache (docs/read-path.md, "The feed head in memory").
//
// Most pages are first pages of a feed that has not changed since the user's last page: the
// same rows read, decoded and merged again. The cache keeps, per user, the result of the last
// first-page read of the primary (the raw rows decoded, before the liveness and removal
// filters, which every page still applies), in memory bounded by a byte budget, least recently
// used out first. A page served from it costs one point read instead of a scan and its decoding.
//
// Coherence is by a version read, not by routing: every write that changes the rows a page
// reads (the pending chunks and the materialized items) writes a new value to the user's head
// version row after it, before it is acknowledged: the chunk's recording (in the same atomic
// commit where the store has one), the served mark of a prepared chunk, a materialization's
// close, a trim; deleting the feed deletes the row. The row's key, user | 'f', is the first of
// the feed's range (FeedRange), so a page's scan reads it first, in the same scan: a user with
// nothing cached costs one scan as before, and the version it caches under is read before the
// rows. A user with a head cached reads the row alone (one point read), and the head is served
// only if the row still holds the value cached with it. Because the version is read before the
// head and changed after the write, a cached head is never older than the version it carries,
// and a write acknowledged before a page began is never hidden from it, whichever process made
// it: several feed processes may serve one user over one store with no routing. A missing
// version row (a feed no write has touched since, or a deleted feed) is never cached. The
// version value is the writing process's incarnation and a counter, so two writers never write
// the same value.
//
// Deleted pins never reach a page from the cache either: the cached rows are the raw read, and
// the page filters them as it filters a scan (filterLive: the DeletedSet in production; then
// filterRemoved for prepared chunks, which checks unfollows).

const (
	// DefaultHeadCacheBytes is Deps.HeadCacheBytes's default.
	DefaultHeadCacheBytes = 64 << 20
	// headEntryOverhead approximates an entry's bookkeeping (map slot, list element, slices).
	headEntryOverhead = 256
	// headItemBytes approximates one decoded item beside its reason's bytes.
	headItemBytes = 96
	// headBumpTimeout bounds one write of a version row.
	headBumpTimeout = 5 * time.Second
)

// headVersionKey is user(8) | 'f': the first key of FeedRange(user), before every pending and
// item row (which have a sequence after the kind byte).
func headVersionKey(user zen.ID) []byte { return userPrefix(prefixFeed, user) }

// isHeadVersionKey reports whether k is a head version row's key.
func isHeadVersionKey(k []byte) bool { return len(k) == kindAt+1 && k[kindAt] == prefixFeed }

// headCache is the byte-budgeted LRU of feed heads. With a budget of 0 it caches nothing.
type headCache struct {
	budget int64

	mu      sync.Mutex
	used    int64
	entries map[zen.ID]*list.Element
	lru     list.List // of *headEntry, most recent first

	results *prometheus.CounterVec
	// resultOf is results' child of each result, looked up once.
	resultOf map[string]prometheus.Counter
	bytes    prometheus.Gauge
	// versionErrors counts the head version writes that failed.
	versionErrors prometheus.Counter
}

// headEntry is one user's cached head: the read of size items, as of version.
type headEntry struct {
	user    zen.ID
	version []byte
	size    int
	res     pageRead
	cost    int64
}

// Results of a cache lookup, the label values of smartfeed_feed_head_cache_total.
const (
	headHit = "hit"
	// headMiss: nothing cached for the user at this page size; headStale: cached, but the
	// version moved (a write since); headNoVersion: no version row (nothing is cached);
	// headVersionError: the version read failed (the page reads as without the cache).
	headMiss         = "miss"
	headStale        = "stale"
	headNoVersion    = "no_version"
	headVersionError = "version_error"
)

func newHeadCache(budget int64, reg prometheus.Registerer) (*headCache, error) {
	c := &headCache{budget: budget, entries: map[zen.ID]*list.Element{},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smartfeed_feed_head_cache_total",
			Help: "First-page reads by what the feed-head cache did: hit (served from memory after one version read), miss, stale (a write since), no_version, version_error.",
		}, []string{"result"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "smartfeed_feed_head_cache_bytes",
			Help: "Approximate bytes the feed-head cache holds (bounded by the head cache budget).",
		}),
		versionErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_head_version_errors_total",
			Help: "Writes of a feed's head version (after a write to the feed) that failed: other feed processes may serve that feed's head as it was before the write until its next write.",
		})}
	c.resultOf = map[string]prometheus.Counter{}
	for _, r := range []string{headHit, headMiss, headStale, headNoVersion, headVersionError} {
		c.resultOf[r] = c.results.WithLabelValues(r)
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{c.results, c.bytes, c.versionErrors} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// has reports whether a head of user read at size is cached (at some version).
func (c *headCache) has(user zen.ID, size int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[user]
	return ok && el.Value.(*headEntry).size == size
}

// get returns user's head read at size if its version is version.
func (c *headCache) get(user zen.ID, size int, version []byte) (pageRead, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[user]
	if !ok {
		return pageRead{}, headMiss
	}
	e := el.Value.(*headEntry)
	if e.size != size {
		return pageRead{}, headMiss
	}
	if !bytes.Equal(e.version, version) {
		c.removeLocked(el)
		return pageRead{}, headStale
	}
	c.lru.MoveToFront(el)
	return e.res, headHit
}

// enabled reports whether the cache holds anything (a budget above 0).
func (c *headCache) enabled() bool { return c.budget > 0 }

// put caches user's head read at size as of version, evicting the least recently used heads
// past the budget. A head larger than the budget is not cached.
func (c *headCache) put(user zen.ID, size int, version []byte, res pageRead) {
	cost := headCost(res) + int64(len(version))
	if cost > c.budget {
		return
	}
	// Clipped, so that a page appending to a slice it was handed reallocates rather than
	// writing into the cached array another page reads. Which chunks are stale is decided when
	// the head is served (staleAt).
	res.entries, res.pendingPins, res.prepared = slices.Clip(res.entries), slices.Clip(res.pendingPins), slices.Clip(res.prepared)
	res.stale = nil
	e := &headEntry{user: user, version: bytes.Clone(version), size: size, res: res, cost: cost}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[user]; ok {
		c.removeLocked(el)
	}
	c.entries[user] = c.lru.PushFront(e)
	c.used += cost
	for c.used > c.budget {
		c.removeLocked(c.lru.Back())
	}
	c.bytes.Set(float64(c.used))
}

// forget drops user's head.
func (c *headCache) forget(user zen.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[user]; ok {
		c.removeLocked(el)
		c.bytes.Set(float64(c.used))
	}
}

func (c *headCache) removeLocked(el *list.Element) {
	e := c.lru.Remove(el).(*headEntry)
	delete(c.entries, e.user)
	c.used -= e.cost
}

// headCost approximates the bytes a cached read holds.
func headCost(res pageRead) int64 {
	n := int64(headEntryOverhead + 8*len(res.pendingPins) + 64*len(res.served))
	for i := range res.entries {
		n += headItemBytes + int64(len(res.entries[i].Reason))
	}
	for _, p := range res.prepared {
		n += int64(len(p.row)) + headItemBytes*int64(len(p.pc.Items)+1)
	}
	return n
}

// servedChunk is a served chunk a read met before its materialization, and when it was served:
// a cached read finds which are stale (Config.StalePending) when it is served (staleAt).
type servedChunk struct {
	task     MaterializeTask
	servedMs int64
}

// staleAt returns the chunks of served served before cutMs.
func staleAt(served []servedChunk, cutMs int64) []MaterializeTask {
	var stale []MaterializeTask
	for _, c := range served {
		if c.servedMs < cutMs {
			stale = append(stale, c.task)
		}
	}
	return stale
}

// headReadFrom is the primary's side of a first page's hedged read (readRaw) through the cache.
// For a user with a head cached at this size, it reads the head version on the primary and
// answers with the head if the version is unchanged. Otherwise it scans the primary (readPage),
// which reads the version row first, and caches what it read under that version. Both reads are
// the primary's, hedged together: a slow primary sends the page to the standby whether its
// version read or its scan is slow.
func (s *Service) headReadFrom(primary zen.Table, user zen.ID, size int, cutMs int64) hedge.ReadFunc[pageRead] {
	c := s.head
	return func(ctx context.Context) (pageRead, error) {
		result := headMiss
		if c.has(user, size) {
			version, err := primary.Get(ctx, headVersionKey(user))
			switch {
			case err == nil:
				var res pageRead
				if res, result = c.get(user, size, version); result == headHit {
					c.resultOf[headHit].Inc()
					res.stale = staleAt(res.served, cutMs)
					return res, nil
				}
			case errors.Is(err, zen.ErrNotFound):
				c.forget(user)
				result = headStale
			default:
				// The scan below fails too, or answers: the page does not depend on the version.
				result = headVersionError
			}
		}
		res, err := readPage(ctx, primary, user, nil, size, cutMs)
		if err != nil {
			return res, err
		}
		if res.version == nil {
			result = headNoVersion
		} else {
			c.put(user, size, res.version, res)
		}
		c.resultOf[result].Inc()
		return res, nil
	}
}

// headChanged is called after every write that may have changed the rows of user's feed a page
// reads (whether or not the write reported success: a failed write may have landed): it drops
// this process's cached head and writes a new head version, so no process serves a head read
// before the write. It returns once the version is written (or its write failed: logged and
// counted; this process's head is dropped all the same). The version is written whether or not
// this process caches (Deps.HeadCacheBytes), for the other processes over the same store.
func (s *Service) headChanged(ctx context.Context, user zen.ID) {
	s.head.forget(user)
	ctx, cancel := context.WithTimeout(zen.Lazily(context.WithoutCancel(ctx)), headBumpTimeout)
	defer cancel()
	if err := s.primary.Apply(ctx, []zen.Mutation{s.headBump(user)}); err != nil {
		s.head.versionErrors.Inc()
		s.log.Warn("write feed head version", zap.Stringer("user", user), zap.Error(err))
	}
}

// headBump is the write of a new head version for user: this incarnation and a counter.
func (s *Service) headBump(user zen.ID) zen.Mutation {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), s.incarnation)
	v = binary.BigEndian.AppendUint64(v, s.headCounter.Add(1))
	return zen.Mutation{Key: headVersionKey(user), Value: v}
}
