package zenpebble

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/lowprio"
)

// The store's side of Pebble's events and background work: write stalls and flushes counted,
// the states of the database held so that readers do not pay for deleting obsolete files, old
// memtables flushed, and Pebble's log lines.

// events is the store's listener of Pebble's events: flushes and write stalls, and the start of
// a compaction, whose thread it lowers by nice (WithCompactionNice). Pebble calls it with its
// own lock held: it only counts, logs and makes two system calls.
func (s *Store) events(log *zap.Logger, nice int) *pebble.EventListener {
	return &pebble.EventListener{
		CompactionBegin: func(i pebble.CompactionInfo) {
			// Pebble runs every compaction on a goroutine of its own (DB.compact), which ends
			// after it: the lowered thread ends with it.
			if nice > 0 && !fromL0(i) {
				if err := lowprio.LowerThread(nice); err == nil {
					s.lowered.Add(1)
				}
			}
		},
		FlushEnd: func(pebble.FlushInfo) { s.lastFlush.Store(time.Now().UnixNano()) },
		WriteStallBegin: func(i pebble.WriteStallBeginInfo) {
			s.stalls.Add(1)
			s.stallAt.Store(time.Now().UnixNano())
			log.Warn("pebble write stall: writes wait", zap.String("reason", i.Reason))
		},
		WriteStallEnd: func() {
			d := time.Duration(max(0, time.Now().UnixNano()-s.stallAt.Load()))
			s.stallNanos.Add(int64(d))
			log.Warn("pebble write stall ended", zap.Duration("took", d))
		},
	}
}

// fromL0 reports whether the compaction reads L0.
func fromL0(i pebble.CompactionInfo) bool {
	for _, in := range i.Input {
		if in.Level == 0 {
			return true
		}
	}
	return false
}

// holdEvery and holdFor: holdStates takes a reference to the database's current state every
// holdEvery and drops it holdFor later.
const (
	holdEvery = 20 * time.Millisecond
	holdFor   = time.Second
)

// holdStates keeps a reference to each state of the database it sees (an iterator, opened and
// never positioned, every holdEvery) for holdFor, so that the reference dropped last is most
// often its own. Whoever drops the last reference to a state that a flush or compaction
// replaced deletes its obsolete files, and evicts their blocks from the block cache first, on
// its own goroutine, yielding every five blocks. In the demo that goroutine was a GetFeed's
// read, which waited 280 ms to run again (docs/read-path.md, "A request that paid for a
// compaction"). A state current for less than holdEvery may still be released by a reader.
func (s *Store) holdStates() {
	defer close(s.held)
	tick := time.NewTicker(holdEvery)
	defer tick.Stop()
	const depth = int(holdFor / holdEvery)
	ring := make([]*pebble.Iterator, depth)
	next := 0
	defer func() {
		for _, it := range ring {
			if it != nil {
				_ = it.Close()
			}
		}
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.life.RLock()
		if s.closed {
			s.life.RUnlock()
			return
		}
		it, err := s.db.NewIter(nil)
		s.life.RUnlock()
		if err != nil {
			continue
		}
		if old := ring[next]; old != nil {
			_ = old.Close()
		}
		ring[next] = it
		next = (next + 1) % depth
		s.holds.Add(1)
	}
}

// flushOld flushes the memtable when the last flush ended at least d ago and the log holds
// at least flushMinBytes not yet flushed (WithFlushAfter).
func (s *Store) flushOld(d time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(max(d/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if time.Since(time.Unix(0, s.lastFlush.Load())) < d {
			continue
		}
		s.life.RLock()
		if !s.closed && s.db.Metrics().WAL.Size >= flushMinBytes {
			if _, err := s.db.AsyncFlush(); err == nil {
				// Not again before this flush has ended and d has passed.
				s.lastFlush.Store(time.Now().UnixNano())
			}
		}
		s.life.RUnlock()
	}
}

// zapLogger adapts a zap logger to pebble.Logger.
type zapLogger struct{ l *zap.SugaredLogger }

func (z zapLogger) Infof(format string, args ...any)  { z.l.Infof(format, args...) }
func (z zapLogger) Errorf(format string, args ...any) { z.l.Errorf(format, args...) }

// Fatalf logs and panics: Pebble calls it only on corruption it cannot recover from, and
// expects it not to return.
func (z zapLogger) Fatalf(format string, args ...any) {
	z.l.Errorf(format, args...)
	panic(fmt.Sprintf("pebble: "+format, args...))
}
