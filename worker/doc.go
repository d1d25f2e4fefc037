// Package worker holds the pinlater handlers that turn upstream events (pins, repins, follows,
// interest tags, related pins, deletes) into scored rows in each receiving user's per-source pools.
//
// The producers' way in is the Publisher (Go) and IngestServer (gRPC IngestService.Publish), which
// validate events and enqueue pinlater tasks; Worker.Register registers the handlers that run them
// (fanout, fanout-chunk, follow-backfill, unfollow-cleanup, pin-delete, user-delete). Scoring is a
// Scorer; the default is the logistic model documented on Weights. A fanout streams each follower
// list page by page into bounded chunk tasks (hot lists on the bulk queue), skips inactive
// receivers (Touch and Rebuilding bring them back), caps and expires the pools. See docs/worker.md.
//
// The files follow the flow: worker.go holds the Worker, its config and registration;
// fanout.go plans a fanout (receiver lists, chunk tasks, checkpoints, the pin's facts);
// deliver.go delivers a page of receivers into their pools (skip, score, insert, trim);
// related.go the related-pins paths; upkeep.go follows, unfollows, deletes and pool upkeep.
package worker
