package generator

import (
	"context"
	"sort"
	"sync"

	"github.com/smartfeed/smartfeed/zen"
)

// fakePools is a hand-written in-memory Pools: one map per user, sorted on read. Like zen.Pools
// it remembers taken pins (taken tombstones): Insert leaves them out, Restore puts them back;
// and forgotten pins, which neither puts back.
type fakePools struct {
	mu        sync.Mutex
	users     map[zen.ID]map[zen.ID]zen.PoolEntry
	taken     map[zen.ID]map[zen.ID]bool
	forgotten map[zen.ID]map[zen.ID]bool
}

var _ Pools = (*fakePools)(nil)

func newFakePools() *fakePools {
	return &fakePools{users: map[zen.ID]map[zen.ID]zen.PoolEntry{}, taken: map[zen.ID]map[zen.ID]bool{},
		forgotten: map[zen.ID]map[zen.ID]bool{}}
}

func (f *fakePools) Top(_ context.Context, user zen.ID, src zen.Source, n int) ([]zen.PoolEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []zen.PoolEntry
	for _, e := range f.users[user] {
		if e.Source == src {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].Pin < out[j].Pin
	})
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

func (f *fakePools) Take(_ context.Context, user zen.ID, es []zen.PoolEntry) ([]zen.PoolEntry, error) {
	f.mu.Lock()
	var won []zen.PoolEntry
	for _, e := range es {
		if got, ok := f.users[user][e.Pin]; ok {
			delete(f.users[user], e.Pin)
			if f.taken[user] == nil {
				f.taken[user] = map[zen.ID]bool{}
			}
			f.taken[user][e.Pin] = true
			won = append(won, got)
		}
	}
	f.mu.Unlock()
	return won, nil
}

func (f *fakePools) Insert(_ context.Context, es []zen.PoolEntry) (int, error) {
	return f.insert(es, false)
}

func (f *fakePools) Restore(_ context.Context, es []zen.PoolEntry) (int, error) {
	return f.insert(es, true)
}

func (f *fakePools) insert(es []zen.PoolEntry, restore bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range es {
		if f.forgotten[e.User][e.Pin] {
			continue
		}
		if f.taken[e.User][e.Pin] {
			if !restore {
				continue
			}
			delete(f.taken[e.User], e.Pin)
		}
		m := f.users[e.User]
		if m == nil {
			m = map[zen.ID]zen.PoolEntry{}
			f.users[e.User] = m
		}
		if old, ok := m[e.Pin]; ok && old.Score >= e.Score {
			continue
		}
		m[e.Pin] = e
		n++
	}
	return n, nil
}

func (f *fakePools) Forget(_ context.Context, user zen.ID, pins []zen.ID) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.forgotten[user] == nil {
		f.forgotten[user] = map[zen.ID]bool{}
	}
	for _, pin := range pins {
		delete(f.users[user], pin)
		delete(f.taken[user], pin)
		f.forgotten[user][pin] = true
	}
	return len(pins), nil
}

func (f *fakePools) Expire(_ context.Context, user zen.ID, olderThanMs int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for pin, e := range f.users[user] {
		if e.CreatedMs < olderThanMs {
			delete(f.users[user], pin)
			n++
		}
	}
	return n, nil
}

// all returns the user's entries, best first per source.
func (f *fakePools) all(user zen.ID) []zen.PoolEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []zen.PoolEntry
	for _, e := range f.users[user] {
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

func sortEntries(es []zen.PoolEntry) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].Source != es[j].Source {
			return es[i].Source < es[j].Source
		}
		if es[i].Score != es[j].Score {
			return es[i].Score > es[j].Score
		}
		return es[i].Pin < es[j].Pin
	})
}
