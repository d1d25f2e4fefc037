// Package pinlater is SmartFeed's asynchronous job system, in the shape of Pinterest's PinLater,
// built on Asynq and Redis: typed, versioned task payloads, an enqueue client for producers, a
// server with middleware, priorities, retries with backoff, dead (archived) tasks, and what Asynq
// lacks: a per-queue rate limit kept in Redis (0 pauses the queue) and a drain mode.
//
// # Producing
//
// Build a task with a typed constructor and enqueue it:
//
//	c, _ := pinlater.NewClient(pinlater.RedisAddr("127.0.0.1:6379"), logger, registry)
//	t, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: pin, Author: author, Board: board, CreatedMs: ms})
//	info, err := c.Enqueue(ctx, t) // options: Bulk(), ProcessIn(d), MaxAttempts(n), Timeout(d), TaskID(id)
//
// Every payload is JSON with a version field "v" (PayloadVersion); Validate refuses zero IDs, an
// unknown version and oversize lists, and the constructors validate before anything is written.
//
// # Consuming
//
//	s, _ := pinlater.NewServer(pinlater.Config{Redis: opt}, logger, registry)
//	s.Handle(pinlater.TypeFanout, pinlater.Typed(func(ctx context.Context, p pinlater.FanoutPayload) error { ... }))
//	s.Start(); defer s.Shutdown()
//
// Each handler runs inside panic recovery, logging, the caller's middleware (Server.Use) and the
// policy timeout. A bad payload (ErrInvalidPayload) or an error wrapping SkipRetry goes to the
// dead set at once; other errors are retried with the type's exponential backoff (or the delay of
// RetryAfter) until Policy.MaxAttempts runs have failed, then the task is dead. Dead tasks are
// listed, retried and deleted with Admin (and `smartfeed jobs`).
//
// # Queues and priorities
//
// Four queues, highest first: critical (materialize, replicate), default (follow/unfollow upkeep,
// deletes, inverse edges, respacing), fanout, bulk (fanout of hot authors, Bulk option). A server
// shares its worker slots by weight, 6:3:2:1 (Asynq's weighted mode: each fetch picks a queue
// with probability proportional to its weight among the non-empty ones), or drains them strictly
// in order with Config.StrictPriority.
//
// # Idempotency
//
// Tasks where a duplicate wastes work get a deterministic task ID: fanout by pin, fanout-chunk by
// (pin, list, edge type, limit, cursor), materialize by (user, chunk), respace by
// board, pin-delete by pin, user-delete by user. While a task with that ID exists (pending,
// scheduled, retrying, running or dead), enqueuing it again does nothing and returns
// Info.Duplicate; once it has succeeded the ID is free. Follow/unfollow tasks get
// none, because a later task of the same key may mean the opposite. Handlers must still be
// idempotent: a run can be repeated after a crash or a shutdown timeout.
//
// # Rate limits, pause and drain
//
// Admin.SetRate sets a queue's rate in jobs per second, stored in Redis and read by every server
// within Config.RateCheckInterval (1 s), so it changes live and holds across all worker processes:
// internal/ratelimit's limit in Redis (one Lua script, Redis server time) with a burst of one
// second of jobs. A run that finds no room reserves the next free slot (up to Config.RateHorizon ahead) and is put
// back until then without counting as a failed attempt. Rate 0 pauses the queue (Asynq's
// PauseQueue: no server takes its tasks, running ones finish); a positive rate resumes it; a
// negative one removes the limit.
//
// Drain has two forms. Admin.SetDraining(queue, true) is PinLater's dequeue-only mode: clients
// refuse new enqueues to the queue (ErrQueueDraining) while the servers keep running what it holds;
// Admin.WaitDrained waits until it is empty. Server.Drain stops one process from taking new tasks
// while its running tasks finish (before a deploy), and Server.Shutdown then waits up to
// Config.ShutdownTimeout and hands unfinished tasks back to Redis.
//
// A worker that dies (kill -9) leaves its tasks active with a lease that is no longer extended,
// and so does a Redis killed after a dequeue reached its append-only file but before the worker
// heard of it. Config.ReclaimAfter (5 s) after the lease ends, the reclaimer of any live server
// puts such a task back in its queue, no attempt counted (reclaim.go); a task reclaimed three
// times is left to asynq's recoverer, which takes it 30 s after the lease ended (it runs at start
// and every minute) with one attempt counted, and in the end sends it to the dead set.
//
// # Metrics
//
// Counters pinlater_tasks_{enqueued,duplicate,rejected,processed,failed,retried,archived,
// rate_limited,panics,orphaned}_total and histograms pinlater_task_duration_seconds and
// pinlater_task_queue_latency_seconds, labelled by queue and type, and
// pinlater_tasks_reclaimed_total, by queue, are registered by NewClient and NewServer;
// Admin.Collector adds per-queue gauges (size by state, latency of the oldest pending task,
// paused, rate).
package pinlater
