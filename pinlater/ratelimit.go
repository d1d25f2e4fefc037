package pinlater

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The rate limit of a queue is a token bucket kept in Redis, shared by every worker process: the
// rate (jobs per second) in the hash <prefix>rates, the bucket state in <prefix>bucket:<queue>.
// The bucket holds at most one second of tokens (at least 1). A run that finds no token reserves
// the next free slot, up to the horizon ahead: it takes the token on credit (the bucket goes
// negative), records the slot under <prefix>resv:<queue>:<task id>, and the server puts the task
// back until then. When the task comes back at its slot it runs without taking another token. So
// a backlog is spread over time in slot order instead of every deferred task returning at once.
// Beyond the horizon nothing is reserved and the task simply comes back later.
//
// Times are Redis server time (TIME), so processes with skewed clocks agree; tests may pass their
// own clock instead.
var takeScript = redis.NewScript(`
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local horizon = tonumber(ARGV[3])
local due = redis.call('GET', KEYS[3])
if due then
  due = tonumber(due)
  if due <= now then
    redis.call('DEL', KEYS[3])
    return {0, 0}
  end
  return {1, due - now}
end
local rate = redis.call('HGET', KEYS[1], ARGV[1])
if not rate then
  return {0, 0}
end
rate = tonumber(rate)
if rate <= 0 then
  return {3, 1000}
end
local burst = math.max(1, rate)
local b = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  ts = now
end
local status = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) * 1000 / rate)
  if wait > horizon then
    status = 2
    wait = horizon
  else
    tokens = tokens - 1
    status = 1
    redis.call('SET', KEYS[3], now + wait, 'PX', wait + 600000)
  end
end
redis.call('HSET', KEYS[2], 'tokens', tostring(tokens), 'ts', tostring(ts))
redis.call('PEXPIRE', KEYS[2], horizon + 600000)
return {status, wait}
`)

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

// limiter takes tokens from a queue's bucket.
type limiter struct {
	rdb     redis.UniversalClient
	keys    keys
	horizon time.Duration
	now     func() time.Time // nil = Redis time
	ttl     time.Duration    // how long the copy of the rates is trusted

	mu     sync.Mutex
	rates  map[string]bool // queues with a rate set
	ratesT time.Time
}

// limited reports whether q has a rate set, from a copy refreshed every l.ttl. Runs of queues
// without a rate skip the script; a rate set or changed applies everywhere within l.ttl. When
// Redis does not answer the refresh, the copy it has stands (tried again on the next call):
// a queue without a rate does not hold its tasks back for a Redis hiccup.
func (l *limiter) limited(ctx context.Context, q string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rates == nil || time.Since(l.ratesT) >= l.ttl {
		qs, err := l.rdb.HKeys(ctx, l.keys.rates()).Result()
		if err != nil {
			if l.rates != nil {
				return l.rates[q], nil
			}
			return false, fmt.Errorf("read rates: %w", err)
		}
		l.rates = make(map[string]bool, len(qs))
		for _, q := range qs {
			l.rates[q] = true
		}
		l.ratesT = time.Now()
	}
	return l.rates[q], nil
}

// take asks for a token for task id of logical queue q.
func (l *limiter) take(ctx context.Context, q, id string) (decision, time.Duration, error) {
	if ok, err := l.limited(ctx, q); err != nil || !ok {
		return decRun, 0, err
	}
	var now int64
	if l.now != nil {
		now = l.now().UnixMilli()
	}
	res, err := takeScript.Run(ctx, l.rdb, []string{l.keys.rates(), l.keys.bucket(q), l.keys.reservation(q, id)},
		q, now, l.horizon.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("rate limit %s: %w", q, err)
	}
	if len(res) != 2 || res[0] < 0 || res[0] > int64(decPaused) {
		return 0, 0, fmt.Errorf("rate limit %s: unexpected reply %v", q, res)
	}
	return decision(res[0]), time.Duration(res[1]) * time.Millisecond, nil
}
