package feedsvc

import (
	"sync"
	"sync/atomic"

	"github.com/smartfeed/smartfeed/zen"
)

// userMarks remembers one Unix-millisecond time per user, for at most max users: past that it
// forgets them all at once. Its users (the prepared-chunk hints, the generator calls of
// Config.MinChunkInterval, the recent activity answers) are hints whose loss only costs what
// having none costs, so a bound by clearing is enough and keeps each mark one map entry.
type userMarks struct {
	m   sync.Map // zen.ID -> int64
	n   atomic.Int64
	max int64
}

// set marks user at ms.
func (u *userMarks) set(user zen.ID, ms int64) {
	if u.n.Load() >= u.max {
		u.m.Clear()
		u.n.Store(0)
	}
	if _, loaded := u.m.Swap(user, ms); !loaded {
		u.n.Add(1)
	}
}

// get returns user's mark.
func (u *userMarks) get(user zen.ID) (int64, bool) {
	v, ok := u.m.Load(user)
	if !ok {
		return 0, false
	}
	return v.(int64), true
}

// forget drops user's mark.
func (u *userMarks) forget(user zen.ID) {
	if _, ok := u.m.LoadAndDelete(user); ok {
		u.n.Add(-1)
	}
}

// ownedChunks holds the prepared chunks this process recorded and no page of it has shown yet
// (by chunk ID): the chunks this process alone may show as fresh, each once (take). It holds at
// most max; past that it forgets them all at once, which only costs those chunks their fresh
// label (their pins stay at the top of the feed, shown as feed items).
type ownedChunks struct {
	mu  sync.Mutex
	m   map[string]struct{}
	max int
}

// add records chunk as prepared by this process and not shown.
func (o *ownedChunks) add(chunk string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= o.max {
		o.m = make(map[string]struct{})
	}
	o.m[chunk] = struct{}{}
}

// take reports whether chunk was held, and forgets it: of the calls for one chunk, at most one
// is true.
func (o *ownedChunks) take(chunk string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[chunk]; !ok {
		return false
	}
	delete(o.m, chunk)
	return true
}
