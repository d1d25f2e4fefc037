package pinlater

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Orphaned tasks: a task asynq has handed to no live worker, though Redis says one runs it.
//
// asynq moves a task to its queue's active list and gives it a lease (30 s, extended every 5 s by
// the worker's heartbeat) in one script, and the worker learns of it from the script's answer.
// When Redis is killed after that script reached its append-only file but before the answer was
// sent (appendfsync always writes the file before answering), the restarted Redis holds the task
// as active and no worker has it. A worker killed mid-task leaves the same. asynq's own recoverer
// takes such a task back only once its lease ended more than 30 s ago, and looks once a minute:
// 60–120 s after the crash. In a feed that is a pin that reaches its followers two minutes late
// after every Redis crash (TestRedisOutageLosesNothing saw it).
//
// The reclaimer takes them back sooner: every ReclaimAfter/2 it looks at the leases of the
// server's queues, and a task whose lease ended more than ReclaimAfter ago goes back to its
// queue's pending list, as asynq's own Requeue does (same keys, same state; the run is not
// counted as a failed attempt). A live worker's lease never ends unless the worker has not
// reached Redis for 30 s; if it still runs the task, the task runs twice, as it would after
// asynq's recoverer, and handlers are idempotent. A task taken back reclaimMax times (a task
// that kills its worker every time) is left to asynq's recoverer, which counts its attempts and
// sends it to the dead set in the end.

// reclaimMax is how many times the reclaimer takes back one task.
const reclaimMax = 3

// reclaimLoop runs reclaimOnce every ReclaimAfter/2 (at least every second) until stop closes.
func (s *Server) reclaimLoop(stop <-chan struct{}) {
	every := max(s.cfg.ReclaimAfter/2, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		if _, err := s.reclaimOnce(ctx, time.Now()); err != nil {
			// Redis is down or slow: the next pass tries again (and asynq's recoverer is there).
			s.log.Debug("reclaim orphaned tasks", zap.Error(err))
		}
		cancel()
	}
}

// reclaimOnce takes back the tasks of the server's queues whose lease ended more than
// ReclaimAfter before now. It returns how many went back to their queues.
func (s *Server) reclaimOnce(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-s.cfg.ReclaimAfter).Unix()
	n := 0
	for q := range s.cfg.Queues {
		aq := s.keys.asynqQ(q)
		ids, err := asynqExpiredLeases(ctx, s.rdb, aq, cutoff)
		if err != nil {
			return n, err
		}
		for _, id := range ids {
			r, err := asynqReclaim(ctx, s.rdb, aq, id, cutoff, reclaimMax)
			if err != nil {
				return n, err
			}
			switch r {
			case 1:
				n++
				s.m.reclaimed.WithLabelValues(q).Inc()
				s.log.Warn("task held by no live worker (its lease ended): back in its queue",
					zap.String("queue", q), zap.String("id", id))
			case -1:
				s.log.Debug("task orphaned too often: left to asynq's recoverer, which counts it as a failed run",
					zap.String("queue", q), zap.String("id", id))
			}
		}
	}
	return n, nil
}
