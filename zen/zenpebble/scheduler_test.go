package zenpebble

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// fakeCompactingDB is a pebble.DBForCompaction whose compactions wait in a queue: each
// Schedule starts the first and keeps its grant handle for the test to end.
type fakeCompactingDB struct {
	name    string
	allowed int
	mu      sync.Mutex
	waiting []pebble.WaitingCompaction
	running []pebble.CompactionGrantHandle
	gone    bool // unregistered: no call may come
	t       *testing.T
}

func (f *fakeCompactingDB) GetAllowedWithoutPermission() int { return f.allowed }

func (f *fakeCompactingDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		f.t.Errorf("%s: GetWaitingCompaction after Unregister", f.name)
	}
	if len(f.waiting) == 0 {
		return false, pebble.WaitingCompaction{}
	}
	return true, f.waiting[0]
}

func (f *fakeCompactingDB) Schedule(h pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone {
		f.t.Errorf("%s: Schedule after Unregister", f.name)
	}
	if len(f.waiting) == 0 {
		return false
	}
	f.waiting = f.waiting[1:]
	f.running = append(f.running, h)
	return true
}

// want queues a compaction and asks for a slot, as Pebble does when it picks one.
func (f *fakeCompactingDB) want(s *storeCompactions, w pebble.WaitingCompaction) {
	f.mu.Lock()
	f.waiting = append(f.waiting, w)
	f.mu.Unlock()
	if ok, h := s.TrySchedule(); ok {
		if !f.Schedule(h) {
			f.t.Fatalf("%s: granted with nothing waiting", f.name)
		}
	}
}

// finish ends the oldest running compaction.
func (f *fakeCompactingDB) finish() {
	f.mu.Lock()
	h := f.running[0]
	f.running = f.running[1:]
	f.mu.Unlock()
	h.Done()
}

func (f *fakeCompactingDB) counts() [2]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return [2]int{len(f.running), len(f.waiting)}
}

func newFakeDBs(t *testing.T, c *Compactions, allowed ...int) ([]*fakeCompactingDB, []*storeCompactions) {
	var dbs []*fakeCompactingDB
	var ss []*storeCompactions
	for i, a := range allowed {
		db := &fakeCompactingDB{name: fmt.Sprintf("db%d", i), allowed: a, t: t}
		s := c.forStore()
		s.Register(2, db)
		dbs, ss = append(dbs, db), append(ss, s)
	}
	return dbs, ss
}

// TestCompactionsBoundAcrossStores: with a bound of one, a second store's compaction waits
// while the first runs, and starts when it ends; the slot then goes to the most urgent waiting
// compaction (a needed one before an optional one, then priority, then score).
func TestCompactionsBoundAcrossStores(t *testing.T) {
	c := NewCompactions(1)
	defer c.Close()
	dbs, ss := newFakeDBs(t, c, 1, 1, 1)
	dbs[0].want(ss[0], pebble.WaitingCompaction{Score: 1})
	dbs[1].want(ss[1], pebble.WaitingCompaction{Optional: true, Score: 9})
	dbs[2].want(ss[2], pebble.WaitingCompaction{Score: 2})
	got := [][2]int{dbs[0].counts(), dbs[1].counts(), dbs[2].counts()}
	if diff := cmp.Diff([][2]int{{1, 0}, {0, 1}, {0, 1}}, got); diff != "" {
		t.Fatalf("running, waiting per store with a bound of 1 (-want +got):\n%s", diff)
	}
	dbs[0].finish() // the needed compaction of db2 goes before db1's optional one
	got = [][2]int{dbs[0].counts(), dbs[1].counts(), dbs[2].counts()}
	if diff := cmp.Diff([][2]int{{0, 0}, {0, 1}, {1, 0}}, got); diff != "" {
		t.Fatalf("after db0's compaction ended (-want +got):\n%s", diff)
	}
	dbs[2].finish()
	got = [][2]int{dbs[0].counts(), dbs[1].counts(), dbs[2].counts()}
	if diff := cmp.Diff([][2]int{{0, 0}, {1, 0}, {0, 0}}, got); diff != "" {
		t.Fatalf("after db2's compaction ended (-want +got):\n%s", diff)
	}
	dbs[1].finish()
	if st := c.Stats(); st.Running != 0 || st.Waited != 2 || st.Escalated != 0 {
		t.Errorf("stats %+v, want nothing running, 2 waits, no escalation", st)
	}
}

