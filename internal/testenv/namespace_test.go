package testenv_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// keysIn lists the keys of database db matching pattern, sorted.
func keysIn(t *testing.T, addr string, db int, pattern string) []string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func set(t *testing.T, addr string, db int, keys ...string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer rdb.Close()
	for _, k := range keys {
		if err := rdb.Set(context.Background(), k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisNamespacePurged: what a test writes under the namespace RedisNamespace gave it (queues,
// pinlater keys, rate-limit buckets, cache entries, queue-set members, in two databases) is gone
// once the test ends; another namespace whose name starts the same way is left alone. Likewise
// for RedisKeyPrefix.
func TestRedisNamespacePurged(t *testing.T) {
	testenv.Redis(t) // the checks after the writer need the Redis too: skipped with -short
	var addr, ns, prefix string
	t.Run("writer", func(t *testing.T) {
		addr, ns = testenv.RedisNamespace(t, "purgetest")
		_, prefix = testenv.RedisKeyPrefix(t, "purgekeys")
		for _, db := range []int{0, 11} {
			set(t, addr, db, "asynq:{"+ns+"-fanout}:pending", "asynq:{"+ns+"-default}:t:x", "pinlater:"+ns+":rates",
				"smartfeed:rl:"+ns+":u:1", "zc:"+ns+":v:1", prefix+":a", prefix+":b:c",
				// neighbours: a longer namespace with the same start, and a key without the ':'
				"asynq:{"+ns+"0-fanout}:pending", "pinlater:"+ns+"0:rates", prefix+"0:a")
			rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
			if err := rdb.SAdd(context.Background(), "asynq:queues", ns+"-fanout", ns+"0-fanout").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.SAdd(context.Background(), "asynq:queues:paused", ns+"-fanout").Err(); err != nil {
				t.Fatal(err)
			}
			rdb.Close()
		}
	})
	for _, db := range []int{0, 11} {
		var got []string
		for _, pat := range []string{"*" + ns + "*", prefix + "*"} {
			got = append(got, keysIn(t, addr, db, pat)...)
		}
		want := []string{"asynq:{" + ns + "0-fanout}:pending", "pinlater:" + ns + "0:rates", prefix + "0:a"}
		slices.Sort(got)
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("db %d after the test: keys (-want +got):\n%s", db, diff)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
		for set, want := range map[string][]string{"asynq:queues": {ns + "0-fanout"}, "asynq:queues:paused": nil} {
			members, err := rdb.SMembers(context.Background(), set).Result()
			if err != nil {
				t.Fatal(err)
			}
			members = slices.DeleteFunc(members, func(m string) bool { return !strings.HasPrefix(m, ns) })
			if diff := cmp.Diff(want, members, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("db %d after the test: %s members (-want +got):\n%s", db, set, diff)
			}
		}
		// The neighbours belong to no test: remove them here.
		rdb.Del(context.Background(), "asynq:{"+ns+"0-fanout}:pending", "pinlater:"+ns+"0:rates", prefix+"0:a")
		rdb.SRem(context.Background(), "asynq:queues", ns+"0-fanout")
		rdb.Close()
	}
}
