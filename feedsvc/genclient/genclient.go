// Package genclient is the feed service's generator in another process: a GeneratorService
// gRPC client adapted to the interfaces feedsvc declares for it (Generator, InFlight,
// Eligibility, Liveness). A process that runs the generator itself wires the generator in
// process instead.
package genclient

import (
	"context"
	"fmt"
	"slices"

	"github.com/smartfeed/smartfeed/feedsvc"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// Client is a feed process's generator in another process: feedsvc.Generator, InFlight,
// Eligibility and Liveness over a GeneratorService client.
type Client struct {
	c generatorv1.GeneratorServiceClient
	// batch is the most pins one CheckPins call asks about (the generator's MaxCheckPins).
	batch int
}

// New returns a Client over c that asks CheckPins about at most checkPinsBatch pins a call (the
// generator's MaxCheckPins, which the generator refuses to exceed).
func New(c generatorv1.GeneratorServiceClient, checkPinsBatch int) Client {
	return Client{c: c, batch: max(1, checkPinsBatch)}
}

// GenerateChunk implements feedsvc.Generator over GeneratorService.GenerateChunk; the caller
// records the chunk (CallerRecords).
func (a Client) GenerateChunk(ctx context.Context, user zen.ID) (feedsvc.Chunk, error) {
	resp, err := a.c.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{User: uint64(user), CallerRecords: true})
	if err != nil {
		return feedsvc.Chunk{}, fmt.Errorf("generator: %w", err)
	}
	c := resp.GetChunk()
	out := feedsvc.Chunk{ID: c.GetId(), User: zen.ID(c.GetUser()), Items: make([]feedsvc.Item, len(c.GetItems()))}
	if out.User == 0 {
		out.User = user
	}
	for i, it := range c.GetItems() {
		out.Items[i] = feedsvc.Item{Pin: zen.ID(it.GetPin()), Source: zen.Source(it.GetSource()), Score: it.GetScore(),
			Author: zen.ID(it.GetAuthor()), Board: zen.ID(it.GetBoard()), Reason: it.GetReason()}
	}
	return out, nil
}

// Settle implements feedsvc.Generator over GeneratorService.SettleChunk.
func (a Client) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	_, err := a.c.SettleChunk(ctx, &generatorv1.SettleChunkRequest{User: uint64(user), ChunkId: chunkID, Delivered: delivered})
	if err != nil {
		return fmt.Errorf("generator settle: %w", err)
	}
	return nil
}

// InFlightUsers implements feedsvc.InFlight over GeneratorService.InFlightUsers.
func (a Client) InFlightUsers(ctx context.Context, after zen.ID, limit int) ([]zen.ID, error) {
	resp, err := a.c.InFlightUsers(ctx, &generatorv1.InFlightUsersRequest{After: uint64(after), Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("generator in-flight users: %w", err)
	}
	out := make([]zen.ID, len(resp.GetUsers()))
	for i, u := range resp.GetUsers() {
		out[i] = zen.ID(u)
	}
	return out, nil
}

// PendingChunks implements feedsvc.InFlight over GeneratorService.PendingChunks.
func (a Client) PendingChunks(ctx context.Context, user zen.ID) ([]feedsvc.InFlightChunk, error) {
	resp, err := a.c.PendingChunks(ctx, &generatorv1.PendingChunksRequest{User: uint64(user)})
	if err != nil {
		return nil, fmt.Errorf("generator pending chunks: %w", err)
	}
	out := make([]feedsvc.InFlightChunk, len(resp.GetChunks()))
	for i, c := range resp.GetChunks() {
		out[i] = feedsvc.InFlightChunk{ID: c.GetId(), CreatedMs: c.GetCreatedMs()}
	}
	return out, nil
}

// Removed implements feedsvc.Eligibility over GeneratorService.CheckPins, for a feed process
// without the graph: the generator's process, which owns it, names the pins whose follow is
// gone and the deleted ones. One call per a.batch distinct pins; an error fails
// the check (the feed service then holds the prepared chunks back).
func (a Client) Removed(ctx context.Context, user zen.ID, items []feedsvc.Item) (map[zen.ID]bool, error) {
	reqItems := make([]*generatorv1.Item, 0, len(items))
	seen := map[zen.ID]bool{}
	for _, it := range items {
		if seen[it.Pin] {
			continue
		}
		seen[it.Pin] = true
		reqItems = append(reqItems, &generatorv1.Item{Pin: uint64(it.Pin), Source: generatorv1.Source(it.Source),
			Author: uint64(it.Author), Board: uint64(it.Board)})
	}
	return a.checkPins(ctx, user, reqItems, true)
}

// Live implements feedsvc.Liveness over GeneratorService.CheckPins (deletions only), for a feed
// process without the graph.
func (a Client) Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	reqItems := make([]*generatorv1.Item, 0, len(pins))
	seen := map[zen.ID]bool{}
	for _, p := range pins {
		if !seen[p] {
			seen[p] = true
			reqItems = append(reqItems, &generatorv1.Item{Pin: uint64(p)})
		}
	}
	deleted, err := a.checkPins(ctx, 0, reqItems, false)
	if err != nil {
		return nil, err
	}
	live := make(map[zen.ID]bool, len(seen))
	for p := range seen {
		live[p] = !deleted[p]
	}
	return live, nil
}

// checkPins asks CheckPins about items in batches of a.batch and returns the
// deleted pins, with the unfollowed ones when unfollowed is set.
func (a Client) checkPins(ctx context.Context, user zen.ID, items []*generatorv1.Item, unfollowed bool) (map[zen.ID]bool, error) {
	out := map[zen.ID]bool{}
	for batch := range slices.Chunk(items, a.batch) {
		resp, err := a.c.CheckPins(ctx, &generatorv1.CheckPinsRequest{User: uint64(user), Items: batch})
		if err != nil {
			return nil, fmt.Errorf("generator check pins: %w", err)
		}
		for _, p := range resp.GetDeleted() {
			out[zen.ID(p)] = true
		}
		if unfollowed {
			for _, p := range resp.GetUnfollowed() {
				out[zen.ID(p)] = true
			}
		}
	}
	return out, nil
}

var (
	_ feedsvc.Generator   = Client{}
	_ feedsvc.Eligibility = Client{}
	_ feedsvc.Liveness    = Client{}
	_ feedsvc.InFlight    = Client{}
)
