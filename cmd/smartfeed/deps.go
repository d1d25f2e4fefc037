package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/internal/deployment"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// startDep is a dependency a server needs at start, and the address it is reached at.
type startDep struct {
	name, addr string
	check      func(context.Context) error
}

// depCheckTimeout bounds one check of one dependency at start.
const depCheckTimeout = 2 * time.Second

// startDeps are the dependencies role needs to start with cfg: Redis (pinlater, and the join
// cache) and, on HBase, the ZooKeeper quorum of each store the role opens. ZooKeeper answering
// is what can be checked in a moment; an HBase whose ZooKeeper answers but whose servers do
// not fails later, when the store opens, with gohbase's error.
func startDeps(role string, cfg config.Config) []startDep {
	var out []startDep
	if role != roleGenerator || cfg.Cache.Enabled {
		rc := redisConf(cfg.Redis)
		rc.DialTimeout = depCheckTimeout
		// What a connection is tried to first: the server, a sentinel, a node of the cluster.
		first, defPort := rc.Addr, "6379"
		switch rc.Mode {
		case config.RedisSentinel:
			first, defPort = strings.Join(rc.SentinelAddrs, ","), "26379"
		case config.RedisCluster:
			first = strings.Join(rc.ClusterAddrs, ",")
		}
		out = append(out, startDep{name: "redis", addr: rc.String(), check: func(ctx context.Context) error {
			// A connection first: go-redis would log its own failed dial besides our error.
			if err := dialAny(ctx, first, defPort); err != nil {
				return err
			}
			c := pinlater.NewRedisClient(rc)
			defer c.Close()
			return c.Ping(ctx).Err()
		}})
	}
	if cfg.Storage.Backend == config.BackendHBase {
		h := cfg.Storage.HBase
		quorums := map[string]string{} // quorum → what it holds, each quorum once
		var order []string
		add := func(zk, what string) {
			if _, ok := quorums[zk]; !ok {
				order = append(order, zk)
				quorums[zk] = what
			} else {
				quorums[zk] += ", " + what
			}
		}
		uses := storesOf(role, cfg)
		if uses.Main {
			add(h.PoolsZK, "main store")
		}
		if uses.Feed {
			add(h.PrimaryZK, "feed primary")
			add(h.StandbyZK, "feed standby")
		}
		for _, zk := range order {
			out = append(out, startDep{name: "hbase (" + quorums[zk] + ", its ZooKeeper)", addr: zk,
				check: func(ctx context.Context) error { return dialAny(ctx, zk, "2181") }})
		}
	}
	return out
}

// dialAny succeeds when one host of a ZooKeeper quorum ("host[:port],…") takes a connection.
func dialAny(ctx context.Context, quorum, defPort string) error {
	var last error
	for _, h := range strings.Split(quorum, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, defPort)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", h)
		if err == nil {
			return c.Close()
		}
		last = err
	}
	if last == nil {
		return fmt.Errorf("empty quorum %q", quorum)
	}
	return last
}

// depBackoff is the pause between two rounds of checks while waiting: Initial, doubled each
// round up to Max. Zero fields mean 250ms and 10s.
type depBackoff struct{ Initial, Max time.Duration }

// awaitDeps checks deps once. When one is down it fails with one line naming it, its address
// and --wait-for-deps; with wait it checks again (backoff) until all answer or ctx ends,
// logging once each time the set of unreachable dependencies changes.
func awaitDeps(ctx context.Context, deps []startDep, wait bool, log *zap.Logger, b depBackoff) error {
	if b.Initial <= 0 {
		b.Initial = 250 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 10 * time.Second
	}
	pause, last, waited := b.Initial, "", false
	for {
		var down, errs []string
		for _, d := range deps {
			cctx, cancel := context.WithTimeout(ctx, depCheckTimeout)
			err := d.check(cctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				continue
			}
			if !wait {
				return fmt.Errorf("%s at %s is unreachable (%v); start it, or pass --wait-for-deps to wait for it", d.name, d.addr, err)
			}
			down = append(down, d.name+" at "+d.addr)
			errs = append(errs, err.Error())
		}
		state := strings.Join(down, "; ")
		switch {
		case state == "" && waited:
			log.Info("dependencies answer; starting")
			return nil
		case state == "":
			return nil
		case state != last:
			log.Warn("waiting for dependencies (--wait-for-deps)", zap.String("unreachable", state),
				zap.String("error", strings.Join(errs, "; ")))
		}
		last, waited = state, true
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, b.Max)
	}
}

// watchDeps pings Redis every interval until ctx is done: while it does not answer, health
// and /readyz say not ready, and each change of state is logged once.
func (a *app) watchDeps(ctx context.Context, every time.Duration, deps []dep) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := "" // the dependency that was down at the last check
	for {
		down, why := "", ""
		for _, d := range deps {
			pctx, cancel := context.WithTimeout(ctx, every)
			err := d.check(pctx)
			cancel()
			if err != nil {
				down, why = d.name, err.Error()
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		a.readyMu.Lock()
		a.depsErr = why
		a.publishReady()
		a.readyMu.Unlock()
		switch {
		case down != "" && down != last:
			a.log.Warn("not ready: a dependency is unreachable", zap.String("dependency", down), zap.String("error", why))
		case down == "" && last != "":
			a.log.Info("ready again: dependencies answer", zap.String("was_down", last))
		}
		last = down
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dep is a dependency readiness waits for.
type dep struct {
	name  string
	check func(context.Context) error
}

// deps are the dependencies of this process's role: Redis (pinlater) and, on HBase, the main
// store (the graph and the pools; the feed stores fail over to each other instead).
func (a *app) deps() []dep {
	var out []dep
	if a.pinClient != nil {
		out = append(out, dep{"redis", a.pinClient.Ping})
	}
	if a.graph != nil && a.cfg.Storage.Backend == config.BackendHBase {
		if t, err := a.stores.table(context.Background(), storeMain, tableMeta); err == nil {
			out = append(out, dep{"hbase main store", func(ctx context.Context) error {
				if _, err := t.Get(ctx, deployment.IDKey); err != nil && !errors.Is(err, zen.ErrNotFound) {
					return err
				}
				return nil
			}})
		}
	}
	return out
}
