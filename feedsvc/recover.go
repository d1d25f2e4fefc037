package feedsvc

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/lowprio"
	"github.com/smartfeed/smartfeed/zen"
)

// InFlight is what recovery needs of the generator: the users with chunks taken from the pools
// and not yet settled, those chunks, and Settle. cmd wires the in-process generator or its
// GeneratorService in another process; both behave the same.
type InFlight interface {
	// InFlightUsers returns up to limit users after `after` (0: from the start), in ID order,
	// with unsettled chunks; fewer than limit means the end.
	InFlightUsers(ctx context.Context, after zen.ID, limit int) ([]zen.ID, error)
	// PendingChunks lists the user's unsettled chunks.
	PendingChunks(ctx context.Context, user zen.ID) ([]InFlightChunk, error)
	// Settle closes a chunk: delivered, or back to the pools.
	Settle(ctx context.Context, user zen.ID, chunkID string, delivered bool) error
}

// InFlightChunk is one unsettled generator chunk.
type InFlightChunk struct {
	ID        string
	CreatedMs int64 // when the generator composed it, Unix milliseconds
}

// RecoverOptions tune a Recoverer. Zero values get the defaults.
type RecoverOptions struct {
	// OlderThan: chunks younger than this are left alone (a request may still be serving them,
	// or their job may still be queued). Default time.Minute.
	OlderThan time.Duration
	// Batch is the index rows (or users) read per step; MaxSteps bounds one pass. Defaults 500
	// and 200.
	Batch, MaxSteps int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil means no logging.
	Logger *zap.Logger
	// Spread is the share of Run's interval over which a periodic pass spreads its reads of the
	// pending index, one shard's scan after another (the first pass, at startup, runs at once).
	// Default 0.5; negative: no spreading.
	Spread float64
	// Nice, when positive, runs Run's passes at this many nice values lower than the rest of
	// the process, on a thread of Run's own (internal/lowprio): a pass's scans and settles are
	// background work, like the lanes' (Deps.Lanes). 0: the caller's priority.
	Nice int
}

// Recoverer completes or gives back the chunks a crash left behind: the feed's pending chunks
// whose materialize job was lost (RecoverAll over the pending index) and, when it has the
// generator (Gen non-nil), generator chunks the feed never recorded (given back to the pools) or
// recorded but did not settle (materialized, which settles them as delivered). It is safe to run
// in several processes at once: every step is idempotent.
type Recoverer struct {
	feed *Service
	gen  InFlight
	o    RecoverOptions
}

// NewRecoverer returns the recovery of s's chunks and, when gen is not nil, of gen's.
func NewRecoverer(s *Service, gen InFlight, o RecoverOptions) *Recoverer {
	if o.OlderThan <= 0 {
		o.OlderThan = time.Minute
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 200
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Spread == 0 {
		o.Spread = 0.5
	}
	return &Recoverer{feed: s, gen: gen, o: o}
}

// Pass runs one bounded recovery pass and returns the chunks it completed or gave back.
func (r *Recoverer) Pass(ctx context.Context) (int, error) { return r.pass(ctx, 0) }

// pass is Pass with at least pace between two shards' scans of the pending index.
func (r *Recoverer) pass(ctx context.Context, pace time.Duration) (int, error) {
	total := 0
	after := zen.ID(0)
	for range r.o.MaxSteps {
		next, n, err := r.feed.recoverAll(ctx, after, r.o.OlderThan, r.o.Batch, pace)
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
	cut := r.o.Now().Add(-r.o.OlderThan).UnixMilli()
	for range r.o.MaxSteps {
		users, err := r.gen.InFlightUsers(ctx, after, r.o.Batch)
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
		if len(users) < r.o.Batch {
			break
		}
		after = users[len(users)-1]
	}
	return total, nil
}

// settleUser settles the user's generator chunks created before cutMs by what the feed knows of
// them. A chunk whose feed marker was trimmed away (materialized, then more than max_items newer
// items, all before its Settle ran) reads as unknown and goes back to the pools: its pins may
// then be served again. That window is the policy's known weak spot.
func (r *Recoverer) settleUser(ctx context.Context, user zen.ID, cutMs int64) (int, error) {
	chunks, err := r.gen.PendingChunks(ctx, user)
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
		case ChunkPending, ChunkDone:
			// Materialize finishes what is left and settles it as delivered.
			err = r.feed.materializeInLane(ctx, MaterializeTask{User: user, ChunkID: c.ID})
		default:
			err = r.gen.Settle(ctx, user, c.ID, false)
		}
		if err != nil {
			return n, fmt.Errorf("recover chunk %s: %w", c.ID, err)
		}
		r.o.Logger.Info("recovered chunk", zap.Stringer("user", user), zap.String("chunk", c.ID), zap.Int("feed_state", int(st)))
		n++
	}
	return n, nil
}

// Run runs a pass now and then every `every` until ctx is done; pass errors are logged. The
// passes after the first spread their scans of the pending index (one per shard, 4,096 with the
// default shard count, nearly all empty) over Spread of the interval: on HBase a pass at once
// was a burst of thousands of region server calls each minute, on top of whatever the service
// was doing then.
func (r *Recoverer) Run(ctx context.Context, every time.Duration) {
	if r.o.Nice > 0 {
		// Run's goroutine keeps the lowered thread until it ends (it must not be unlocked).
		if err := lowprio.LowerThread(r.o.Nice); err != nil {
			r.o.Logger.Warn("recovery passes run at the process's priority", zap.Error(err))
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var pace time.Duration
	for first := true; ; first = false {
		if !first && r.o.Spread > 0 && r.feed.indexShards > 0 {
			pace = time.Duration(float64(every) * r.o.Spread / float64(r.feed.indexShards))
		}
		n, err := r.pass(ctx, pace)
		switch {
		case err != nil && ctx.Err() == nil:
			r.o.Logger.Warn("recovery pass", zap.Int("recovered", n), zap.Error(err))
		case n > 0:
			r.o.Logger.Info("recovery pass", zap.Int("recovered", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
