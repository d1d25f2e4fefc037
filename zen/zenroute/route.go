// Package zenroute routes the shard-keyed zen tables over several named stores by the live shard
// map: a row goes to the store of the range holding its key's shard (zen.KeyShard), so shard
// ranges can live on different clusters and move between them (zen/zenmove).
//
// Point operations go to one store. A scan inside one store's ranges goes to that store; a scan
// spanning stores is the concatenation of one scan per run of ranges, in key order (shards grow
// with keys, so this is the merge). Batches (Apply, CheckAndSetMany, GetMany) are split by store;
// Apply was already atomic per row only on HBase (see zen.Table). A compare-and-set or increment
// that carries extra rows (zen.Carrier) must stay in one store: across stores it fails with an
// error wrapping errors.ErrUnsupported, having written nothing, and callers fall back.
//
// A fenced range (zen.ShardRange.Fenced) is being moved: reads keep going to its store, writes
// wait for the fence to lift (Options.FenceWait) and then follow the new map, or fail with
// ErrFenced. Swap, which installs a new map, returns only once every write that started under the
// previous map has finished, so after a Swap to a fenced map no write to those shards is still
// on its way to the old store. Writes to other shards never wait.
//
// When the map is shared by several processes (through ZooKeeper), a Lease (Options.Lease) says
// whether this process's map is confirmed current: no shard-keyed row is written while it has
// lapsed, and a write during which it lapsed is not acknowledged (see Lease).
//
// Tables that are not shard-keyed (the outbox, the feed stores, generator state) are not routed:
// Store.Table returns the default store's table for them.
package zenroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// ErrFenced is returned by a write to shards whose fence did not lift within Options.FenceWait.
// It is retryable (it wraps zen.ErrUnavailable): the move either switches the shards or lifts
// the fence within seconds.
var ErrFenced = fmt.Errorf("zenroute: shards fenced for a move: %w", zen.ErrUnavailable)

// DefaultStore is the name of the store that holds unrouted tables when Options.Default is empty.
const DefaultStore = "default"

// ShardedTables returns the names of the tables whose row keys lead with an ID or a shard base,
// and so are routed: zen.Graph's objects, edges, counters and modshard, the pools table, and the
// worker's state table ("worker", rows led by the user ID).
func ShardedTables() []string {
	return []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard, "pools", "worker"}
}

// Options configures a Store.
type Options struct {
	// Default names the store of unrouted tables; empty means DefaultStore.
	Default string
	// Routed lists the tables routed by shard; nil means ShardedTables().
	Routed []string
	// FenceWait bounds how long a write to fenced shards waits for the fence to lift before it
	// fails with ErrFenced; 0 means 5 seconds. A write waiting for the Lease waits as long.
	FenceWait time.Duration
	// Lease, when set, must hold for a shard-keyed row to be written (see Lease); nil writes by
	// whatever map is in use (a map that only this process changes).
	Lease *Lease
}

// Store is a zen.Store over several named stores, routed by a live shard map. It is safe for
// concurrent use. It does not own the stores: Close closes nothing.
type Store struct {
	stores map[string]zen.Store
	names  []string
	def    string
	routed map[string]bool
	wait   time.Duration
	lease  *Lease

	swapMu sync.Mutex // one Swap at a time
	cur    atomic.Pointer[state]

	tmu    sync.Mutex
	tables map[string]*Table
}

// state is one installed map with the writes in flight under it.
type state struct {
	m       *zen.ShardMap
	segs    []segment
	changed chan struct{} // closed when a newer map replaces this one

	mu      sync.Mutex
	n       int  // writes in flight under this map
	retired bool // replaced: no new writes start under it
	drained chan struct{}
}

// segment is the key range [start, stop) of a run of ranges on one store (nil: unbounded).
type segment struct {
	start, stop []byte
	store       string
}

