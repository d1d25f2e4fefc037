package main

import (
	"context"

	"github.com/smartfeed/smartfeed/graphsvc/shardadmin"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmove"
)

// newShardAdmin builds the mover over the router's stores, keeping its progress row in the
// main store's meta table.
func (a *app) newShardAdmin() (*shardadmin.Server, error) {
	backs := map[string]zen.Store{}
	for _, n := range a.router.StoreNames() {
		backs[n], _ = a.router.Backend(n)
	}
	meta, err := a.stores.table(context.Background(), storeMain, tableMeta)
	if err != nil {
		return nil, err
	}
	log := a.log.Named("shardmove")
	refuse := ""
	var maps zenmove.Maps = &zenmove.Local{Router: a.router, Setters: []func(*zen.ShardMap){a.graph.SetShards}}
	if a.shardWatch == nil {
		refuse = "the shard map is not persisted: start the process with --shard-map-file or --shard-map-zk, " +
			"so the switched map outlives a restart"
	} else {
		sm := a.cfg.Storage.ShardMap
		maps = &shardadmin.PublishedMaps{Router: a.router, Watch: a.shardWatch, File: sm.File, ZK: sm.ZK, ZKPath: sm.ZKPath, Log: log}
	}
	mover, err := zenmove.New(backs, maps, zenmove.Options{State: meta, Logger: log, Registerer: a.reg})
	if err != nil {
		return nil, err
	}
	return shardadmin.New(mover, refuse, log), nil
}
