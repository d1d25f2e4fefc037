// Package pinlater is SmartFeed's asynchronous job system, in the shape of Pinterest's PinLater,
// built on Asynq and Redis: typed, versioned task payloads, an enqueue client for producers, a
// server with middleware, priorities, retries with backoff, dead (archived) tasks, and what Asynq
// lacks: a per-queue rate limit kept in Redis (0 pauses the queue) and a drain mode.
package pinlater
