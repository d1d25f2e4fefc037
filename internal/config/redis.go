package config

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// Redis modes (Redis.Mode).
const (
	RedisSingle   = "single"
	RedisSentinel = "sentinel"
	RedisCluster  = "cluster"
)

// Redis locates the pinlater Redis (also the join cache's and the rate limits').
type Redis struct {
	// Mode is the shape of the Redis deployment: "single" (one server at Addr), "sentinel" (a
	// primary watched by Redis Sentinel: SentinelMaster, SentinelAddrs; clients follow a
	// failover) or "cluster" (a Redis Cluster: ClusterAddrs). Default "single".
	Mode string `json:"mode"`
	// Addr is host:port (mode single). Default "127.0.0.1:6379".
	Addr string `json:"addr"`
	// SentinelMaster is the name the sentinels monitor the primary under (mode sentinel).
	SentinelMaster string `json:"sentinel_master"`
	// SentinelAddrs are the sentinels, "host:port,host:port,..." (mode sentinel). Default empty.
	SentinelAddrs string `json:"sentinel_addrs"`
	// ClusterAddrs are some nodes of the Redis Cluster, "host:port,..." (mode cluster); the
	// client learns the others from them. Default empty.
	ClusterAddrs string `json:"cluster_addrs"`
	// Username is the Redis ACL user of the data nodes (empty: the default user).
	Username string `json:"username"`
	// SentinelUsername is the ACL user of the sentinels (mode sentinel; empty: none).
	SentinelUsername string `json:"sentinel_username"`
	// SentinelPassword is the sentinels' AUTH password (masked when printed); from the config
	// file, SMARTFEED_REDIS_SENTINEL_PASSWORD or SentinelPasswordFile, never a flag.
	SentinelPassword string `json:"sentinel_password" secret:"true"`
	// SentinelPasswordFile holds the sentinels' password (a Kubernetes Secret mounted as a file).
	SentinelPasswordFile string `json:"sentinel_password_file"`
	// Password is the Redis AUTH password (masked when printed); from the config file, the
	// SMARTFEED_REDIS_PASSWORD environment variable or PasswordFile, never a flag. Default empty.
	Password string `json:"password" secret:"true"`
	// PasswordFile holds the Redis password (a Kubernetes Secret mounted as a file).
	PasswordFile string `json:"password_file"`
	// DB is the Redis database number. Default 0.
	DB int `json:"db"`
	// Namespace prefixes every pinlater key and queue. Default empty. A deployment claims its
	// namespace at start (a marker in Redis naming the deployment ID kept in its main store) and
	// refuses to start on a namespace another deployment owns.
	Namespace string `json:"namespace"`
	// NamespaceTakeover purges a namespace owned by another deployment (one that is gone) and
	// claims it. Default false.
	NamespaceTakeover bool `json:"namespace_takeover"`
}

// hostPorts checks a comma-separated list of host:port: at least one, each host:port.
func hostPorts(list string) error {
	n := 0
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%s is not host:port", quote.Q(a))
		}
		n++
	}
	if n == 0 {
		return errors.New("empty (want host:port,...)")
	}
	return nil
}

// SplitAddrs returns the addresses of a comma-separated list, blanks dropped.
func SplitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Where describes the Redis the settings point at, for a banner: the address, the Sentinel
// master and its sentinels, or the Cluster's seed nodes.
func (r Redis) Where() string {
	switch r.Mode {
	case "sentinel":
		return fmt.Sprintf("Sentinel master %q via %s", r.SentinelMaster, r.SentinelAddrs)
	case "cluster":
		return "Cluster " + r.ClusterAddrs
	default:
		return r.Addr
	}
}

// validate reports the problems of the Redis settings through bad, as ValidateFor does;
// cacheEnabled is whether the join cache (cache.enabled), which a Redis Cluster cannot serve, is on.
func (r Redis) validate(cacheEnabled bool, bad func(format string, args ...any)) {
	switch r.Mode {
	case RedisSingle:
		if r.Addr == "" {
			bad("redis.addr: empty")
		}
	case RedisSentinel:
		if r.SentinelMaster == "" {
			bad("redis.sentinel_master: empty (mode sentinel needs the name the sentinels monitor the primary under)")
		}
		if err := hostPorts(r.SentinelAddrs); err != nil {
			bad("redis.sentinel_addrs: %v", err)
		}
	case RedisCluster:
		if err := hostPorts(r.ClusterAddrs); err != nil {
			bad("redis.cluster_addrs: %v", err)
		}
		if r.DB != 0 {
			bad("redis.db: %d, but a Redis Cluster has only database 0", r.DB)
		}
		// The join cache reads the version keys of several groups (and the entries named after
		// them) in one Lua script; on a Cluster they hash to different slots and Redis refuses
		// the script (CROSSSLOT), so every cached read would fall through to the store.
		if cacheEnabled {
			bad("cache.enabled: the join cache's lookup script reads keys of several hash slots at once, which a Redis Cluster refuses; use redis.mode single or sentinel with the cache")
		}
	default:
		bad("redis.mode: %s is not single, sentinel or cluster", quote.Q(r.Mode))
	}
	if r.DB < 0 || r.DB > 15 {
		bad("redis.db: %d out of [0, 15]", r.DB)
	}
	for _, ch := range r.Namespace {
		if !(ch == '_' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			bad("redis.namespace: %q: only letters, digits and '_' allowed", r.Namespace)
			break
		}
	}
}