// New returns a Store routing over stores (by name) with the map m, which must name only those
// stores.
func New(stores map[string]zen.Store, m *zen.ShardMap, o Options) (*Store, error) {
	if o.Default == "" {
		o.Default = DefaultStore
	}
	if o.Routed == nil {
		o.Routed = ShardedTables()
	}
	if o.FenceWait <= 0 {
		o.FenceWait = 5 * time.Second
	}
	if _, ok := stores[o.Default]; !ok {
		return nil, fmt.Errorf("zenroute: no default store %q", o.Default)
	}
	s := &Store{stores: stores, def: o.Default, routed: map[string]bool{}, wait: o.FenceWait, lease: o.Lease,
		tables: map[string]*Table{}}
	for name := range stores {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, t := range o.Routed {
		s.routed[t] = true
	}
	if m == nil {
		m = zen.DefaultShardMap()
	}
	st, err := s.newState(m)
	if err != nil {
		return nil, err
	}
	s.cur.Store(st)
	return s, nil
}

// StoreNames returns the names of the stores routed over, sorted.
func (s *Store) StoreNames() []string { return slices.Clone(s.names) }

// Backend returns the named store, or false.
func (s *Store) Backend(name string) (zen.Store, bool) {
	st, ok := s.stores[name]
	return st, ok
}

// Shards returns the map in use.
func (s *Store) Shards() *zen.ShardMap { return s.cur.Load().m }

func (s *Store) newState(m *zen.ShardMap) (*state, error) {
	if err := m.CheckStores(s.names...); err != nil {
		return nil, fmt.Errorf("zenroute: %w", err)
	}
	st := &state{m: m, changed: make(chan struct{}), drained: make(chan struct{})}
	rs := m.Ranges()
	for i, r := range rs {
		start, stop := zen.ShardKeyRange(r.From, r.To)
		if i == 0 {
			start = nil
		}
		if i == len(rs)-1 {
			stop = nil // keys past the last shard (zen writes none) belong to the last range
		}
		if n := len(st.segs); n > 0 && st.segs[n-1].store == r.Store {
			st.segs[n-1].stop = stop
			continue
		}
		st.segs = append(st.segs, segment{start: start, stop: stop, store: r.Store})
	}
	return st, nil
}

// Swap installs m and waits until every write that started under the previous map has finished
// (or ctx is done). Writes that start afterwards route by m. A map naming an unknown store is
// refused and changes nothing.
func (s *Store) Swap(ctx context.Context, m *zen.ShardMap) error {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	next, err := s.newState(m)
	if err != nil {
		return err
	}
	old := s.cur.Swap(next)
	old.mu.Lock()
	old.retired = true
	if old.n == 0 {
		close(old.drained)
	}
	old.mu.Unlock()
	close(old.changed)
	select {
	case <-old.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("zenroute: wait for writes under the previous shard map: %w", ctx.Err())
	}
}

// SetShards installs m, as zen.Graph.SetShards does (the setter of a shardwatch.Watcher), and
// waits for the writes in flight under the previous map. A nil or invalid map is ignored.
func (s *Store) SetShards(m *zen.ShardMap) {
	if m != nil {
		_ = s.Swap(context.Background(), m)
	}
}

// range index of a key's shard (keys past the map belong to its last range).
func rangeOf(m *zen.ShardMap, key []byte) zen.ShardRange {
	sh := min(zen.KeyShard(key), uint32(m.HighestShard()))
	r, _ := m.RangeFor(uint16(sh))
	return r
}

// acquire returns the state a write of keys may run under, counted in flight: the current one
// once none of keys is fenced in it. The caller must release it.
func (s *Store) acquire(ctx context.Context, keys [][]byte) (*state, error) {
	for _, k := range keys {
		if len(k) == 0 {
			return nil, errors.New("zenroute: empty row key") // refused before any store writes
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var (
		tm    *time.Timer
		timer <-chan time.Time
	)
	defer func() {
		if tm != nil {
			tm.Stop()
		}
	}()
	startTimer := func() {
		if tm == nil {
			tm = time.NewTimer(s.wait)
			timer = tm.C
		}
	}
	for {
		if s.lease != nil {
			ok, extended := s.lease.check()
			if !ok {
				startTimer()
				select {
				case <-extended:
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-timer:
					return nil, ErrNotCurrent
				}
			}
		}
		st := s.cur.Load()
		st.mu.Lock()
		if st.retired {
			st.mu.Unlock()
			continue // a Swap is installing a newer map right now
		}
		fenced := -1
		for i, k := range keys {
			if rangeOf(st.m, k).Fenced {
				fenced = i
				break
			}
		}
		if fenced < 0 {
			st.n++
			st.mu.Unlock()
			return st, nil
		}
		st.mu.Unlock()
		startTimer()
		select {
		case <-st.changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer:
			r := rangeOf(st.m, keys[fenced])
			return nil, fmt.Errorf("write to shard %d (range %d–%d): %w", zen.KeyShard(keys[fenced]), r.From, r.To, ErrFenced)
		}
	}
}

// settled is the outcome of a write that ran under an acquired state, checked against the
// lease while the write is still counted in flight (so no newer map can have been confirmed in
// between): a write that succeeded after the lease lapsed may have been delayed past a switch of
// the map, and is not acknowledged.
func (s *Store) settled(err error) error {
	if err == nil && s.lease != nil && !s.lease.Valid() {
		return ErrLeaseLapsed
	}
	return err
}

func (st *state) release() {
	st.mu.Lock()
	st.n--
	if st.n == 0 && st.retired {
		close(st.drained)
	}
	st.mu.Unlock()
}

// Table returns the named table: routed over every store when it is shard-keyed, else the
// default store's table itself.
func (s *Store) Table(ctx context.Context, name string) (zen.Table, error) {
	if !s.routed[name] {
		return s.stores[s.def].Table(ctx, name)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	t := &Table{s: s, name: name, inner: map[string]zen.Table{}}
	for _, n := range s.names {
		it, err := s.stores[n].Table(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("zenroute: open %s on store %s: %w", name, n, err)
		}
		t.inner[n] = it
	}
	s.tables[name] = t
	return t, nil
}

// Close closes nothing: the caller owns the stores routed over.
func (s *Store) Close() error { return nil }