// TestCompactionsLetAStoreThatFallsBehindPass: a store Pebble allows two compactions (it is
// falling behind) runs them although the others hold the bound's slot; one it allows one waits.
func TestCompactionsLetAStoreThatFallsBehindPass(t *testing.T) {
	c := NewCompactions(1)
	defer c.Close()
	dbs, ss := newFakeDBs(t, c, 1, 2)
	dbs[0].want(ss[0], pebble.WaitingCompaction{})
	dbs[1].want(ss[1], pebble.WaitingCompaction{})
	dbs[1].want(ss[1], pebble.WaitingCompaction{})
	dbs[1].want(ss[1], pebble.WaitingCompaction{})
	if diff := cmp.Diff([][2]int{{1, 0}, {2, 1}}, [][2]int{dbs[0].counts(), dbs[1].counts()}); diff != "" {
		t.Fatalf("running, waiting per store (-want +got):\n%s", diff)
	}
	if st := c.Stats(); st.Running != 3 || st.Escalated != 2 {
		t.Errorf("stats %+v, want 3 running, 2 past the bound", st)
	}
	dbs[0].finish()
	dbs[1].finish()
	dbs[1].finish()
	dbs[1].finish()
	if st := c.Stats(); st.Running != 0 {
		t.Errorf("stats %+v, want nothing running", st)
	}
}

// TestCompactionsNeverCallAnUnregisteredStore: once a store is unregistered (its database
// closed), the slots freed by the others are not offered to it.
func TestCompactionsNeverCallAnUnregisteredStore(t *testing.T) {
	c := NewCompactions(1)
	defer c.Close()
	dbs, ss := newFakeDBs(t, c, 1, 1)
	dbs[0].want(ss[0], pebble.WaitingCompaction{})
	dbs[1].want(ss[1], pebble.WaitingCompaction{})
	ss[1].Unregister()
	dbs[1].mu.Lock()
	dbs[1].gone = true
	dbs[1].mu.Unlock()
	dbs[0].finish()
	c.grant()
	if got := dbs[1].counts(); got != [2]int{0, 1} {
		t.Errorf("unregistered store: running, waiting %v, want its compaction left waiting", got)
	}
}

// TestCompactionsStoresProgress: real stores sharing a bound of one, each written past its L0
// threshold, all compact their L0 away: a freed slot always reaches a store that waits.
func TestCompactionsStoresProgress(t *testing.T) {
	ctx := context.Background()
	c := NewCompactions(1)
	defer c.Close()
	var stores []*Store
	for range 3 {
		s, err := Open("", WithCompactions(c), WithL0CompactionThreshold(2), WithMemTableSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	var wg sync.WaitGroup
	for i, s := range stores {
		tb := openTable(t, s, "t")
		wg.Go(func() {
			for f := range 6 {
				var ms []zen.Mutation
				for k := range 2000 {
					ms = append(ms, zen.Mutation{Key: fmt.Appendf(nil, "k%06d", k*7+f), Value: make([]byte, 100)})
				}
				if err := tb.Apply(ctx, ms); err != nil {
					t.Errorf("store %d: %v", i, err)
					return
				}
				if err := s.db.Flush(); err != nil {
					t.Errorf("store %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // polling: background compactions
		var l0 []int64
		done := true
		for _, s := range stores {
			n := s.Stats().L0Files
			l0 = append(l0, n)
			done = done && n < 2
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("L0 files per store %v after 30 s: a store's compactions never got a slot (%+v)", l0, c.Stats())
		}
	}
}
