package quiet

import (
	"context"
	"time"

	"github.com/smartfeed/smartfeed/internal/lowprio"
)

// Lanes bound how much of a process's background work runs at once, so that it cannot hold
// every processor while requests wait for one. One Lanes is shared by every kind of background
// work of a process that serves requests: the feed's preparations and inline materializations,
// and the CPU-heavy part of the fanout deliveries a worker runs in the same process. A nil
// *Lanes bounds nothing. Its methods are safe for concurrent use.
//
// Lanes made with Nice also run their work at a lower CPU priority than the rest of the
// process: Do and TryDo run the work on an operating-system thread of the lanes' own whose
// nice value is raised, as RocksDB lowers the priority of its compaction threads. Go's
// scheduler has no priorities, and a page's goroutine that becomes runnable while background
// work holds the processors waits up to a scheduler time slice (10 ms) for one, at every step
// of the page; the operating system's scheduler does have priorities, and runs a page's thread
// before a background thread whenever both want a core. A thread is made when work comes and
// no idle one is waiting, and ends after a second without work; at most one per lane runs work
// at a time.
type Lanes struct {
	sem  chan struct{}
	nice int
	// lowErr is why the lanes' threads could not be lowered (nil: they were, or Nice was not
	// asked for); then Do runs the work in the caller's goroutine.
	lowErr error
	// handoff passes work to an idle lane thread.
	handoff chan *laneWork
}

// Option configures Lanes.
type Option func(*Lanes)

// Nice makes the lanes run their work at a nice value delta above the process's (at most 19,
// the lowest priority): the work gets a core only as far as the process's other threads leave
// it one, in proportion to their weights (at delta 10, about a tenth of a contended core). A
// delta ≤ 0 leaves the priority alone.
func Nice(delta int) Option { return func(l *Lanes) { l.nice = min(max(0, delta), lowprio.MaxNice) } }

// laneThreadIdle is how long a lane's thread waits for work before it ends.
const laneThreadIdle = time.Second

// laneWork is one call of Do on a lane's thread.
type laneWork struct {
	fn    func()
	done  chan struct{}
	panic any // what fn panicked with, re-raised in Do's caller
	ok    bool
}

// NewLanes returns n lanes (at least one).
func NewLanes(n int, opts ...Option) *Lanes {
	l := &Lanes{sem: make(chan struct{}, max(1, n)), handoff: make(chan *laneWork)}
	for _, o := range opts {
		o(l)
	}
	if l.nice > 0 {
		l.lowErr = lowprio.Probe(l.nice)
	}
	return l
}

// Priority reports the nice delta the lanes' work runs at (0: the process's priority) and, when
// a delta was asked for but the operating system refused it, why.
func (l *Lanes) Priority() (delta int, err error) {
	switch {
	case l == nil:
		return 0, nil
	case l.lowErr != nil:
		return 0, l.lowErr
	}
	return l.nice, nil
}

// Cap is the number of lanes (0 for nil Lanes: no bound).
func (l *Lanes) Cap() int {
	if l == nil {
		return 0
	}
	return cap(l.sem)
}

// InUse is the number of lanes taken now.
func (l *Lanes) InUse() int {
	if l == nil {
		return 0
	}
	return len(l.sem)
}

// Do waits for a lane until ctx is done, runs fn in it (at the lanes' priority) and gives the
// lane back; it returns ctx's error when no lane came free in time, and then fn did not run.
// Once fn started, Do returns when it returns; a panic in fn is raised again in Do's caller.
func (l *Lanes) Do(ctx context.Context, fn func()) error {
	if err := l.Acquire(ctx); err != nil {
		return err
	}
	defer l.Release()
	l.run(fn)
	return nil
}

// TryDo waits up to wait for a lane, or until ctx is done, and reports whether it got one; then
// it has run fn in it, as Do does.
func (l *Lanes) TryDo(ctx context.Context, wait time.Duration, fn func()) bool {
	if !l.TryAcquire(ctx, wait) {
		return false
	}
	defer l.Release()
	l.run(fn)
	return true
}

// run runs fn on a lane thread at the lanes' priority, or in the caller without one.
func (l *Lanes) run(fn func()) {
	if l == nil || l.nice == 0 || l.lowErr != nil {
		fn()
		return
	}
	w := &laneWork{fn: fn, done: make(chan struct{})}
	select {
	case l.handoff <- w:
	default:
		go l.thread(w)
	}
	<-w.done
	if !w.ok {
		panic(w.panic)
	}
}

// thread is a lane's thread: it runs w, then whatever work is handed to it, until it has been
// idle for laneThreadIdle. Its goroutine stays locked to the thread, so the thread, whose
// priority was lowered, ends with it.
func (l *Lanes) thread(w *laneWork) {
	// The probe succeeded; were this to fail, the work would run at the process's priority.
	_ = lowprio.LowerThread(l.nice)
	for w != nil {
		runWork(w)
		w = l.idle()
	}
}

// idle waits for the next work handed to this thread; nil when none came in laneThreadIdle.
func (l *Lanes) idle() *laneWork {
	t := time.NewTimer(laneThreadIdle)
	defer t.Stop()
	select {
	case w := <-l.handoff:
		return w
	case <-t.C:
		return nil
	}
}

// runWork runs w's function and tells its caller, with the panic if it panicked.
func runWork(w *laneWork) {
	defer close(w.done)
	defer func() {
		if !w.ok {
			w.panic = recover()
		}
	}()
	w.fn()
	w.ok = true
}

// Acquire waits for a lane until ctx is done. Every nil return is matched by one Release. The
// holder's work runs where it is, at the process's priority: background work uses Do.
func (l *Lanes) Acquire(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryAcquire waits up to wait for a lane, or until ctx is done, and reports whether it got one
// (then the caller releases it).
func (l *Lanes) TryAcquire(ctx context.Context, wait time.Duration) bool {
	if l == nil {
		return true
	}
	select {
	case l.sem <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.sem <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Release gives back a lane Acquire or TryAcquire took.
func (l *Lanes) Release() {
	if l != nil {
		<-l.sem
	}
}
