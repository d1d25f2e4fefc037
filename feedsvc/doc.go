// Package feedsvc serves the home feed: the new chunk in front of the materialized feed, with
// fallback when the generator fails or is late, asynchronous materialization, and speculative
// reads from a primary store to a hot standby after a live-tunable cutoff.
//
// # Serving
//
// GetFeed's first page calls the Generator (bounded by Config.GeneratorDeadline; a generator
// that ignores the deadline is left behind and its late chunk given back with Settle(false))
// and reads the materialized feed at the same time. Before answering it records the chunk:
// it drops pins already in the feed (pin index) or on the page, takes the chunk's sequence
// from the clock (made unique per user by the pending row's compare-and-set), writes the done
// marker, the pending-index row and the pending row holding the chunk (one commit where the
// store carries extra rows, zen.Carrier), and materializes the chunk after the answer, in the
// process or as a materialize job. The page is the chunk, then the materialized feed, each pin once.
// Later pages read the materialized feed after the cursor; pending rows are merged in their
// place, so a refresh before materialization shows each pin once.
//
// # Cursor
//
// A cursor is URL-safe base64 of version | user | seq | pos | crc32 (the project's one cursor
// codec, internal/cursor): the position of the last item served. Decoding is strict, so each
// position has exactly one cursor and any other string is InvalidArgument. Sequences are fixed when a chunk is served and newer chunks get larger ones
// (sorting before the cursor), so pages never repeat or skip an item while chunks arrive.
//
// # Materialization
//
// Materialize (the pinlater "materialize" job, see RegisterHandlers) claims each pin in the
// pin index (CheckAndSet), writes the item rows, replaces the pending row by a done marker,
// trims the feed to Config.MaxItems (after 1 chunk in Deps.TrimEvery: a trim reads the whole
// feed) and settles the chunk as delivered. Every step replays
// safely; Recover completes pending chunks whose job was lost, and reads re-enqueue them.
//
// # Storage and replication
//
// Table "feed" rows are described in layout.go. Reads are hedged (package hedge) between the
// primary and the standby; writes go to the primary, and a Replicator copies them to the
// standby asynchronously. Package faults wraps either table to inject latency, errors and
// outages at run time (FeedAdmin.SetFaults). docs/feedsvc-benchmarks.md has the failover
// figures and the HBase cluster-replication alternative.
package feedsvc
