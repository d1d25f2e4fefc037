package pinlater

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/ratelimit"
)

// The rate limit of a queue is internal/ratelimit's, shared by every worker process: the rate
// (jobs per second) in the hash <prefix>rates, the limit's state in <prefix>tat:<queue>, with a
// burst of one second of jobs (at least 1). A run that finds no room reserves the next free slot,
// up to the horizon ahead, under <prefix>resv:<queue>:<task id>, and the server puts the task back
// until then; when the task comes back at its slot it runs without taking another. So a backlog is
// spread over time in slot order instead of every deferred task returning at once. Beyond the
// horizon nothing is reserved and the task simply comes back later.
//
// Times are Redis server time, so processes with skewed clocks agree; tests may pass their own
// clock instead.

// decision is what the limiter says about one run.
type decision int

const (
	decRun      decision = iota // run now
	decReserved                 // a slot is reserved; come back after wait
	decLater                    // the backlog is beyond the horizon; come back after wait
	decPaused                   // the rate is 0
)

func (d decision) String() string {
	return [...]string{"run", "reserved", "later", "paused"}[d]
}

// limiter takes a queue's runs from its rate limit.
type limiter struct {
	rdb     redis.UniversalClient
	keys    keys
	horizon time.Duration
	now     func() time.Time // nil = Redis time
	ttl     time.Duration    // how long the copy of the rates is trusted

	mu     sync.Mutex
	rates  map[string]float64 // the queues with a rate set, and their rates
	ratesT time.Time
}

// rate returns q's rate and whether it has one, from a copy refreshed every l.ttl. Runs of
// queues without a rate skip the limit; a rate set or changed applies everywhere within l.ttl.
// When Redis does not answer the refresh, the copy it has stands (tried again on the next call):
// a queue without a rate does not hold its tasks back for a Redis hiccup.
func (l *limiter) rate(ctx context.Context, q string) (float64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rates == nil || time.Since(l.ratesT) >= l.ttl {
		m, err := l.rdb.HGetAll(ctx, l.keys.rates()).Result()
		if err != nil {
			if l.rates != nil {
				r, ok := l.rates[q]
				return r, ok, nil
			}
			return 0, false, fmt.Errorf("read rates: %w", err)
		}
		l.rates = make(map[string]float64, len(m))
		for q, v := range m {
			if r, err := strconv.ParseFloat(v, 64); err == nil {
				l.rates[q] = r
			}
		}
		l.ratesT = time.Now()
	}
	r, ok := l.rates[q]
	return r, ok, nil
}

// take asks for a run of task id of logical queue q.
func (l *limiter) take(ctx context.Context, q, id string) (decision, time.Duration, error) {
	perSecond, ok, err := l.rate(ctx, q)
	if err != nil || !ok {
		return decRun, 0, err
	}
	if perSecond <= 0 {
		return decPaused, time.Second, nil
	}
	req := ratelimit.Request{Key: l.keys.rateState(q), Rate: ratelimit.Rate{PerSecond: perSecond, Burst: max(1, perSecond)},
		Reservation: l.keys.reservation(q, id), Reserve: l.horizon}
	if l.now != nil {
		req.Now = l.now()
	}
	res, err := ratelimit.Take(ctx, l.rdb, req)
	if err != nil {
		return 0, 0, fmt.Errorf("queue %s: %w", q, err)
	}
	switch res.Outcome {
	case ratelimit.Allowed:
		return decRun, 0, nil
	case ratelimit.Reserved:
		return decReserved, res.Wait, nil
	}
	return decLater, l.horizon, nil
}
