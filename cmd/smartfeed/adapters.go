package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/generator"
	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/worker"
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

// Liveness cache of the read path (zen.Graph.CacheLiveness): how long an answer is kept, and how
// many pins are remembered (about 40 bytes each).
const (
	liveCacheTTL     = time.Second
	liveCacheEntries = 1 << 18
)

// graphLiveness answers generator.Liveness and feedsvc.Liveness with one batched object read:
// a pin is live when zen.Graph.LiveMany says so (absent and soft-deleted objects are not), which
// reads only the objects' "active" field instead of decoding them whole.
type graphLiveness struct{ g *zen.Graph }

func (l graphLiveness) Live(ctx context.Context, pins []zen.ID) (map[zen.ID]bool, error) {
	out, err := l.g.LiveMany(ctx, pins)
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	return out, nil
}

var (
	_ generator.Liveness = graphLiveness{}
	_ feedsvc.Liveness   = graphLiveness{}
	_ feedsvc.Activity   = (*worker.Worker)(nil)
)

// recoverer completes or returns, at start and then periodically, the chunks a crash left
// behind: feedsvc's pending chunks whose materialize job was lost (RecoverAll over the pending
// index) and, when the generator runs in this process, generator chunks never recorded by the
// feed (Settle(false): back to the pools) or recorded but not settled (Materialize).
type recoverer struct {
	feed *feedsvc.Service
	gen  *generator.Generator // nil when the generator is remote
	log  *zap.Logger
	// olderThan: chunks younger than this are left alone (a request may still be serving
	// them, or their job may still be queued).
	olderThan time.Duration
	// batch is the index rows read per step; maxSteps bounds one pass.
	batch, maxSteps int
	now             func() time.Time
}

// pass runs one bounded recovery pass and returns the chunks it completed or returned.
func (r recoverer) pass(ctx context.Context) (int, error) {
	total := 0
	after := zen.ID(0)
	for range r.maxSteps {
		next, n, err := r.feed.RecoverAll(ctx, after, r.olderThan, r.batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("recover feed: %w", err)
		}
		if next == 0 {
			break
		}
		after = next
	}
	if r.gen == nil {
		return total, nil
	}
	after = 0
	cut := r.now().Add(-r.olderThan).UnixMilli()
	for range r.maxSteps {
		users, err := r.gen.InFlightUsers(ctx, after, r.batch)
		if err != nil {
			return total, fmt.Errorf("recover generator: %w", err)
		}
		for _, u := range users {
			n, err := r.settleUser(ctx, u, cut)
			total += n
			if err != nil {
				return total, err
			}
		}
		if len(users) < r.batch {
			break
		}
		after = users[len(users)-1]
	}
	return total, nil
}

// settleUser settles the user's generator chunks created before cutMs by what the feed knows
// of them. Shaky: a chunk whose feed marker was trimmed away (materialized, then more than
// max_items newer items, all before its Settle ran) reads as unknown and is returned to the
// pools.
func (r recoverer) settleUser(ctx context.Context, user zen.ID, cutMs int64) (int, error) {
	chunks, err := r.gen.Pending(ctx, user)
	if err != nil {
		return 0, fmt.Errorf("pending chunks of %d: %w", user, err)
	}
	n := 0
	for _, c := range chunks {
		if c.CreatedMs >= cutMs {
			continue
		}
		st, err := r.feed.ChunkStatus(ctx, user, c.ID)
		if err != nil {
			return n, fmt.Errorf("chunk %s: %w", c.ID, err)
		}
		switch st {
		case feedsvc.ChunkPending, feedsvc.ChunkDone:
			// Materialize finishes what is left and settles it as delivered.
			err = r.feed.Materialize(ctx, feedsvc.MaterializeTask{User: user, ChunkID: c.ID})
		default:
			err = r.gen.Settle(ctx, user, c.ID, false)
		}
		if err != nil {
			return n, fmt.Errorf("recover chunk %s: %w", c.ID, err)
		}
		r.log.Info("recovered chunk", zap.Stringer("user", user), zap.String("chunk", c.ID), zap.Int("feed_state", int(st)))
		n++
	}
	return n, nil
}

// loop runs a pass now and then every `every` until ctx is done; pass errors are logged.
func (r recoverer) loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := r.pass(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("recovery pass", zap.Int("recovered", n), zap.Error(err))
		case n > 0:
			r.log.Info("recovery pass", zap.Int("recovered", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// feedRemover hands the worker's user-delete job to the feed service of this process (wired only
// when the process has the feed role). The worker is built before the feed service, so it looks
// the service up when a delete runs.
type feedRemover struct{ a *app }

var _ worker.FeedRemover = feedRemover{}

// DeleteFeed removes the user's materialized feed through this process's feed service.
func (r feedRemover) DeleteFeed(ctx context.Context, user zen.ID) error {
	if r.a.feed == nil {
		return errNoFeedRole
	}
	return r.a.feed.DeleteFeed(ctx, user)
}

// errNoFeedRole: this process does not serve feeds, so it cannot delete one.
var errNoFeedRole = errors.New("no feed service in this process")
