// Package zen is SmartFeed's graph data model: Pinterest-style 64-bit sharded IDs, JSON objects,
// ordered edges (mapping tables), the mod shard, and per-user pools, over a sorted Table with two
// backends (embedded Pebble, the default, and HBase through gohbase).
//
// IDs are shard<<46 | type<<36 | local (ID, NewID, ParseID); local IDs come from a per-(shard,
// type) counter row. A ShardMap (LoadShardMap, DefaultShardMap) names the store of each shard
// range and which shards take new objects. Non-ID keys map to shards with ModShard (md5 as a
// 128-bit big-endian integer mod n) and to IDs with Graph.MapKey.
//
// Graph keeps objects (version-stamped JSON, compare-and-set updates, soft delete) and edges.
// Every row key starts with the owning ID, so rows of one user or board live on its shard and
// writes spread by shard. The HBase backend has no multi-row transactions, so every multi-row
// write is ordered so that a failure part-way leaves only rows that readers recognise as stale,
// and a retry finishes the job: an edge's point row is the truth, the sorted rows are views
// checked against it. Pools keeps the per-(user, source) priority queues (row key user | source
// | ^score | pin, best first), written blind and append-only; dedup and tombstones apply when
// reading (docs/pools.md).
//
// zen/zenroute routes the shard-keyed tables over several named stores by the live shard map,
// and zen/zenmove moves a shard range from one store to another while the graph serves.
//
// zen imports none of the services and nothing of gRPC or pinlater. zen/zentest holds the
// acceptance suites every backend runs (RunTable, RunModel, RunModelRandomized, BenchModel).
package zen
