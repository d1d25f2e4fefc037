package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func userID(t testing.TB, n uint64) zen.ID {
	t.Helper()
	id, err := zen.NewID(7, zen.TypeUser, n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pinID(n uint64) zen.ID {
	id, err := zen.NewID(7, zen.TypePin, n)
	if err != nil {
		panic(err)
	}
	return id
}

// fakeGen hands out chunks of fresh pins from one counter, so no two chunks share a pin, the
// way the generator's Take does. It records settles.
type fakeGen struct {
	mu       sync.Mutex
	next     uint64
	chunks   int
	size     int
	err      error
	block    chan struct{} // when set, GenerateChunk ignores ctx and waits for it
	settled  map[string]bool
	settleCh chan string
	attempts int // GenerateChunk calls, failed ones included
	// settleErr, when set, fails every Settle (a generator that cannot be reached).
	settleErr error
}

func newFakeGen(size int) *fakeGen {
	return &fakeGen{size: size, settled: map[string]bool{}, settleCh: make(chan string, 1024)}
}

func (g *fakeGen) GenerateChunk(ctx context.Context, user zen.ID) (Chunk, error) {
	g.mu.Lock()
	block, err := g.block, g.err
	g.attempts++
	g.mu.Unlock()
	if block != nil {
		<-block
	}
	if err != nil {
		return Chunk{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.chunks++
	c := Chunk{ID: fmt.Sprintf("c%d", g.chunks), User: user}
	for range g.size {
		g.next++
		c.Items = append(c.Items, Item{Pin: pinID(g.next), Source: zen.SourceFollowing,
			Score: float64(1000 - g.next), Reason: "followed"})
	}
	return c, nil
}

func (g *fakeGen) Settle(_ context.Context, _ zen.ID, chunkID string, delivered bool) error {
	g.mu.Lock()
	if err := g.settleErr; err != nil {
		g.mu.Unlock()
		return err
	}
	g.settled[chunkID] = delivered
	g.mu.Unlock()
	select {
	case g.settleCh <- chunkID:
	default: // nobody is watching; the map has it
	}
	return nil
}

func (g *fakeGen) settledAs(id string) (delivered, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.settled[id]
	return d, ok
}

// fakeQueue records enqueued tasks; run hands them to the service's handler.
type fakeQueue struct {
	mu    sync.Mutex
	tasks []MaterializeTask
	err   error
	hang  atomic.Bool // every enqueue waits for its context to end (a hung Redis)
}

func (q *fakeQueue) EnqueueMaterialize(ctx context.Context, t MaterializeTask) error {
	if q.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	// Go through the pinlater payload, as production does: the task names the chunk only.
	task, err := newMaterializeTask(t)
	if err != nil {
		return err
	}
	p, err := pinlater.Decode[pinlater.MaterializePayload](task)
	if err != nil {
		return err
	}
	q.tasks = append(q.tasks, MaterializeTask{User: zen.ID(p.User), ChunkID: p.ChunkID})
	return nil
}

func (q *fakeQueue) take() []MaterializeTask {
	q.mu.Lock()
	defer q.mu.Unlock()
	ts := q.tasks
	q.tasks = nil
	return ts
}

type env struct {
	svc              *Service
	gen              *fakeGen
	queue            *fakeQueue
	primary, standby *faults.Table
	repl             *Replicator
	reg              *prometheus.Registry
	user             zen.ID
}

func newEnv(t testing.TB, mod func(*Config, *hedge.Policy)) *env {
	t.Helper()
	ctx := context.Background()
	pt, _ := zenmem.New().Table(ctx, "feed")
	st, _ := zenmem.New().Table(ctx, "feed")
	e := &env{gen: newFakeGen(5), queue: &fakeQueue{}, reg: prometheus.NewRegistry(), user: userID(t, 1)}
	e.primary, e.standby = faults.Wrap(pt, 1), faults.Wrap(st, 2)
	repl, err := NewReplicator(e.primary, e.standby, ReplicatorOptions{Registerer: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	e.repl = repl
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = repl.Run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Every served chunk becomes a job in e.queue, run when the test says (e.materialize);
	// inline_test.go turns inline materialization on.
	cfg, pol := queuedConfig(), hedge.DefaultPolicy()
	pol.Warmup = 0
	if mod != nil {
		mod(&cfg, &pol)
	}
	h, err := hedge.New(pol, hedge.Options{Registerer: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	// Every chunk trims (TrimEvery 1): tests count feed rows exactly.
	d := Deps{Primary: repl, Standby: e.standby, Generator: e.gen, Enqueuer: e.queue,
		Hedger: h, Registerer: e.reg, TrimEvery: 1}
	e.svc, err = New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.svc.Wait)
	return e
}

// queuedConfig is DefaultConfig with every served chunk a job in the test's queue (no inline
// materialization), for tests that run the jobs themselves, or lose them.
func queuedConfig() Config {
	c := DefaultConfig()
	c.InlineMaterialize = 0
	return c
}

// materialize runs every queued job.
func (e *env) materialize(t testing.TB) {
	t.Helper()
	for _, task := range e.queue.take() {
		if err := e.svc.Materialize(context.Background(), task); err != nil {
			t.Fatalf("materialize %+v: %v", task, err)
		}
	}
}

func (e *env) flush(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.repl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(t testing.TB, cursor string, size int) Page {
	t.Helper()
	p, err := e.svc.GetFeed(context.Background(), Request{User: e.user, Cursor: cursor, PageSize: size})
	if err != nil {
		t.Fatalf("GetFeed(%q, %d): %v", cursor, size, err)
	}
	e.svc.enqueues.Wait() // the materialize enqueue runs after the answer
	return p
}

// all pages through the whole feed from a first page and returns the pins in order.
func (e *env) all(t testing.TB, size int) []zen.ID {
	t.Helper()
	var pins []zen.ID
	cursor := ""
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("pagination does not end")
		}
		p := e.get(t, cursor, size)
		pins = append(pins, pagePins(p)...)
		if p.NextCursor == "" {
			return pins
		}
		cursor = p.NextCursor
	}
}

func pagePins(p Page) []zen.ID {
	var out []zen.ID
	for _, it := range p.Items {
		out = append(out, it.Pin)
	}
	return out
}

func pins(from, to uint64) []zen.ID {
	var out []zen.ID
	for i := from; i <= to; i++ {
		out = append(out, pinID(i))
	}
	return out
}

var errGen = errors.New("generator down")
