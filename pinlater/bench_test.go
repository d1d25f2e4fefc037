package pinlater

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// The benchmarks compare pinlater with plain asynq on the same Redis in one run. Both report
// tasks/s. Run: go test ./pinlater -run '^$' -bench 'Enqueue|EndToEnd' -benchtime 3x
// (with SMARTFEED_REDIS_ADDR set). PinLater's published reference is 2,000 enqueues/s per host.

func benchPayload(b *testing.B, i int) []byte {
	p := FollowBackfillPayload{V: 1, User: uint64(i + 1), Target: 7, TargetKind: KindUser}
	body, err := json.Marshal(p)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkEnqueue(b *testing.B) {
	b.Run("pinlater", func(b *testing.B) {
		e := newEnv(b)
		ctx := context.Background()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			task, err := NewFollowBackfill(FollowBackfillPayload{User: uint64(n), Target: 7, TargetKind: KindUser})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.client.Enqueue(ctx, task); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
	})
	b.Run("asynq", func(b *testing.B) {
		e := newEnv(b)
		c := asynq.NewClient(e.opt)
		defer c.Close()
		q := e.client.keys.queue(QueueDefault)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			if _, err := c.Enqueue(asynq.NewTask(TypeFollowBackfill, benchPayload(b, n)), asynq.Queue(q)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tasks/s")
	})
}

// benchBatch is the number of tasks each iteration of BenchmarkEndToEnd enqueues and then waits
// for.
const benchBatch = 2000

func BenchmarkEndToEnd(b *testing.B) {
	for _, limited := range []bool{false, true} {
		name := "pinlater"
		if limited {
			name = "pinlater-ratelimited" // a rate far above the load: the cost of the Lua rate limit
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b)
			if limited {
				if err := e.admin.SetRate(context.Background(), QueueDefault, 1e6); err != nil {
					b.Fatal(err)
				}
			}
			endToEndPinlater(b, e)
		})
	}
	b.Run("asynq", func(b *testing.B) {
		e := newEnv(b)
		var done atomic.Int64
		q := e.client.keys.queue(QueueDefault)
		srv := asynq.NewServer(e.opt, asynq.Config{
			Concurrency: 10, Queues: map[string]int{q: 1}, TaskCheckInterval: 20 * time.Millisecond,
			LogLevel: asynq.WarnLevel,
		})
		if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			var p FollowBackfillPayload
			if err := json.Unmarshal(t.Payload(), &p); err != nil {
				return err
			}
			done.Add(1)
			return nil
		})); err != nil {
			b.Fatal(err)
		}
		defer srv.Shutdown()
		c := asynq.NewClient(e.opt)
		defer c.Close()
		b.ReportAllocs()
		total := 0
		for b.Loop() {
			for range benchBatch {
				total++
				if _, err := c.Enqueue(asynq.NewTask(TypeFollowBackfill, benchPayload(b, total)), asynq.Queue(q), asynq.MaxRetry(8)); err != nil {
					b.Fatal(err)
				}
			}
			for done.Load() < int64(total) {
				time.Sleep(time.Millisecond)
			}
		}
		b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "tasks/s")
	})
}

func endToEndPinlater(b *testing.B, e *env) {
	var done atomic.Int64
	cfg := e.config()
	cfg.Concurrency = 10
	cfg.PollInterval = 20 * time.Millisecond
	// One queue, like the asynq server below: asynq's dequeue costs one round trip per empty
	// queue it tries, so serving four queues with three empty would measure that instead.
	cfg.Queues = map[string]int{QueueDefault: 1}
	e.start(cfg, map[string]Handler{TypeFollowBackfill: Typed(func(ctx context.Context, p FollowBackfillPayload) error {
		done.Add(1)
		return nil
	})})
	enqueueBatches(b, e, &done, func(i int) (*Task, error) {
		return NewFollowBackfill(FollowBackfillPayload{User: uint64(i), Target: 7, TargetKind: KindUser})
	})
}

// enqueueBatches enqueues benchBatch tasks made by newTask(1, 2, ...) per iteration and waits
// until done counts them all; it reports tasks/s.
func enqueueBatches(b *testing.B, e *env, done *atomic.Int64, newTask func(i int) (*Task, error)) {
	ctx := context.Background()
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		for range benchBatch {
			total++
			task, err := newTask(total)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.client.Enqueue(ctx, task); err != nil {
				b.Fatal(err)
			}
		}
		for done.Load() < int64(total) {
			time.Sleep(time.Millisecond)
		}
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkDequeuers runs tasks that wait on I/O (2 ms each, as a fanout on a remote store
// does) with 16 slots over the four default queues, the work in fanout, with one asynq
// processor (the default) against four. One processor takes tasks one at a time, a Lua script per
// queue it looks in, so it caps the tasks/s whatever the slots. Run: go test ./pinlater -run
// '^$' -bench Dequeuers -benchtime 3x (with SMARTFEED_REDIS_ADDR set).
func BenchmarkDequeuers(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("dequeuers=%d", n), func(b *testing.B) {
			e := newEnv(b)
			var done atomic.Int64
			cfg := e.config()
			cfg.Concurrency = 16
			cfg.Dequeuers = n
			cfg.PollInterval = 20 * time.Millisecond
			e.start(cfg, map[string]Handler{TypeFanout: Typed(func(ctx context.Context, p FanoutPayload) error {
				// sleep: the task's 2 ms of I/O, which the slots run side by side.
				time.Sleep(2 * time.Millisecond)
				done.Add(1)
				return nil
			})})
			enqueueBatches(b, e, &done, func(i int) (*Task, error) {
				return NewFanout(FanoutPayload{Pin: uint64(i), Author: 1, Board: 2, CreatedMs: 1})
			})
		})
	}
}
