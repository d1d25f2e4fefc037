// Package baseline is the Mastodon-style home-feed store the worker's fanout is measured against
// (benchmarks only): one Redis sorted set per user, "feed:home:<user>", scored by the pin's score,
// written with a pipelined ZADD plus ZREMRANGEBYRANK 0 -(max+1) per receiver, as Mastodon's
// FeedManager#push_to_home and #trim do. It has no dedup across sources, no per-source pools and
// no claim on read: it is the cheapest thing that could work, the yardstick.
package baseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// ZSetFeeds writes per-user sorted sets.
type ZSetFeeds struct {
	rdb    redis.UniversalClient
	prefix string
	max    int
	batch  int
	// trimEvery: a receiver's set is trimmed after 1 in trimEvery inserts (1: every insert).
	trimEvery int
}

// New returns feeds over rdb under key prefix (e.g. "bench:feed:home:"), capped at maxItems per
// user (Mastodon: 800), pipelining batch receivers per round trip (≤ 0 means 1000).
func New(rdb redis.UniversalClient, prefix string, maxItems, batch int) (*ZSetFeeds, error) {
	if rdb == nil || prefix == "" || maxItems < 1 {
		return nil, errors.New("baseline: need a client, a key prefix and maxItems ≥ 1")
	}
	if batch <= 0 {
		batch = 1000
	}
	return &ZSetFeeds{rdb: rdb, prefix: prefix, max: maxItems, batch: batch, trimEvery: 1}, nil
}

// TrimEvery returns feeds like z that trim a receiver's set after about 1 in n inserts, picked
// by a hash of (receiver, pin) as the worker picks the pools it trims (worker.Config.TrimEvery),
// so that both pay for trimming on the same schedule; n ≤ 1 trims after every insert, as
// Mastodon does. Between trims a set may exceed the cap by about n members.
func (z *ZSetFeeds) TrimEvery(n int) *ZSetFeeds {
	c := *z
	c.trimEvery = max(n, 1)
	return &c
}

// trimPick picks about 1 in trimEvery (user, pin) pairs, the same ones on every run: an FNV-1a
// hash of the two IDs, little-endian, as the worker's trimPick.
func (z *ZSetFeeds) trimPick(user, pin uint64) bool {
	if z.trimEvery <= 1 {
		return true
	}
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], user)
	binary.LittleEndian.PutUint64(b[8:], pin)
	h.Write(b[:])
	return h.Sum64()%uint64(z.trimEvery) == 0
}

func (z *ZSetFeeds) key(user uint64) string { return z.prefix + strconv.FormatUint(user, 10) }

// Push adds pin with score to every receiver's set and trims it to the cap: ZADD and
// ZREMRANGEBYRANK per receiver (the trim for the receivers TrimEvery picks; every one by
// default), pipelined batch receivers at a time. It returns the number of ZADDs sent.
func (z *ZSetFeeds) Push(ctx context.Context, receivers []uint64, pin uint64, score float64) (int, error) {
	member := strconv.FormatUint(pin, 10)
	n := 0
	for start := 0; start < len(receivers); start += z.batch {
		end := min(start+z.batch, len(receivers))
		p := z.rdb.Pipeline()
		for _, u := range receivers[start:end] {
			k := z.key(u)
			p.ZAdd(ctx, k, redis.Z{Score: score, Member: member})
			if z.trimPick(u, pin) {
				p.ZRemRangeByRank(ctx, k, 0, int64(-(z.max + 1)))
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			return n, fmt.Errorf("baseline push %d: %w", pin, err)
		}
		n += end - start
	}
	return n, nil
}

// Read returns up to n pins of user's set, best first (ZREVRANGE).
func (z *ZSetFeeds) Read(ctx context.Context, user uint64, n int) ([]uint64, error) {
	ms, err := z.rdb.ZRevRange(ctx, z.key(user), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("baseline read %d: %w", user, err)
	}
	out := make([]uint64, 0, len(ms))
	for _, m := range ms {
		v, err := strconv.ParseUint(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("baseline read %d: member %q: %w", user, m, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Clear deletes the sets of users.
func (z *ZSetFeeds) Clear(ctx context.Context, users []uint64) error {
	for start := 0; start < len(users); start += z.batch {
		end := min(start+z.batch, len(users))
		keys := make([]string, 0, end-start)
		for _, u := range users[start:end] {
			keys = append(keys, z.key(u))
		}
		if err := z.rdb.Del(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("baseline clear: %w", err)
		}
	}
	return nil
}

// ClearAll deletes every set under the feeds' key prefix (a SCAN of the prefix, then UNLINK),
// and returns how many it deleted. A benchmark run calls it when it ends, so that runs do not
// pile their sets up in a Redis that outlives them.
func (z *ZSetFeeds) ClearAll(ctx context.Context) (int, error) {
	n := 0
	it := z.rdb.Scan(ctx, 0, z.prefix+"*", int64(z.batch)).Iterator()
	keys := make([]string, 0, z.batch)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		if err := z.rdb.Unlink(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("baseline clear: %w", err)
		}
		n += len(keys)
		keys = keys[:0]
		return nil
	}
	for it.Next(ctx) {
		keys = append(keys, it.Val())
		if len(keys) == z.batch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("baseline clear: scan: %w", err)
	}
	return n, flush()
}
