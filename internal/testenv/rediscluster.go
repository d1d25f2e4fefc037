package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitClusterHealthy waits until the Redis Cluster of nodes addrs can lose any one primary
// without going down: every node answers and reports cluster_state:ok, and every primary has a
// replica whose link to it is up with no sync in progress. A test that kills a primary calls it
// first (after LockSetup): the node an earlier test killed and restarted answers at once, but
// it is a failover candidate only once it has synced from its new primary, and a primary
// killed before then leaves its slots without one (CLUSTERDOWN).
func WaitClusterHealthy(tb testing.TB, addrs []string) {
	tb.Helper()
	const timeout = 2 * time.Minute
	deadline := time.Now().Add(timeout)
	start, why, first := time.Now(), "", ""
	for {
		if why = clusterUnhealthy(addrs); why == "" {
			if first != "" {
				tb.Logf("the Redis Cluster was healthy after %v (at first: %s)", time.Since(start).Round(time.Millisecond), first)
			}
			return
		}
		if first == "" {
			first = why
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the Redis Cluster %v was not healthy within %v: %s", addrs, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterUnhealthy says what keeps the cluster of addrs from surviving one primary's loss, or
// "" when nothing does.
func clusterUnhealthy(addrs []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	primaries := map[string]bool{} // node ID → has a synced replica
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			c.Close()
			return fmt.Sprintf("%s: %v", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			c.Close()
			return addr + ": cluster_state is not ok"
		}
		repl, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(repl, "role:master") {
			var id string
			id, err = c.ClusterMyID(ctx).Result()
			if _, seen := primaries[id]; err == nil && !seen {
				primaries[id] = false
			}
		}
		if err == nil && strings.Contains(repl, "role:slave") {
			if !strings.Contains(repl, "master_link_status:up") || strings.Contains(repl, "master_sync_in_progress:1") {
				c.Close()
				return addr + ": a replica not yet synced with its primary"
			}
			var nodes string
			nodes, err = c.ClusterNodes(ctx).Result()
			for _, l := range strings.Split(nodes, "\n") {
				f := strings.Fields(l)
				if len(f) > 3 && strings.Contains(f[2], "myself") {
					primaries[f[3]] = true
				}
			}
		}
		c.Close()
		if err != nil {
			return fmt.Sprintf("%s: %v", addr, err)
		}
	}
	for id, ok := range primaries {
		if !ok {
			return "primary " + id + " has no synced replica"
		}
	}
	if len(primaries) == 0 {
		return "no primary answered"
	}
	return ""
}
