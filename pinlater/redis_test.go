package pinlater

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestRedisConfigConnOpt: each mode gives asynq's option of that shape, carrying the addresses
// and credentials, and a go-redis client of the matching kind.
func TestRedisConfigConnOpt(t *testing.T) {
	tests := []struct {
		name string
		c    RedisConfig
		want asynq.RedisConnOpt
	}{
		{"default is single", RedisConfig{Addr: "r:6379", Password: "p", DB: 3},
			asynq.RedisClientOpt{Addr: "r:6379", Password: "p", DB: 3}},
		{"sentinel", RedisConfig{Mode: RedisSentinel, MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26379"},
			Username: "u", Password: "p", SentinelPassword: "sp", DB: 1},
			asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"s1:26379", "s2:26379"},
				Username: "u", Password: "p", SentinelPassword: "sp", DB: 1}},
		{"cluster", RedisConfig{Mode: RedisCluster, ClusterAddrs: []string{"n1:7000"}, Password: "p"},
			clusterConnOpt{asynq.RedisClusterClientOpt{Addrs: []string{"n1:7000"}, Password: "p"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Validate(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, tt.c.ConnOpt()); diff != "" {
				t.Errorf("ConnOpt (-want +got):\n%s", diff)
			}
			rdb := NewRedisClient(tt.c)
			defer rdb.Close()
			_, cluster := rdb.(*redis.ClusterClient)
			if cluster != (tt.c.Mode == RedisCluster) {
				t.Errorf("NewRedisClient made a %T", rdb)
			}
		})
	}
}

// TestRedisConfigRefuses: Validate names what is missing or wrong.
func TestRedisConfigRefuses(t *testing.T) {
	tests := []struct {
		name string
		c    RedisConfig
		want string
	}{
		{"unknown mode", RedisConfig{Mode: "ring", Addr: "r:1"}, `mode "ring"`},
		{"single without address", RedisConfig{}, "address: empty"},
		{"sentinel without master", RedisConfig{Mode: RedisSentinel, SentinelAddrs: []string{"s:26379"}}, "sentinel master name: empty"},
		{"sentinel without sentinels", RedisConfig{Mode: RedisSentinel, MasterName: "m"}, "sentinel addresses: none given"},
		{"cluster address without port", RedisConfig{Mode: RedisCluster, ClusterAddrs: []string{"n1"}}, "cluster addresses"},
		{"cluster database", RedisConfig{Mode: RedisCluster, ClusterAddrs: []string{"n1:7000"}, DB: 1}, "only database 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestClusterKeysShareASlot: on a Redis Cluster, the keys the rate limiter's script touches in
// one call (the rates, a queue's bucket, a task's reservation) hash to one slot, in the default
// namespace and in a named one; on a single Redis the key names stay as they were.
func TestClusterKeysShareASlot(t *testing.T) {
	for _, ns := range []string{"", "ns1"} {
		k := keys{ns: ns, tagged: true}
		slots := map[int]bool{}
		for _, key := range []string{k.rates(), k.rateState("fanout"), k.reservation("fanout", "task-1"), k.draining(), k.prefix() + "owner"} {
			slots[slot(key)] = true
		}
		if len(slots) != 1 {
			t.Errorf("namespace %q: pinlater's keys hash to %d slots, want 1", ns, len(slots))
		}
	}
	if got := (keys{ns: "ns1"}).rates(); got != "pinlater:ns1:rates" {
		t.Errorf("single Redis: rates key %q, want pinlater:ns1:rates", got)
	}
	if a, b := (keys{tagged: true}).rates(), (keys{ns: "pinlater", tagged: true}).rates(); a == b {
		t.Errorf("the default namespace and namespace \"pinlater\" share the key %s", a)
	}
}

// slot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash tag, or of the whole key
// when it has none, mod 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for _, b := range []byte(key) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
