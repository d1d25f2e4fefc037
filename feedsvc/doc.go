// Package feedsvc serves the home feed: the new chunk in front of the materialized feed, with
// fallback when the generator fails or is late, asynchronous materialization, and speculative
// reads from a primary store to a hot standby after a live-tunable cutoff.
package feedsvc
