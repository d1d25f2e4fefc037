package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var nsSeq atomic.Uint64

// RedisNamespace returns the address of the test Redis (see Redis: the same skip and fail
// rules) and a namespace of t's own, "<prefix>_<unique suffix>", for pinlater and every key
// smartfeed derives from its --redis-namespace. When t ends, after the cleanups t registers
// later (so after the servers the test started are stopped), every key of the namespace is
// deleted from every database of that Redis (PurgeNamespace): a test leaves nothing behind,
// whether it passed or failed. prefix is letters, digits and '_', at most 32 bytes.
func RedisNamespace(t testing.TB, prefix string) (addr, ns string) {
	t.Helper()
	addr = Redis(t)
	if err := checkName(prefix, 32); err != nil {
		t.Fatalf("testenv.RedisNamespace: prefix %v", err)
	}
	ns = unique(prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := PurgeNamespace(ctx, addr, ns); err != nil {
			t.Errorf("testenv: purge the test's Redis namespace %s: %v", ns, err)
		}
	})
	return addr, ns
}

// RedisKeyPrefix returns the address of the test Redis (see Redis) and a key prefix of t's own,
// "<name>_<unique suffix>", for a test that writes plain keys rather than a pinlater namespace:
// every key the test writes must start with the prefix and ':'. When t ends, after the
// cleanups t registers later, every key matching "<prefix>:*" is deleted from every database
// of that Redis. name is letters, digits and '_', at most 32 bytes.
func RedisKeyPrefix(t testing.TB, name string) (addr, prefix string) {
	t.Helper()
	addr = Redis(t)
	if err := checkName(name, 32); err != nil {
		t.Fatalf("testenv.RedisKeyPrefix: name %v", err)
	}
	prefix = unique(name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := purge(ctx, addr, []string{prefix + ":*"}, ""); err != nil {
			t.Errorf("testenv: purge the test's Redis keys %s:*: %v", prefix, err)
		}
	})
	return addr, prefix
}

// unique returns name followed by '_' and a suffix no other call in any process returns.
func unique(name string) string {
	return name + "_" + strconv.FormatInt(time.Now().UnixNano(), 36) + "x" + strconv.FormatUint(nsSeq.Add(1), 36)
}

// NamespacePatterns are the key patterns of namespace ns: pinlater's queues
// ("asynq:{<ns>-<queue>}:...") and keys ("pinlater:<ns>:..."), the auth rate limiter's buckets
// ("smartfeed:rl:<ns>:...") and the zen cache ("zc:<ns>:...").
func NamespacePatterns(ns string) []string {
	return []string{"asynq:{" + ns + "-*", "pinlater:" + ns + ":*", "smartfeed:rl:" + ns + ":*", "zc:" + ns + ":*"}
}

// queueSets are asynq's sets of queue names; a namespace's queues are the members "<ns>-...".
var queueSets = []string{"asynq:queues", "asynq:queues:paused"}

// PurgeNamespace deletes every key of namespace ns (NamespacePatterns) and its queues' names
// from asynq's queue sets, in every database of the Redis at addr that holds keys.
func PurgeNamespace(ctx context.Context, addr, ns string) error {
	if err := checkName(ns, 64); err != nil || ns == "" {
		return fmt.Errorf("namespace %q: not a test namespace", ns)
	}
	return purge(ctx, addr, NamespacePatterns(ns), ns+"-")
}

// purge deletes the keys matching patterns and, when queuePrefix is not empty, the members of
// asynq's queue sets that start with it, in every database of the Redis at addr that holds keys.
func purge(ctx context.Context, addr string, patterns []string, queuePrefix string) error {
	dbs, err := databases(ctx, addr)
	if err != nil {
		return err
	}
	for _, db := range dbs {
		if err := purgeDB(ctx, addr, db, patterns, queuePrefix); err != nil {
			return fmt.Errorf("db %d: %w", db, err)
		}
	}
	return nil
}

func purgeDB(ctx context.Context, addr string, db int, patterns []string, queuePrefix string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer rdb.Close()
	for _, pat := range patterns {
		iter := rdb.Scan(ctx, 0, pat, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	if queuePrefix == "" {
		return nil
	}
	for _, set := range queueSets {
		members, err := rdb.SMembers(ctx, set).Result()
		if err != nil {
			return err
		}
		for _, m := range members {
			if strings.HasPrefix(m, queuePrefix) {
				if err := rdb.SRem(ctx, set, m).Err(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// databases lists the numbers of the databases of the Redis at addr that hold keys.
func databases(ctx context.Context, addr string) ([]int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "keyspace").Result()
	if err != nil {
		return nil, err
	}
	var dbs []int
	for _, line := range strings.Split(info, "\n") {
		name, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "db") {
			continue
		}
		if n, err := strconv.Atoi(name[2:]); err == nil {
			dbs = append(dbs, n)
		}
	}
	return dbs, nil
}

// checkName accepts what pinlater accepts as a namespace: letters, digits and '_', at most max
// bytes.
func checkName(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%q: longer than %d bytes", s, max)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("%q: only letters, digits and '_' allowed", s)
		}
	}
	return nil
}
