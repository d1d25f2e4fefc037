package main

import (
	"context"
	"fmt"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/generator"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// localGenerator adapts an in-process *generator.Generator to feedsvc.Generator.
type localGenerator struct{ g *generator.Generator }

func (a localGenerator) GenerateChunk(ctx context.Context, user zen.ID) (feedsvc.Chunk, error) {
	c, err := a.g.GenerateChunk(ctx, user, generator.Options{})
	if err != nil {
		return feedsvc.Chunk{}, err
	}
	out := feedsvc.Chunk{ID: c.ID, User: c.User, Items: make([]feedsvc.Item, len(c.Items))}
	for i, it := range c.Items {
		out.Items[i] = feedsvc.Item{Pin: it.Pin, Source: it.Source, Score: it.Score, Author: it.Author, Board: it.Board, Reason: it.Reason}
	}
	return out, nil
}

func (a localGenerator) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	return a.g.Settle(ctx, user, chunkID, delivered)
}

// remoteGenerator adapts a GeneratorService client (another process) to feedsvc.Generator.
type remoteGenerator struct {
	c generatorv1.GeneratorServiceClient
}

func (a remoteGenerator) GenerateChunk(ctx context.Context, user zen.ID) (feedsvc.Chunk, error) {
	resp, err := a.c.GenerateChunk(ctx, &generatorv1.GenerateChunkRequest{User: uint64(user)})
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

func (a remoteGenerator) Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error {
	_, err := a.c.SettleChunk(ctx, &generatorv1.SettleChunkRequest{User: uint64(user), ChunkId: chunkID, Delivered: delivered})
	if err != nil {
		return fmt.Errorf("generator settle: %w", err)
	}
	return nil
}
