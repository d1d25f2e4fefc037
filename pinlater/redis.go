package pinlater

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Shapes of the Redis deployment pinlater runs on (RedisConfig.Mode).
const (
	// RedisSingle is one Redis server at one address: a host failure stops the queues until
	// the server is back.
	RedisSingle = "single"
	// RedisSentinel is a primary with replicas watched by Redis Sentinel: the clients ask the
	// sentinels where the primary is, and follow it when Sentinel promotes a replica.
	RedisSentinel = "sentinel"
	// RedisCluster is a Redis Cluster: each queue's keys live in one hash slot (asynq wraps the
	// queue name in a hash tag), so the queues spread over the primaries.
	RedisCluster = "cluster"
)

// RedisConfig says where pinlater's Redis is and how to log in to it. Every Redis client of a
// process (the queues, the join cache, the rate limits, the start-up check) is made from one,
// by ConnOpt and NewRedisClient, so they all follow a Sentinel failover the same way.
type RedisConfig struct {
	// Mode is RedisSingle (the default when empty), RedisSentinel or RedisCluster.
	Mode string
	// Addr is the host:port of the one server (RedisSingle).
	Addr string
	// MasterName is the name the sentinels monitor the primary under (RedisSentinel).
	MasterName string
	// SentinelAddrs are the sentinels' host:port (RedisSentinel); three or more, so that a
	// majority can agree that the primary is down.
	SentinelAddrs []string
	// ClusterAddrs are host:port of some nodes of the cluster (RedisCluster); the client learns
	// the others from them.
	ClusterAddrs []string
	// Username and Password log in to the data nodes (Redis ACL user; empty: the default user).
	Username, Password string
	// SentinelUsername and SentinelPassword log in to the sentinels (RedisSentinel).
	SentinelUsername, SentinelPassword string
	// DB is the database number; a Redis Cluster has only database 0.
	DB int
	// DialTimeout bounds a connection attempt (0: go-redis's 5 s).
	DialTimeout time.Duration
}

// mode is c.Mode with the default filled in.
func (c RedisConfig) mode() string {
	if c.Mode == "" {
		return RedisSingle
	}
	return c.Mode
}

// Validate reports what makes c unusable: an unknown mode, a missing address or master name, an
// address that is not host:port, a database number other than 0 on a Redis Cluster.
func (c RedisConfig) Validate() error {
	var errs []error
	hostPorts := func(what string, addrs []string) {
		if len(addrs) == 0 {
			errs = append(errs, fmt.Errorf("%s: none given", what))
		}
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
			}
		}
	}
	switch c.mode() {
	case RedisSingle:
		if c.Addr == "" {
			errs = append(errs, errors.New("address: empty"))
		}
	case RedisSentinel:
		if c.MasterName == "" {
			errs = append(errs, errors.New("sentinel master name: empty"))
		}
		hostPorts("sentinel addresses", c.SentinelAddrs)
	case RedisCluster:
		hostPorts("cluster addresses", c.ClusterAddrs)
		if c.DB != 0 {
			errs = append(errs, fmt.Errorf("database %d: a Redis Cluster has only database 0", c.DB))
		}
	default:
		errs = append(errs, fmt.Errorf("mode %q: want %s, %s or %s", c.Mode, RedisSingle, RedisSentinel, RedisCluster))
	}
	return errors.Join(errs...)
}

// String names the Redis for messages and logs: its address, or the master name and the
// sentinels, or the cluster's seed nodes. It holds no credentials.
func (c RedisConfig) String() string {
	switch c.mode() {
	case RedisSentinel:
		return fmt.Sprintf("master %s of sentinels %s", c.MasterName, strings.Join(c.SentinelAddrs, ","))
	case RedisCluster:
		return "cluster " + strings.Join(c.ClusterAddrs, ",")
	}
	return c.Addr
}

// ConnOpt returns asynq's connection option for c: RedisClientOpt, RedisFailoverClientOpt or
// RedisClusterClientOpt (the last with a shorter topology refresh, see clusterConnOpt). Its
// MakeRedisClient builds go-redis's Client, failover Client (NewFailoverClient) or
// ClusterClient (NewClusterClient). c should be valid (Validate); an unknown mode gets the
// single-server option.
func (c RedisConfig) ConnOpt() asynq.RedisConnOpt {
	switch c.mode() {
	case RedisSentinel:
		return asynq.RedisFailoverClientOpt{
			MasterName: c.MasterName, SentinelAddrs: c.SentinelAddrs,
			SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, DB: c.DB, DialTimeout: c.DialTimeout,
		}
	case RedisCluster:
		return clusterConnOpt{asynq.RedisClusterClientOpt{
			Addrs: c.ClusterAddrs, Username: c.Username, Password: c.Password, DialTimeout: c.DialTimeout,
		}}
	}
	return asynq.RedisClientOpt{Addr: c.Addr, Username: c.Username, Password: c.Password, DB: c.DB, DialTimeout: c.DialTimeout}
}

// clusterReload is how often a cluster client reloads the cluster's layout (which primary
// serves which slots) while it is in use.
const clusterReload = time.Second

// clusterConnOpt is asynq's RedisClusterClientOpt whose client reloads the cluster's layout every
// clusterReload. go-redis reloads it on a MOVED reply, or every 60 s by default, but not when
// a primary stops answering: a dead primary's slots would then fail every command for up to a
// minute after its replica took over, since nothing answers MOVED from a dead node.
type clusterConnOpt struct{ asynq.RedisClusterClientOpt }

// MakeRedisClient returns a go-redis ClusterClient (asynq.RedisConnOpt).
func (o clusterConnOpt) MakeRedisClient() any {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: o.Addrs, MaxRedirects: o.MaxRedirects, Username: o.Username, Password: o.Password,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		TLSConfig: o.TLSConfig, ClusterStateReloadInterval: clusterReload,
	})
}

// NewRedisClient returns a go-redis client of c (the one ConnOpt's MakeRedisClient makes), for
// the other users of pinlater's Redis: the join cache, the rate limits. Close it when done.
func NewRedisClient(c RedisConfig) redis.UniversalClient {
	return universal(c.ConnOpt())
}

// universal is the go-redis client of an asynq connection option, nil when the option makes
// something else.
func universal(r asynq.RedisConnOpt) redis.UniversalClient {
	rdb, _ := r.MakeRedisClient().(redis.UniversalClient)
	return rdb
}

// keysFor returns the key layout of namespace ns on rdb: on a Redis Cluster pinlater's own keys
// carry a hash tag, so that the scripts which touch several of them (the rate limiter's) find
// them in one slot.
func keysFor(rdb redis.UniversalClient, ns string) keys {
	_, cluster := rdb.(*redis.ClusterClient)
	return keys{ns: ns, tagged: cluster}
}
