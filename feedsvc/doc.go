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
// # Stages and their files
//
// A GetFeed goes down these stages, each in a file of its own:
//
//   - service.go: the Service, its construction and lifetime, the request and page types, and
//     GetFeed itself (validation, admission in admit.go, the user's liveness and activity in
//     live.go); config.go holds Config, Deps and their defaults.
//   - page.go: composing a page. firstPage picks one of four ways (the feed alone while the
//     primary's breaker is open; this process's prepared chunk; the feed as it stands when the
//     generator was asked a moment ago; a fresh chunk from the generator read beside the feed);
//     laterPage reads after the cursor; fill merges fresh and materialized items.
//   - read.go: reading the materialized feed, hedged between the stores, pending chunks merged
//     in place; the head cache (headcache.go) answers repeated first pages, and the read is
//     filtered for deleted pins (live.go) and removals (removed.go).
//   - record.go: recording a served chunk before the answer: the pins already in the feed
//     dropped, its sequence taken, its pending row written (persist, record).
//   - settle.go: settling chunks with the generator: given back when the page could not keep
//     them, delivered once materialized, and, when a recording's outcome is unknown, once it
//     is known.
//   - background.go: the work a page leaves behind it: the chunk's materialization (inline in
//     a background lane, or as a job), and the lanes and quiet gaps that bound such work.
//   - materialize.go: materializing a chunk into the feed (the job, and the inline run).
//   - prepare.go: preparing the user's next chunk ahead of the visit (Config.PrepareAfter),
//     serving prepared chunks, and the per-user marks that space generator calls out.
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
