package zenpebble

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Compactions bounds the compactions of several stores of one process together: at most Limit
// run at once across them, where each Pebble database on its own runs one (and more when it
// falls behind). A compaction merges and rewrites sstables for as long as it takes, hundreds
// of milliseconds to seconds of a processor; when the stores of a process all compact at once
// they take every processor, and the requests the process serves wait behind them. When a slot
// frees, it goes to the store whose waiting compaction matters most (one Pebble needs before
// one it would only like, then Pebble's priority and score). A store that Pebble finds falling
// behind (L0 too deep, or too much compaction debt) may run two compactions, regardless of the
// bound, so that its writes do not stall waiting for the others. Flushes of memtables are not
// compactions and are never held.
//
// Share one Compactions between stores with WithCompactions; Close it after them.
type Compactions struct {
	limit int

	mu       sync.Mutex
	running  int // compactions granted and not done, across the stores
	stores   []*storeCompactions
	granting bool // one goroutine grants at a time
	cond     *sync.Cond
	stop     chan struct{}
	poke     chan struct{}
	done     chan struct{}
	waits    int64 // compactions that found every slot taken, counted
	escalate int64 // compactions run past the bound for a store that fell behind
}

// NewCompactions returns a bound of limit compactions at once (at least 1) for the stores
// that share it.
func NewCompactions(limit int) *Compactions {
	c := &Compactions{limit: max(1, limit), stop: make(chan struct{}), poke: make(chan struct{}, 1), done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.grantPeriodically()
	return c
}

// CompactionStats are counts of a Compactions bound.
type CompactionStats struct {
	Limit     int   // compactions at once across the stores, at most
	Running   int   // compactions running now
	Waited    int64 // times a store's compaction found every slot taken
	Escalated int64 // compactions run past the bound because their store fell behind
}

// Stats returns the bound's counts.
func (c *Compactions) Stats() CompactionStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CompactionStats{Limit: c.limit, Running: c.running, Waited: c.waits, Escalated: c.escalate}
}

// Close stops the bound's background granting. Close the stores first.
func (c *Compactions) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
	}
}

// grantPeriodically offers free slots to the stores every 100 ms and when poked: Pebble asks
// for a slot (TrySchedule) only at some moments (a flush or a compaction ending, a write), and
// does not ask again while it knows a compaction is waiting, so a slot freed in between would
// otherwise stay idle (pebble.ConcurrencyLimitScheduler samples the same way).
func (c *Compactions) grantPeriodically() {
	defer close(c.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.poke:
		}
		c.grant()
	}
}

// forStore returns the pebble.CompactionScheduler of one store (Pebble registers each
// database with a scheduler of its own).
func (c *Compactions) forStore() *storeCompactions {
	return &storeCompactions{c: c}
}

// storeCompactions is one store's side of Compactions: a pebble.CompactionScheduler.
type storeCompactions struct {
	c            *Compactions
	db           pebble.DBForCompaction // set by Register, before any other call
	running      int                    // under c.mu
	unregistered bool                   // under c.mu
}

var _ pebble.CompactionScheduler = (*storeCompactions)(nil)

// Register implements pebble.CompactionScheduler.
func (s *storeCompactions) Register(_ int, db pebble.DBForCompaction) {
	s.db = db
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.stores = append(s.c.stores, s)
}

// Unregister implements pebble.CompactionScheduler: once it returns, the bound calls nothing
// of the store's database.
func (s *storeCompactions) Unregister() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	s.unregistered = true
	for c.granting {
		c.cond.Wait()
	}
	for i, o := range c.stores {
		if o == s {
			c.stores = append(c.stores[:i], c.stores[i+1:]...)
			break
		}
	}
}

// TrySchedule implements pebble.CompactionScheduler. Pebble calls it with its database's
// mutex held, so it calls only GetAllowedWithoutPermission, which takes none.
func (s *storeCompactions) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.unregistered {
		return false, nil
	}
	ok, past := s.mayRunLocked(s.db.GetAllowedWithoutPermission())
	if !ok {
		c.waits++
		return false, nil
	}
	s.startLocked(past)
	return true, &compactionGrant{s: s}
}

// mayRunLocked reports whether the store may start one more compaction when Pebble allows it
// allowed at once, and whether that one runs past the process's bound.
func (s *storeCompactions) mayRunLocked(allowed int) (ok, past bool) {
	switch {
	case s.running >= allowed:
		return false, false
	case s.c.running < s.c.limit:
		return true, false
	case allowed > 1:
		// Pebble allows this store more than one compaction: it is falling behind.
		return true, true
	}
	return false, false
}

func (s *storeCompactions) startLocked(past bool) {
	s.running++
	s.c.running++
	if past {
		s.c.escalate++
	}
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler: a store may now be
// allowed more, so free slots are offered again (on the granting goroutine: Pebble may hold
// its mutex here).
func (s *storeCompactions) UpdateGetAllowedWithoutPermission() {
	select {
	case s.c.poke <- struct{}{}:
	default:
	}
}

// compactionGrant is the handle of one granted compaction.
type compactionGrant struct{ s *storeCompactions }

// Started implements pebble.CompactionGrantHandle.
func (g *compactionGrant) Started() {}

// MeasureCPU implements pebble.CompactionGrantHandle.
func (g *compactionGrant) MeasureCPU(pebble.CompactionGoroutineKind) {}

// CumulativeStats implements pebble.CompactionGrantHandle.
func (g *compactionGrant) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: the slot goes to the store that needs it most.
func (g *compactionGrant) Done() {
	c := g.s.c
	c.mu.Lock()
	g.s.running--
	c.running--
	c.mu.Unlock()
	c.grant()
}

// grant gives the free slots to the stores with a compaction waiting, the one that matters most
// first. Pebble's DB methods are called without c.mu held (its mutexes are taken before ours).
func (c *Compactions) grant() {
	c.mu.Lock()
	for c.granting {
		c.cond.Wait()
	}
	c.granting = true
	defer func() {
		c.mu.Lock()
		c.granting = false
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	for {
		stores := append([]*storeCompactions(nil), c.stores...)
		c.mu.Unlock()
		var best *storeCompactions
		var bestW pebble.WaitingCompaction
		for _, s := range stores {
			c.mu.Lock()
			ok, _ := s.mayRunLocked(s.db.GetAllowedWithoutPermission())
			ok = ok && !s.unregistered
			c.mu.Unlock()
			if !ok {
				continue
			}
			waiting, w := s.db.GetWaitingCompaction()
			if waiting && (best == nil || moreUrgent(w, bestW)) {
				best, bestW = s, w
			}
		}
		if best == nil {
			return
		}
		c.mu.Lock()
		ok, past := best.mayRunLocked(best.db.GetAllowedWithoutPermission())
		if !ok || best.unregistered {
			c.mu.Unlock()
			return
		}
		best.startLocked(past)
		c.mu.Unlock()
		if !best.db.Schedule(&compactionGrant{s: best}) {
			c.mu.Lock()
			best.running--
			c.running--
			if past {
				c.escalate--
			}
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
	}
}

// moreUrgent orders waiting compactions as Pebble does: a needed one before an optional one,
// then by priority, then by score.
func moreUrgent(a, b pebble.WaitingCompaction) bool {
	if a.Optional != b.Optional {
		return !a.Optional
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Score > b.Score
}
