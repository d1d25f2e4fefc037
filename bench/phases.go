package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// World is a built social graph on a System: the model and the users' IDs.
type World struct {
	M    *Model
	IDs  []uint64
	Load *LoadReport // the bulk load that wrote the graph (nil: built through the API)
}

// Progress reports a phase's advance; Run prints bars on a terminal, plain lines otherwise.
type Progress func(phase string, done, total int)

// ModelLoader is a System that can write a model's whole population at once with the bulk
// loader (smartfeed load's), the rows the graph API would write, instead of one call per user
// and per follow. It returns the users' IDs by model index and what the load did.
type ModelLoader interface {
	LoadModel(ctx context.Context, m *Model, progress Progress) ([]uint64, *LoadReport, error)
}

// LoadReport is a bulk load of the graph as results.json keeps it.
type LoadReport struct {
	Users      int64   `json:"users"`
	Follows    int64   `json:"follows"`
	Rows       int64   `json:"rows"`    // rows written: objects, keys, edges and inverses, counts
	Seconds    float64 `json:"seconds"` // wall time of the load
	RowsPerSec float64 `json:"rows_per_sec"`
	PeakRSSMiB float64 `json:"peak_rss_mib"` // the process's peak RSS after the load
	// HFiles is how many HFiles HBase's own bulk load moved into the tables, SSTables how many
	// sstables Pebble ingested (both 0: the rows went through the store's writes).
	HFiles   int `json:"hfiles,omitempty"`
	SSTables int `json:"sstables,omitempty"`
}

// Build writes the model's users and follows on sys: with its bulk loader when sys is a
// ModelLoader, else through its API with parallel writers.
func Build(ctx context.Context, sys System, m *Model, progress Progress) (*World, error) {
	if l, ok := sys.(ModelLoader); ok {
		ids, rep, err := l.LoadModel(ctx, m, progress)
		if err != nil {
			return nil, fmt.Errorf("load the graph: %w", err)
		}
		rep.PeakRSSMiB = peakRSSMiB()
		return &World{M: m, IDs: ids, Load: rep}, nil
	}
	ids, err := sys.CreateUsers(ctx, m.Users)
	if err != nil {
		return nil, fmt.Errorf("create users: %w", err)
	}
	type edge struct{ a, b int }
	edges := make(chan edge, 1024)
	var done atomic.Int64
	total := m.Edges()
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range edges {
				if err := sys.Follow(ctx, ids[e.a], ids[e.b]); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				if n := done.Add(1); n%2000 == 0 && progress != nil {
					progress("graph", int(n), total)
				}
			}
		}()
	}
