// Package zencache is the app-layer join cache of the seeds: a read-through cache on Redis in
// front of zen tables, with objects and mappings (edge pages, edge counts) cached apart.
//
// Invalidation is by version, so that no stale read survives a write acknowledged to the
// caller, whatever the interleaving of readers and writers in any number of processes:
//
//   - every cached key belongs to a group (an object's row; an edge list's (from, type); a
//     counter's row), and each group has a version counter in Redis;
//   - a read fetches the group's version and the entry cached under that version in one round
//     trip (a Lua script); on a miss it reads the store and caches the answer under the version
//     it saw;
//   - a write goes to the store first, then increments the version of every group it touched,
//     and only then returns: a read that starts after the write returned sees the new version,
//     and whatever a slower reader caches under the old version is unreachable.
//
// A write whose version bump fails (Redis down) returns an error: the store has the change but
// the caller is not told it succeeded, and retries. Reads while Redis is unreachable go to the
// store. Misses are cached too (negative caching), with a shorter TTL.
package zencache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/zen"
)

// Grouping says how a table's rows fall into invalidation groups: by a fixed-length key prefix
// (every row whose key starts with the same PrefixLen bytes is one group, and a scan within one
// prefix is cached as a page), or, with PrefixLen 0, one group per row (point reads cached,
// scans not).
type Grouping struct{ PrefixLen int }

// Groupings of the graph's tables.
var (
	// RowGroups: every row its own group (objects; counters: ID allocators, edge counts).
	RowGroups = Grouping{}
	// EdgeGroups groups a row of the "edges" table by its list: from(8) | type(2).
	EdgeGroups = Grouping{PrefixLen: 10}
)

// of returns the group of key, or nil when the key is too short to have one.
func (g Grouping) of(key []byte) []byte {
	if g.PrefixLen == 0 {
		return key
	}
	if len(key) < g.PrefixLen {
		return nil
	}
	return key[:g.PrefixLen]
}

// Options configures Wrap.
type Options struct {
	// Prefix starts every Redis key (a deployment's namespace). Default "zc:".
	Prefix string
	// TTL of a cached row or page. Default 10m.
	TTL time.Duration
	// NegativeTTL of a cached miss. Default 5s.
	NegativeTTL time.Duration
	// VersionTTL of a group's version counter, refreshed by every write; it must be well above
	// TTL, so an expired counter (restarting at 0) can never meet a live entry. Default 24h.
	VersionTTL time.Duration
	// Tables maps the zen table names to cache to their grouping; others pass through.
	// Default: objects and counters → RowGroups, edges → EdgeGroups.
	Tables map[string]Grouping
	// Registerer receives smartfeed_cache_requests_total{table,op,result}; nil registers nothing.
	Registerer prometheus.Registerer
}

// Defaults of Options' fields that the binary's configuration (internal/config) takes as its own.
const (
	// DefaultTTL is Options.TTL's default.
	DefaultTTL = 10 * time.Minute
	// DefaultNegativeTTL is Options.NegativeTTL's default.
	DefaultNegativeTTL = 5 * time.Second
)

func (o *Options) defaults() error {
	if o.Prefix == "" {
		o.Prefix = "zc:"
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = DefaultNegativeTTL
	}
	if o.VersionTTL == 0 {
		o.VersionTTL = 24 * time.Hour
	}
	if o.Tables == nil {
		o.Tables = map[string]Grouping{zen.TableObjects: RowGroups, zen.TableEdges: EdgeGroups, zen.TableCounters: RowGroups}
	}
	if o.TTL < 0 || o.NegativeTTL < 0 || o.VersionTTL < 10*o.TTL {
		return fmt.Errorf("zencache: ttl %v, negative ttl %v, version ttl %v: want positive and version ttl ≥ 10×ttl", o.TTL, o.NegativeTTL, o.VersionTTL)
	}
	return nil
}

// Store wraps a zen.Store: the tables named in Options.Tables are cached.
type Store struct {
	zen.Store
	rdb  redis.UniversalClient
	opts Options
	reqs *prometheus.CounterVec
}

// Wrap returns s with a Redis cache in front of its graph tables.
func Wrap(s zen.Store, rdb redis.UniversalClient, o Options) (*Store, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	f := promauto.With(o.Registerer)
	c := &Store{Store: s, rdb: rdb, opts: o, reqs: f.NewCounterVec(prometheus.CounterOpts{
		Name: "smartfeed_cache_requests_total",
		Help: "Join-cache lookups and invalidations by table, op (get, scan, invalidate) and result (hit, miss, negative, error, bypass)."},
		[]string{"table", "op", "result"})}
	return c, nil
}

