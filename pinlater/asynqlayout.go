package pinlater

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// asynq's private Redis layout.
//
// This file is the only one that knows how asynq keeps its queues in Redis (its internal/base
// package), for the four things asynq's public API (Client, Inspector, Server) does not offer:
//
//   - whether many tasks exist, in one round trip (the outbox relay asks about every overdue
//     row at once; Inspector.GetTaskInfo is one round trip per task);
//   - the pause mark of a queue that never held a task (Inspector.GetQueueInfo answers "not
//     found" for it);
//   - deleting every key of a queue, active tasks and stats included (Inspector.DeleteQueue
//     refuses a queue with active tasks and leaves the pause mark and the stats);
//   - taking back a task whose lease ended (the reclaimer: asynq's own recoverer does it only
//     60 to 120 s later).
//
// TestAsynqLayoutContract (asynqlayout_test.go) holds these to the asynq of go.mod against a real
// Redis, through asynq's public API: an asynq upgrade that moves a key fails it there.

// asynqAllQueues is asynq's set of queue names.
const asynqAllQueues = "asynq:queues"

// asynqOldPausedQueues is the set of paused queues of older asynq releases; Purge clears it
// too, for a Redis that such a release wrote.
const asynqOldPausedQueues = "asynq:queues:paused"

// asynqQueue is the prefix of the keys of one asynq queue: "asynq:{<physical queue>}:".
type asynqQueue string

// asynqQ is the key prefix of the asynq queue of logical queue q.
func (k keys) asynqQ(q string) asynqQueue { return asynqQueueOf(k.queue(q)) }

// asynqQueueOf is the key prefix of the asynq queue phys (a physical name).
func asynqQueueOf(phys string) asynqQueue { return asynqQueue("asynq:{" + phys + "}:") }

// task is the hash of task id, present in every state until the task completes (or its
// retention ends).
func (a asynqQueue) task(id string) string { return string(a) + "t:" + id }

// active is the list of the queue's running tasks; lease the sorted set of their lease ends
// (unix s); pending the list of tasks waiting for a worker; paused the pause mark.
func (a asynqQueue) active() string  { return string(a) + "active" }
func (a asynqQueue) lease() string   { return string(a) + "lease" }
func (a asynqQueue) pending() string { return string(a) + "pending" }
func (a asynqQueue) paused() string  { return string(a) + "paused" }

// asynqQueuePattern matches every key of the asynq queue phys (a SCAN pattern).
func asynqQueuePattern(phys string) string { return "asynq:{" + escapeGlob(phys) + "}*" }

// asynqTaskRef names one task: its logical queue and ID.
type asynqTaskRef struct{ queue, id string }

// asynqTasksExist reports, for each task, whether Redis holds it in any state, in one pipelined
// round trip.
func (k keys) asynqTasksExist(ctx context.Context, rdb redis.UniversalClient, tasks []asynqTaskRef) ([]bool, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(tasks))
	for i, t := range tasks {
		cmds[i] = pipe.Exists(ctx, k.asynqQ(t.queue).task(t.id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(tasks))
	for i, c := range cmds {
		out[i] = c.Val() > 0
	}
	return out, nil
}

// asynqPausedMark reports whether logical queue q carries asynq's pause mark, which a queue
// paused before its first task has although GetQueueInfo does not see the queue.
func (k keys) asynqPausedMark(ctx context.Context, rdb redis.UniversalClient, q string) (bool, error) {
	n, err := rdb.Exists(ctx, k.asynqQ(q).paused()).Result()
	return n > 0, err
}

// asynqReclaimScript takes one task back from the active list if its lease ended before
// ARGV[2], as asynq's own Requeue does (same keys, same state).
//
//	KEYS: active, lease, pending, the task's hash
//	ARGV: id, cutoff (unix s), reclaimMax
//
// It returns 1 when the task went back to pending, 0 when it is not an expired active task (or
// is no longer: another worker or reclaimer got there first), -1 when it was taken back too often.
var asynqReclaimScript = redis.NewScript(`
local s = redis.call("ZSCORE", KEYS[2], ARGV[1])
if not s or tonumber(s) > tonumber(ARGV[2]) then
  return 0
end
if redis.call("HGET", KEYS[4], "state") ~= "active" or not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
if tonumber(redis.call("HGET", KEYS[4], "pinlater_reclaims") or "0") >= tonumber(ARGV[3]) then
  return -1
end
redis.call("LREM", KEYS[1], 0, ARGV[1])
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("RPUSH", KEYS[3], ARGV[1])
redis.call("HSET", KEYS[4], "state", "pending")
redis.call("HINCRBY", KEYS[4], "pinlater_reclaims", 1)
return 1`)

// asynqExpiredLeases lists the tasks of a whose lease ended at or before cutoff (unix s).
func asynqExpiredLeases(ctx context.Context, rdb redis.UniversalClient, a asynqQueue, cutoff int64) ([]string, error) {
	return rdb.ZRangeByScore(ctx, a.lease(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(cutoff, 10)}).Result()
}

// asynqReclaim runs asynqReclaimScript for task id of a.
func asynqReclaim(ctx context.Context, rdb redis.UniversalClient, a asynqQueue, id string, cutoff int64, maxReclaims int) (int, error) {
	r, err := asynqReclaimScript.Run(ctx, rdb, []string{a.active(), a.lease(), a.pending(), a.task(id)}, id, cutoff, maxReclaims).Int()
	if err != nil {
		return 0, fmt.Errorf("reclaim %s: %w", id, err)
	}
	return r, nil
}
