package worker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// streamQueue runs tasks as they are enqueued on a fixed number of goroutines; Enqueue blocks
// while the buffer is full, so memory stays bounded however many chunk tasks a fanout produces
// (in production the tasks wait in Redis instead).
type streamQueue struct {
	handlers map[string]pinlater.Handler
	ch       chan *pinlater.Task
	wg       sync.WaitGroup
	mu       sync.Mutex
	err      error
	done     atomic.Int64
}

func newStreamQueue(buffer int) *streamQueue {
	return &streamQueue{handlers: map[string]pinlater.Handler{}, ch: make(chan *pinlater.Task, buffer)}
}

func (q *streamQueue) Handle(typ string, h pinlater.Handler) { q.handlers[typ] = h }

func (q *streamQueue) Enqueue(ctx context.Context, t *pinlater.Task, _ ...pinlater.Option) (*pinlater.Info, error) {
	q.wg.Add(1)
	select {
	case q.ch <- t:
	case <-ctx.Done():
		q.wg.Done()
		return nil, ctx.Err()
	}
	return &pinlater.Info{ID: t.ID(), Type: t.Type()}, nil
}

func (q *streamQueue) start(ctx context.Context, workers int) {
	for range workers {
		go func() {
			for t := range q.ch {
				if err := q.handlers[t.Type()].ProcessTask(ctx, t); err != nil {
					q.mu.Lock()
					if q.err == nil {
						q.err = fmt.Errorf("%s: %w", t.Type(), err)
					}
					q.mu.Unlock()
				}
				q.done.Add(1)
				q.wg.Done()
			}
		}()
	}
}

// procStatus reads a kB field of /proc/self/status (e.g. "VmHWM") in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s not in /proc/self/status", field)
}

// MillionRSSBound is the stated bound on the worker's peak RSS (VmHWM) during a 1,000,000-follower
// fanout on Pebble, measured by TestFanoutMillionFollowers.
const MillionRSSBound = 128 << 20

// TestFanoutMillionFollowers writes N synthetic follower edges (default 1,000,000; env
// SMARTFEED_FANOUT_FOLLOWERS) straight into a Pebble store on disk, then runs the fanout of one pin
// in process, the chunk tasks streamed to 2 goroutines through a bounded buffer, and checks that
// every follower got the pin and that the peak RSS of the fanout stayed under MillionRSSBound.
// It takes minutes: it runs only with SMARTFEED_FANOUT_1M=1 (and never under -short).
func TestFanoutMillionFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 1M-follower fanout; run with SMARTFEED_FANOUT_1M=1")
	}
	if os.Getenv("SMARTFEED_FANOUT_1M") != "1" {
		t.Skip("set SMARTFEED_FANOUT_1M=1 to run the 1M-follower fanout (a few minutes)")
	}
	n := 1_000_000
	if v := os.Getenv("SMARTFEED_FANOUT_FOLLOWERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	store, err := zenpebble.Open(t.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clk := &clock{t: time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)}
	g, err := zen.NewGraph(ctx, store, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	author, _ := g.Create(ctx, zen.TypeUser, 0, nil)
	board, _ := g.Create(ctx, zen.TypeBoard, author.ID, nil)
	pin, _ := g.Create(ctx, zen.TypePin, board.ID, map[string]any{"author": author.ID.String()})

	// Synthetic followers: IDs spread over the shards, no objects (fanout never reads them).
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var loadErr atomic.Value
	for range 4 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				u, _ := zen.NewID(uint16(i%4096), zen.TypeUser, uint64(i/4096)+1_000_000)
				e := zen.Edge{From: author.ID, Type: zen.EdgeFollowedByUser, To: u, Seq: seqOf(clk.now().Add(time.Duration(i) * time.Millisecond))}
				if err := g.AddEdge(ctx, e); err != nil {
					loadErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := loadErr.Load().(error); ok {
		t.Fatal(err)
	}
	t.Logf("loaded %d follower edges in %v", n, time.Since(start).Round(time.Millisecond))

	pools, _ := store.Table(ctx, "pools")
	state, _ := store.Table(ctx, StateTable)
	q := newStreamQueue(64)
	w, err := New(g, pools, state, q, Config{}, Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	w.Register(q)
	q.start(ctx, 2)

	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset VmHWM (%v): the peak includes the load phase", err)
	}
	before, _ := procStatus("VmHWM")
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	}()
	start = time.Now()
	task, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(pin.ID), Author: uint64(author.ID), Board: uint64(board.ID), CreatedMs: clk.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(ctx, task); err != nil {
		t.Fatal(err)
	}
	q.wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	close(q.ch)
	if q.err != nil {
		t.Fatal(q.err)
	}
	peak, err := procStatus("VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	var mm dto.Metric
	if err := w.m.inserts.Write(&mm); err != nil {
		t.Fatal(err)
	}
	inserted := mm.GetCounter().GetValue()
	t.Logf("fanout to %d followers: %d tasks, %.0f inserts in %v (%.0f inserts/s); VmHWM %d MiB (before fanout %d MiB), peak Go heap in use %d MiB",
		n, q.done.Load(), inserted, elapsed.Round(time.Millisecond), inserted/elapsed.Seconds(), peak>>20, before>>20, peakHeap.Load()>>20)
	if int(inserted) != n {
		t.Errorf("inserted %v entries, want %d", inserted, n)
	}
	if want := int64(1 + (n+999)/1000); q.done.Load() != want {
		t.Errorf("%d tasks ran, want %d (1 fanout + ceil(n/1000) chunks)", q.done.Load(), want)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		u, _ := zen.NewID(uint16(i%4096), zen.TypeUser, uint64(i/4096)+1_000_000)
		es, err := w.Pools().Top(ctx, u, zen.SourceFollowing, 10)
		if err != nil || len(es) != 1 || es[0].Pin != pin.ID {
			t.Errorf("follower %d: pool %v, %v", i, es, err)
		}
	}
	if peak > MillionRSSBound {
		t.Errorf("peak RSS %d MiB over the bound %d MiB", peak>>20, MillionRSSBound>>20)
	}
}