// Table returns the named table, cached when Options.Tables names it.
func (s *Store) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	g, ok := s.opts.Tables[name]
	if !ok {
		return t, nil
	}
	return &Table{inner: t, s: s, name: name, grouping: g}, nil
}

// Table is one cached table. Writes pass through and invalidate; reads are read-through.
type Table struct {
	inner    zen.Table
	s        *Store
	name     string
	grouping Grouping
}

func (t *Table) group(key []byte) []byte { return t.grouping.of(key) }

var (
	_ zen.Table        = (*Table)(nil)
	_ zen.MultiGetter  = (*Table)(nil)
	_ zen.MultiScanner = (*Table)(nil)
	_ zen.Carrier      = (*Table)(nil)
	_ zen.CondBatcher  = (*Table)(nil)
)

// Entry encoding: 'V' | value, or 'N' for a cached miss, or 'S' | (uvarint len | key | uvarint
// len | value)* for a scan page.

// lookup is one round trip: the version of each group and the entry cached under it.
// KEYS = version keys; ARGV = entry key prefixes (the version is appended). Returns a flat list
// version1, entry1, version2, entry2, … (entry false when absent).
var lookup = redis.NewScript(`
local out = {}
for i, vk in ipairs(KEYS) do
  local v = redis.call('GET', vk) or '0'
  out[#out+1] = v
  out[#out+1] = redis.call('GET', ARGV[i] .. v)
end
return out`)

func (t *Table) verKey(g []byte) string {
	return t.s.opts.Prefix + "v:" + t.name + ":" + hex.EncodeToString(g)
}

func (t *Table) entryPrefix(g []byte, id string) string {
	return t.s.opts.Prefix + "e:" + t.name + ":" + hex.EncodeToString(g) + ":" + id + ":"
}

func (t *Table) count(op, result string) { t.s.reqs.WithLabelValues(t.name, op, result).Inc() }

// cached looks up entries; ok is false (and the caller goes to the store) when Redis fails.
func (t *Table) cached(ctx context.Context, groups [][]byte, ids []string) (vers []string, vals []string, found []bool, ok bool) {
	keys := make([]string, len(groups))
	argv := make([]any, len(groups))
	for i, g := range groups {
		keys[i] = t.verKey(g)
		argv[i] = t.entryPrefix(g, ids[i])
	}
	res, err := lookup.Run(ctx, t.s.rdb, keys, argv...).Slice()
	if err != nil || len(res) != 2*len(groups) {
		return nil, nil, nil, false
	}
	vers, vals, found = make([]string, len(groups)), make([]string, len(groups)), make([]bool, len(groups))
	for i := range groups {
		vers[i], _ = res[2*i].(string)
		vals[i], found[i] = res[2*i+1].(string)
	}
	return vers, vals, found, true
}

func (t *Table) store(ctx context.Context, pipe redis.Pipeliner, g []byte, id, ver string, entry []byte, negative bool) {
	ttl := t.s.opts.TTL
	if negative {
		ttl = t.s.opts.NegativeTTL
	}
	pipe.Set(ctx, t.entryPrefix(g, id)+ver, entry, ttl)
}

// Get reads through the cache.
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	vals, err := t.GetMany(ctx, [][]byte{key})
	if err != nil {
		return nil, err
	}
	if vals[0] == nil {
		return nil, zen.ErrNotFound
	}
	return vals[0], nil
}

