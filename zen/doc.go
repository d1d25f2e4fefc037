// Package zen is SmartFeed's graph data model: Pinterest-style 64-bit sharded IDs, JSON objects,
// ordered edges (mapping tables), the mod shard, and per-user pools, over a sorted Table with two
// backends (embedded Pebble, the default, and HBase through gohbase).
//
// zen imports none of the services and nothing of gRPC or pinlater.
package zen
