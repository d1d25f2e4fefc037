package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
	"github.com/smartfeed/smartfeed/zen/zenhbase"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// inlineQueue is an in-process Enqueuer and Registrar: tasks wait in a FIFO until run drains it,
// calling the registered handlers directly. Like pinlater, a task whose ID is already pending is
// not enqueued again.
type inlineQueue struct {
	mu       sync.Mutex
	pending  []*pinlater.Task
	ids      map[string]bool
	handlers map[string]pinlater.Handler
	counts   map[string]int // enqueued per type
}

func newInlineQueue() *inlineQueue {
	return &inlineQueue{ids: map[string]bool{}, handlers: map[string]pinlater.Handler{}, counts: map[string]int{}}
}

func (q *inlineQueue) Handle(typ string, h pinlater.Handler) { q.handlers[typ] = h }

func (q *inlineQueue) Enqueue(_ context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.ID() != "" && q.ids[t.ID()] {
		return &pinlater.Info{ID: t.ID(), Type: t.Type(), Duplicate: true}, nil
	}
	if t.ID() != "" {
		q.ids[t.ID()] = true
	}
	q.pending = append(q.pending, t)
	q.counts[t.Type()]++
	return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
}

func (q *inlineQueue) pop() *pinlater.Task {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return nil
	}
	t := q.pending[0]
	q.pending = q.pending[1:]
	delete(q.ids, t.ID())
	return t
}

func (q *inlineQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// run drains the queue (tasks enqueued by handlers included).
func (q *inlineQueue) run(ctx context.Context) error {
	for t := q.pop(); t != nil; t = q.pop() {
		h := q.handlers[t.Type()]
		if h == nil {
			return fmt.Errorf("no handler for %s", t.Type())
		}
		if err := h.ProcessTask(ctx, t); err != nil {
			return fmt.Errorf("%s %s: %w", t.Type(), t.Payload(), err)
		}
	}
	return nil
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// backends lists the stores the scenario and handler tests run on. HBase is included when the
// test environment provides it (testenv: skipped under -short and with SMARTFEED_NO_HBASE=1).
var backends = []string{"mem", "pebble", "hbase"}

func openStore(t testing.TB, name string) zen.Store {
	t.Helper()
	switch name {
	case "mem":
		return zenmem.New()
	case "pebble":
		s, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	case "hbase":
		zk := testenv.HBase(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		prefix := fmt.Sprintf("wk%d_", time.Now().UnixNano())
		s, err := zenhbase.Open(ctx, zk, zenhbase.Options{TablePrefix: prefix, SplitEvery: 4096, FlushInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, n := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard, "pools", StateTable} {
				_ = s.Drop(ctx, n)
			}
			s.Close()
		})
		return s
	}
	t.Fatalf("unknown backend %q", name)
	return nil
}

// env is a worker wired to a store, an inline queue and a test clock.
type env struct {
	g     *zen.Graph
	w     *Worker
	pub   *Publisher
	q     *inlineQueue
	clk   *clock
	pools zen.Table
	state zen.Table
}

func newEnv(t testing.TB, s zen.Store, cfg Config) *env { return newEnvWrap(t, s, cfg, nil) }

// newEnvWrap is newEnv with the pools table wrapped (fault injection).
func newEnvWrap(t testing.TB, s zen.Store, cfg Config, wrap func(zen.Table) zen.Table) *env {
	t.Helper()
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)}
	g, err := zen.NewGraph(ctx, s, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(0)
	pools, err := s.Table(ctx, "pools")
	if err != nil {
		t.Fatal(err)
	}
	state, err := s.Table(ctx, StateTable)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		pools = wrap(pools)
	}
	q := newInlineQueue()
	w, err := New(g, pools, state, q, cfg, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	w.Register(q)
	return &env{g: g, w: w, pub: NewPublisher(q, g, cfg.HotFollowers), q: q, clk: clk, pools: pools, state: state}
}

func seqOf(t time.Time) seq.Seq { return seq.FromMillis(t.UnixMilli()) }

// faultyTable fails the mutating call number failAt (1-based; 0 = never) with errFault.
type faultyTable struct {
	zen.Table
	mu     sync.Mutex
	calls  int
	failAt int
}

var errFault = errors.New("injected fault")

func (f *faultyTable) hit() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failAt > 0 && f.calls == f.failAt {
		return errFault
	}
	return nil
}

func (f *faultyTable) Apply(ctx context.Context, m []zen.Mutation) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.Table.Apply(ctx, m)
}

func (f *faultyTable) CheckAndSet(ctx context.Context, k, exp, v []byte) (bool, error) {
	if err := f.hit(); err != nil {
		return false, err
	}
	return f.Table.CheckAndSet(ctx, k, exp, v)
}

// snapshot returns every row of t.
func snapshot(t testing.TB, tb zen.Table) []zen.KV {
	t.Helper()
	rows, err := tb.Scan(context.Background(), zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