// GetMany reads through the cache: one Redis round trip for the lookups, one store call for
// the misses, one pipelined write of what was missing. nil marks an absent row.
func (t *Table) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	out := make([][]byte, len(keys))
	var groups [][]byte
	var ids []string
	var idx []int
	var missing [][]byte
	var missIdx []int
	for i, k := range keys {
		g := t.group(k)
		if g == nil {
			missing, missIdx = append(missing, k), append(missIdx, i)
			continue
		}
		groups, ids, idx = append(groups, g), append(ids, "k"+hex.EncodeToString(k)), append(idx, i)
	}
	var vers []string
	if len(groups) > 0 {
		var vals []string
		var found []bool
		var ok bool
		vers, vals, found, ok = t.cached(ctx, groups, ids)
		if !ok {
			t.count("get", "bypass")
			return zen.GetMany(ctx, t.inner, keys)
		}
		for j, i := range idx {
			switch {
			case !found[j] || len(vals[j]) == 0:
				t.count("get", "miss")
				missing, missIdx = append(missing, keys[i]), append(missIdx, i)
				continue
			case vals[j][0] == 'N':
				t.count("get", "negative")
			case vals[j][0] == 'V':
				t.count("get", "hit")
				out[i] = []byte(vals[j][1:])
			default:
				t.count("get", "miss")
				missing, missIdx = append(missing, keys[i]), append(missIdx, i)
				continue
			}
			vers[j] = "" // answered
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	got, err := zen.GetMany(ctx, t.inner, missing)
	if err != nil {
		return nil, err
	}
	pipe := t.s.rdb.Pipeline()
	pos := map[int]int{}
	for j, i := range idx {
		pos[i] = j
	}
	for m, i := range missIdx {
		out[i] = got[m]
		j, ok := pos[i]
		if !ok || vers == nil {
			continue
		}
		if got[m] == nil {
			t.store(ctx, pipe, groups[j], ids[j], vers[j], []byte{'N'}, true)
		} else {
			t.store(ctx, pipe, groups[j], ids[j], vers[j], append([]byte{'V'}, got[m]...), false)
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // a failed fill costs a later miss, nothing else
	}
	return out, nil
}

// scanGroup returns the group of a scan when the whole range lies in one prefix group, else nil.
func (t *Table) scanGroup(o zen.ScanOptions) []byte {
	if t.grouping.PrefixLen == 0 || len(o.Start) < t.grouping.PrefixLen {
		return nil
	}
	g := o.Start[:t.grouping.PrefixLen]
	if o.Stop == nil || !(bytes.HasPrefix(o.Stop, g) || bytes.Equal(o.Stop, zen.PrefixEnd(g))) {
		return nil
	}
	return g
}

func scanID(o zen.ScanOptions) string {
	h := sha256.New()
	var b [9]byte
	binary.BigEndian.PutUint64(b[:8], uint64(o.Limit))
	if o.Reverse {
		b[8] = 1
	}
	h.Write(b[:])
	h.Write(binary.AppendUvarint(nil, uint64(len(o.Start))))
	h.Write(o.Start)
	h.Write(o.Stop)
	return "s" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Scan reads through the cache when the range lies within one group (an edge page), else goes
// to the store.
func (t *Table) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	g := t.scanGroup(o)
	if g == nil {
		return t.inner.Scan(ctx, o)
	}
	id := scanID(o)
	vers, vals, found, ok := t.cached(ctx, [][]byte{g}, []string{id})
	if !ok {
		t.count("scan", "bypass")
		return t.inner.Scan(ctx, o)
	}
	if found[0] {
		if kvs, err := decodePage(vals[0]); err == nil {
			t.count("scan", "hit")
			return kvs, nil
		}
	}
	t.count("scan", "miss")
	kvs, err := t.inner.Scan(ctx, o)
	if err != nil {
		return nil, err
	}
	pipe := t.s.rdb.Pipeline()
	t.store(ctx, pipe, g, id, vers[0], encodePage(kvs), false)
	_, _ = pipe.Exec(ctx)
	return kvs, nil
}

// ScanMany reads the scans that lie within one group through the cache, as Scan does, and sends
// the others to the store together (one call where it answers several scans at once).
func (t *Table) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	out := make([][]zen.KV, len(opts))
	var rest []zen.ScanOptions
	var restAt []int
	for i, o := range opts {
		if t.scanGroup(o) == nil {
			rest, restAt = append(rest, o), append(restAt, i)
			continue
		}
		kvs, err := t.Scan(ctx, o)
		if err != nil {
			return nil, err
		}
		out[i] = kvs
	}
	if len(rest) > 0 {
		res, err := zen.ScanMany(ctx, t.inner, rest)
		if err != nil {
			return nil, err
		}
		for j, i := range restAt {
			out[i] = res[j]
		}
	}
	return out, nil
}

func encodePage(kvs []zen.KV) []byte {
	b := []byte{'S'}
	for _, kv := range kvs {
		b = binary.AppendUvarint(b, uint64(len(kv.Key)))
		b = append(b, kv.Key...)
		b = binary.AppendUvarint(b, uint64(len(kv.Value)))
		b = append(b, kv.Value...)
	}
	return b
}

func decodePage(s string) ([]zen.KV, error) {
	b := []byte(s)
	if len(b) == 0 || b[0] != 'S' {
		return nil, errors.New("not a page")
	}
	b = b[1:]
	var kvs []zen.KV
	for len(b) > 0 {
		var kv zen.KV
		for _, dst := range []*[]byte{&kv.Key, &kv.Value} {
			n, w := binary.Uvarint(b)
			if w <= 0 || n > uint64(len(b)-w) {
				return nil, errors.New("corrupt page")
			}
			*dst = b[w : w+int(n)]
			b = b[w+int(n):]
		}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		kvs = append(kvs, kv)
	}
	return kvs, nil
}

// invalidate bumps the versions of the groups of keys. It runs after the store write and
// before the write returns.
func (t *Table) invalidate(ctx context.Context, keys ...[]byte) error {
	seen := map[string]bool{}
	pipe := t.s.rdb.Pipeline()
	for _, k := range keys {
		g := t.group(k)
		if g == nil || seen[string(g)] {
			continue
		}
		seen[string(g)] = true
		vk := t.verKey(g)
		pipe.Incr(ctx, vk)
		pipe.Expire(ctx, vk, t.s.opts.VersionTTL)
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(context.WithoutCancel(ctx)); err != nil {
		t.count("invalidate", "error")
		return fmt.Errorf("zencache %s: invalidate after a write (the store has it; retry the call): %w", t.name, err)
	}
	t.count("invalidate", "ok")
	return nil
}

// CheckAndSetWith compares and sets with extra rows on the store, then invalidates the groups of
// the key and of the extra rows; it fails with errors.ErrUnsupported, writing nothing, when the
// store's table is not a zen.Carrier.
func (t *Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	c, ok := t.inner.(zen.Carrier)
	if !ok {
		return false, fmt.Errorf("zencache %s: check-and-set with extra rows: %w", t.name, errors.ErrUnsupported)
	}
	wrote, err := c.CheckAndSetWith(ctx, key, expected, value, extra)
	if err != nil || wrote {
		if ierr := t.invalidate(ctx, withExtra(key, extra)...); ierr != nil && err == nil {
			return false, ierr
		}
	}
	return wrote, err
}

// IncrementWith increments with extra rows on the store, then invalidates the groups of the key
// and of the extra rows; it fails with errors.ErrUnsupported, writing nothing, when the store's
// table is not a zen.Carrier.
func (t *Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	c, ok := t.inner.(zen.Carrier)
	if !ok {
		return 0, fmt.Errorf("zencache %s: increment with extra rows: %w", t.name, errors.ErrUnsupported)
	}
	n, err := c.IncrementWith(ctx, key, delta, extra)
	if ierr := t.invalidate(ctx, withExtra(key, extra)...); ierr != nil && err == nil {
		return 0, ierr
	}
	return n, err
}

// withExtra is key and the keys of extra.
func withExtra(key []byte, extra []zen.Mutation) [][]byte {
	keys := make([][]byte, 0, 1+len(extra))
	keys = append(keys, key)
	for _, m := range extra {
		keys = append(keys, m.Key)
	}
	return keys
}

// Apply writes to the store, then invalidates the groups touched.
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.inner.Apply(ctx, muts); err != nil {
		return err
	}
	keys := make([][]byte, len(muts))
	for i, m := range muts {
		keys[i] = m.Key
	}
	return t.invalidate(ctx, keys...)
}

// CheckAndSet runs on the store; a write (or an unknown outcome) invalidates the key's group.
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	ok, err := t.inner.CheckAndSet(ctx, key, expected, value)
	if ok || err != nil {
		if ierr := t.invalidate(ctx, key); ierr != nil && err == nil {
			return false, ierr
		}
	}
	return ok, err
}

// CheckAndSetMany runs on the store (one call where it supports it), then invalidates.
func (t *Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	res, err := zen.CheckAndSetMany(ctx, t.inner, conds)
	keys := make([][]byte, 0, len(conds))
	for i, c := range conds {
		if err != nil || res[i] {
			keys = append(keys, c.Key)
		}
	}
	if ierr := t.invalidate(ctx, keys...); ierr != nil && err == nil {
		return nil, ierr
	}
	return res, err
}

// Increment runs on the store, then invalidates the counter's group.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	n, err := t.inner.Increment(ctx, key, delta)
	if ierr := t.invalidate(ctx, key); ierr != nil && err == nil {
		return 0, ierr
	}
	return n, err
}
