// Package ratelimit is SmartFeed's one rate limiter: the generic cell rate algorithm (GCRA) in
// a single Redis script, on Redis's clock, so every process sharing the Redis shares the limit.
// The public port's per-caller limits (auth) and the queues' job rates (pinlater) both take
// from it.
//
// A key holds the theoretical arrival time (TAT, in ms) of the next call at the rate. A call is
// let through when it is not earlier than the TAT minus the burst tolerance, which advances the
// TAT by one interval. A call that finds no room may, if its caller allows it, take the next free
// slot on credit when it is at most Reserve ahead: the TAT advances as if it had gone through,
// and the slot is recorded under the caller's reservation key, so that when the caller comes
// back at the slot it goes through without taking another. A backlog is so spread over time in
// slot order instead of every refused call returning at once. This is a token bucket of Burst
// tokens refilled at PerSecond, stated as one timestamp.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rate is PerSecond calls on average and up to Burst at once (Burst >= 1; it may be
// fractional: the bucket then holds that many tokens).
type Rate struct {
	PerSecond float64
	Burst     float64
}

// Outcome is what Take decided.
type Outcome int

const (
	// Allowed: go now.
	Allowed Outcome = iota
	// Reserved: a slot is reserved for the caller; come back after the wait.
	Reserved
	// Refused: no room within the reservation bound; the wait is when there will be.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Reserved:
		return "reserved"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Request is one call's ask.
type Request struct {
	// Key holds the limit's state (the TAT).
	Key string
	Rate
	// Reservation, when set, is the caller's reservation key: a slot reserved for it is kept
	// there until the caller comes back. Empty: no reservations (Reserve is ignored).
	Reservation string
	// Reserve is how far ahead a slot may be reserved.
	Reserve time.Duration
	// Now, when non-zero, is the clock (tests); zero is Redis server time.
	Now time.Time
}

// Result is Take's answer.
type Result struct {
	Outcome Outcome
	// Wait is how long until the reserved slot (Reserved) or until a call would go through
	// (Refused); 0 when Allowed.
	Wait time.Duration
}

// script: KEYS[1] the TAT, KEYS[2] the reservation (optional). ARGV: interval (ms), tolerance
// (ms), reserve bound (ms), now (ms; 0 for Redis time). Returns {outcome, wait ms}.
var script = redis.NewScript(`
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if KEYS[2] then
  local due = redis.call('GET', KEYS[2])
  if due then
    due = tonumber(due)
    if due <= now then
      redis.call('DEL', KEYS[2])
      return {0, 0}
    end
    return {1, math.ceil(due - now)}
  end
end
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local reserve = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local nxt = tat + interval
local wait = nxt - tolerance - now
local outcome = 0
if wait > 0 then
  if not KEYS[2] or wait > reserve then
    return {2, math.ceil(wait)}
  end
  outcome = 1
  redis.call('SET', KEYS[2], tostring(now + wait), 'PX', math.ceil(wait) + 600000)
end
redis.call('SET', KEYS[1], tostring(nxt), 'PX', math.ceil(nxt - now) + 1000)
if outcome == 1 then return {1, math.ceil(wait)} end
return {0, 0}
`)

// ErrBadRate: a rate that is not positive and finite, or a burst below 1.
var ErrBadRate = errors.New("ratelimit: want a positive rate and a burst >= 1")

// Take takes one call of r.Key at r.Rate.
func Take(ctx context.Context, rdb redis.Scripter, r Request) (Result, error) {
	if !(r.PerSecond > 0) || math.IsInf(r.PerSecond, 0) || !(r.Burst >= 1) || math.IsInf(r.Burst, 0) {
		return Result{}, fmt.Errorf("%w: %v/s, burst %v", ErrBadRate, r.PerSecond, r.Burst)
	}
	interval := 1000 / r.PerSecond
	keys := []string{r.Key}
	if r.Reservation != "" {
		keys = append(keys, r.Reservation)
	}
	var now int64
	if !r.Now.IsZero() {
		now = r.Now.UnixMilli()
	}
	res, err := script.Run(ctx, rdb, keys, interval, interval*r.Burst, r.Reserve.Milliseconds(), now).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("rate limit %s: %w", r.Key, err)
	}
	if len(res) != 2 || res[0] < int64(Allowed) || res[0] > int64(Refused) {
		return Result{}, fmt.Errorf("rate limit %s: unexpected reply %v", r.Key, res)
	}
	return Result{Outcome: Outcome(res[0]), Wait: time.Duration(res[1]) * time.Millisecond}, nil
}