feed:
	for u := range m.Users {
		for _, f := range m.FollowersOf(u) {
			select {
			case edges <- edge{f, u}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(edges)
	wg.Wait()
	if progress != nil {
		progress("graph", total, total)
	}
	if firstErr != nil {
		return nil, fmt.Errorf("follows: %w", firstErr)
	}
	return &World{M: m, IDs: ids}, ctx.Err()
}

// fanout publishes events at rate for d and measures the lag of sampled followers (the time
// from the event's enqueue until the pin is in that follower's pool).
func fanout(ctx context.Context, sys System, w *World, rate float64, d time.Duration, salt uint64, series *[]lagPoint, t0 time.Time) (events int, lags *Latencies, err error) {
	authors := w.M.Authors(int(rate*d.Seconds())+1, salt)
	lags = &Latencies{}
	var mu sync.Mutex
	var errs atomic.Int64
	var pollers sync.WaitGroup
	events = paced(ctx, rate, d, len(authors), 64, func(i int) {
		a := authors[i]
		// Sample up to 3 followers, the last ones of the list; the lag is the slowest.
		fs := w.M.FollowersOf(a)
		var watch []uint64
		if len(fs) > 0 && i%4 == 0 {
			for _, f := range fs[max(0, len(fs)-3):] {
				watch = append(watch, w.IDs[f])
			}
		}
		enq := time.Now()
		pin, err := sys.Pin(ctx, w.IDs[a], watch)
		if err != nil {
			errs.Add(1)
			return
		}
		if len(watch) == 0 {
			return
		}
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			deadline := enq.Add(30 * time.Second)
			left := watch
			// The arrival time is the worker's, so the poll interval only delays noticing it.
			var last time.Time
			for len(left) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
				keep := left[:0]
				for _, f := range left {
					at, ok, err := sys.Arrived(ctx, f, pin)
					if err != nil || !ok {
						keep = append(keep, f)
						continue
					}
					if at.After(last) {
						last = at
					}
				}
				left = keep
				if len(left) > 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if len(left) == 0 {
				l := last.Sub(enq)
				lags.Add(l)
				if series != nil {
					mu.Lock()
					*series = append(*series, lagPoint{at: enq.Sub(t0), lag: l})
					mu.Unlock()
				}
			} else {
				lags.Add(30 * time.Second) // not there after 30 s: counted at the cap
			}
		}()
	})
	pollers.Wait()
	if n := errs.Load(); n > 0 {
		return events, lags, fmt.Errorf("%d of %d events failed to publish", n, events)
	}
	return events, lags, nil
}

// makePins makes one pin per author, 64 at a time, publishing nothing, and returns their IDs
// (0 for a pin that failed).
func makePins(ctx context.Context, pp Prepinner, w *World, authors []int) ([]uint64, error) {
	pins := make([]uint64, len(authors))
	var errs atomic.Int64
	paced(ctx, math.Inf(1), 0, len(authors), 64, func(i int) {
		pin, err := pp.MakePin(ctx, w.IDs[authors[i]])
		if err != nil {
			errs.Add(1)
			return
		}
		pins[i] = pin
	})
	if e := errs.Load(); e > 0 {
		return pins, fmt.Errorf("%d of %d pins failed to make", e, len(authors))
	}
	return pins, ctx.Err()
}

// burst publishes one event per author as fast as 64 publishers can, with no follower watched
// (the lag pollers would take CPU from the worker the peers do not pay), and returns how many
// were published. With pins (made by makePins, one per author) it publishes their events
// (sys is then a Prepinner); without, each event's pin is made as it is published (Pin).
func burst(ctx context.Context, sys System, w *World, authors []int, pins []uint64) (int, error) {
	var errs atomic.Int64
	pp, _ := sys.(Prepinner)
	n := paced(ctx, math.Inf(1), 0, len(authors), 64, func(i int) {
		var err error
		switch {
		case pins == nil || pp == nil:
			_, err = sys.Pin(ctx, w.IDs[authors[i]], nil)
		case pins[i] == 0:
			err = errors.New("its pin was not made")
		default:
			err = pp.PublishPin(ctx, w.IDs[authors[i]], pins[i])
		}
		if err != nil {
			errs.Add(1)
		}
	})
	if e := errs.Load(); e > 0 {
		return n, fmt.Errorf("%d of %d events failed to publish", e, n)
	}
	return n, nil
}

// drain waits until no fanout task is pending (or limit passes) and returns how long it took.
func drain(ctx context.Context, sys System, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		if n, err := sys.FanoutPending(ctx); err == nil && n == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// reads offers calls at rate with conc in flight for d and returns their latencies and errors.
// The successful calls' latencies come in the order they were recorded, each beside its start.
func reads(ctx context.Context, rate float64, d time.Duration, conc int, call func(i int) error) (*Latencies, []timedCall, int, float64) {
	lat := &Latencies{}
	var inOrder []timedCall
	var mu sync.Mutex
	var errs atomic.Int64
	start := time.Now()
	n := paced(ctx, rate, d, 0, conc, func(i int) {
		t := time.Now()
		err := call(i)
		took := time.Since(t)
		if err != nil {
			errs.Add(1)
			return
		}
		lat.Add(took)
		mu.Lock()
		inOrder = append(inOrder, timedCall{at: t, took: took})
		mu.Unlock()
	})
	_ = n
	el := time.Since(start).Seconds()
	return lat, inOrder, int(errs.Load()), float64(lat.Summary().N) / el
}

// beside makes calls at rate with conc in flight for as long as peer runs, and returns the
// latencies of those that succeeded. The calls in flight when peer returns are cancelled
// (they fail, and are not counted); peer's error is returned.
func beside(ctx context.Context, rate float64, conc int, call func(ctx context.Context, i int) error, peer func(ctx context.Context) error) (Summary, error) {
	bctx, stop := context.WithCancel(ctx)
	var calls []timedCall
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until the peer is done; long enough for any peer.
		_, calls, _, _ = reads(bctx, rate, 10*time.Minute, conc, func(i int) error { return call(bctx, i) })
	}()
	err := peer(ctx)
	stop()
	<-done
	if err != nil {
		return Summary{}, err
	}
	d := make([]time.Duration, len(calls))
	for i, c := range calls {
		d[i] = c.took
	}
	return Summarize(d), nil
}

// visitOnce makes each distinct reader's first GetFeed, one after the other in the order the
// readers first appear, and returns the latencies of those that succeeded and the set of
// distinct readers. A user never seen has no prepared chunk, so these are the pages that run
// the generator; made before the serving phase, they leave it the steady state of returning
// users (each served from the chunk prepared after its last visit), and its first third is
// not every reader's first visit.
func visitOnce(ctx context.Context, sys System, w *World, readers []int, pageSize int) (Summary, map[int]bool) {
	lat := &Latencies{}
	seen := map[int]bool{}
	for _, u := range readers {
		if seen[u] {
			continue
		}
		seen[u] = true
		t := time.Now()
		if err := sys.GetFeed(ctx, w.IDs[u], pageSize); err == nil {
			lat.Add(time.Since(t))
		}
	}
	return lat.Summary(), seen
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runCPU is the CPU the run has spent: this process's (the server and the harness) and the
// other processes' of the run (the Redis servers the worker's queues and the peers use), so that
// a cost per event or per page counts the queue's work too. A process that cannot be read
// counts 0 at both ends.
func runCPU(procs []Process) time.Duration {
	c := cpuTime()
	for _, p := range procs {
		if v, err := procCPU(p.PID); err == nil {
			c += v
		}
	}
	return c
}

func peakRSSMiB() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}
