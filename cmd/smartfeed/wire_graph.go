package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/shardwatch"
	"github.com/smartfeed/smartfeed/zen/zencache"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// buildGraph builds the graph over zstore (the main store, or the router over the stores):
// the worker's, and the deleted-pin filter of the generator and the feed. With the join cache
// on, a.graph reads through the cache and a.delLog, the deletion log's reader, reads past it.
func (a *app) buildGraph(ctx context.Context, zstore zen.Store) error {
	var err error
	graphStore := zstore
	if a.cfg.Cache.Enabled {
		rdb := redisClient(a.cfg.Redis)
		a.conns = append(a.conns, rdb)
		cached, err := zencache.Wrap(zstore, rdb, zencache.Options{Prefix: "zc:" + a.cfg.Redis.Namespace + ":",
			TTL: a.cfg.Cache.TTL.D(), NegativeTTL: a.cfg.Cache.NegativeTTL.D(), Registerer: a.reg})
		if err != nil {
			return fmt.Errorf("join cache: %w", err)
		}
		graphStore = cached
	}
	if a.graph, err = zen.NewGraph(ctx, graphStore, nil, nil); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	a.delLog = a.graph
	if graphStore != zstore {
		if a.delLog, err = zen.NewGraph(ctx, zstore, nil, nil); err != nil {
			return fmt.Errorf("graph: %w", err)
		}
	}
	a.deleted = newSetLiveness(feedsvc.NewDeletedSet(a.delLog).WithLogger(a.log.Named("deletedset")), a.graph)
	return nil
}

// shardStores are the store names a shard map may use: "default" (the main store) and the
// extra stores of --stores.
func shardStores(cfg config.Storage) []string {
	names := []string{zenroute.DefaultStore}
	extra, _ := config.ParseStores(cfg.Stores) // validated with the configuration
	for _, ns := range extra {
		names = append(names, ns.Name)
	}
	return names
}

// buildRouter opens the extra stores of --stores and routes the shard-keyed tables over them and
// main by the shard map; without extra stores it returns nil and the graph uses main alone.
func (a *app) buildRouter(ctx context.Context, main zen.Store) (*zenroute.Store, error) {
	extra, err := config.ParseStores(a.cfg.Storage.Stores)
	if err != nil || len(extra) == 0 {
		return nil, err
	}
	backs := map[string]zen.Store{zenroute.DefaultStore: main}
	for _, ns := range extra {
		if backs[ns.Name], err = a.stores.named(ctx, ns); err != nil {
			return nil, err
		}
	}
	var o zenroute.Options
	if a.cfg.Storage.ShardMap.ZK != "" {
		// Processes share the map through ZooKeeper: this one writes shard-keyed rows only while
		// its watcher confirms that the map in use is the current one (zenroute.Lease).
		a.shardLease = zenroute.NewLease()
		o.Lease = a.shardLease
	}
	r, err := zenroute.New(backs, nil, o)
	if err != nil {
		return nil, fmt.Errorf("shard routing: %w", err)
	}
	return r, nil
}

// processAckID names this process among those acknowledging shard maps: host, pid, random.
func processAckID() string {
	host, _ := os.Hostname()
	host = strings.ReplaceAll(host, "/", "_")
	return fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
}

// setShards installs a new shard map: in the router (which waits for the writes in flight under
// the previous one) and in the graph (which places new objects by it).
func (a *app) setShards(m *zen.ShardMap) {
	if a.router != nil {
		a.router.SetShards(m)
	}
	a.graph.SetShards(m)
}

// buildShardWatch loads the configured shard map (a bad file refuses the start; with routed
// stores the ZooKeeper map too, so no write is routed by the default map meanwhile) and prepares
// its watchers, which run loops.
func (a *app) buildShardWatch(ctx context.Context) error {
	sm := a.cfg.Storage.ShardMap
	if sm.File == "" && sm.ZK == "" {
		return nil
	}
	opts := shardwatch.Options{KnownStores: shardStores(a.cfg.Storage), Logger: a.log.Named("shardmap"), Registerer: a.reg}
	if a.router != nil && sm.ZK != "" {
		// A shard move waits until every process routing by the znode's map has applied its
		// fence and switch: each acknowledges every version it handles.
		opts.AckID = processAckID()
		opts.Lease = a.shardLease
	}
	w, err := shardwatch.New(a.setShards, opts)
	if err != nil {
		return err
	}
	if sm.File != "" {
		if err := w.LoadFile(sm.File); err != nil {
			return fmt.Errorf("shard map: %w", err)
		}
	}
	if sm.ZK != "" && a.router != nil {
		zctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.LoadZK(zctx, sm.ZK, sm.ZKPath); err != nil {
			return fmt.Errorf("shard map: %w", err)
		}
	}
	a.shardWatch = w
	return nil
}
