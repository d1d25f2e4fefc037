package feedsvc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// TaskEnqueuer is the part of *pinlater.Client that PinlaterEnqueuer needs.
type TaskEnqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// PinlaterEnqueuer enqueues materialize jobs as pinlater "materialize" tasks. The payload
// names the chunk only (its Pins list stays empty): the items are in the chunk's pending row,
// written before the enqueue. pinlater deduplicates the task by (user, chunk).
type PinlaterEnqueuer struct {
	Client TaskEnqueuer
}

// EnqueueMaterialize implements Enqueuer.
func (e PinlaterEnqueuer) EnqueueMaterialize(ctx context.Context, t MaterializeTask) error {
	task, err := newMaterializeTask(t)
	if err != nil {
		return err
	}
	if _, err := e.Client.Enqueue(ctx, task); err != nil {
		return fmt.Errorf("enqueue materialize %s: %w", t.ChunkID, err)
	}
	return nil
}

func newMaterializeTask(t MaterializeTask) (*pinlater.Task, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	return pinlater.NewMaterialize(pinlater.MaterializePayload{User: uint64(t.User), ChunkID: t.ChunkID})
}

// Registrar is the part of *pinlater.Server that RegisterHandlers needs.
type Registrar interface {
	Handle(typ string, h pinlater.Handler)
}

// RegisterHandlers registers the materialize handler of s with a pinlater server.
func RegisterHandlers(r Registrar, s *Service) {
	r.Handle(pinlater.TypeMaterialize, pinlater.Typed(s.HandleMaterialize))
	r.Handle(pinlater.TypeFeedDelete, pinlater.Typed(s.HandleFeedDelete))
}

// HandleFeedDelete runs DeleteFeed for a decoded pinlater payload (a worker in another process
// deleted the user). A payload that is not a user ID is archived, not retried.
func (s *Service) HandleFeedDelete(ctx context.Context, p pinlater.FeedDeletePayload) error {
	err := s.DeleteFeed(ctx, zen.ID(p.User))
	if errors.Is(err, ErrInvalid) {
		return fmt.Errorf("%w: %w", pinlater.ErrInvalidPayload, err)
	}
	return err
}

// PinlaterActivity is the Activity of a feed service whose worker runs in another process: each
// Touch enqueues a pinlater "touch" task (one per user per minute), which the worker runs as its
// own Touch. The worker's rebuilding answer does not come back over the queue, so Touch reports
// false (and pages do not wait for it); the rebuild itself happens as it does in process.
type PinlaterActivity struct {
	Client TaskEnqueuer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var (
	_ Activity        = PinlaterActivity{}
	_ noRebuildSignal = PinlaterActivity{}
)

func (PinlaterActivity) noRebuildSignal() {}

// Touch implements Activity.
func (a PinlaterActivity) Touch(ctx context.Context, user zen.ID) (bool, error) {
	if err := user.Check(zen.TypeUser); err != nil {
		return false, fmt.Errorf("%w: touch: %v", ErrInvalid, err)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	task, err := pinlater.NewTouch(pinlater.TouchPayload{User: uint64(user), AtMs: now().UnixMilli()})
	if err != nil {
		return false, fmt.Errorf("touch %d: %w", user, err)
	}
	if _, err := a.Client.Enqueue(ctx, task); err != nil {
		return false, fmt.Errorf("enqueue touch %d: %w", user, err)
	}
	return false, nil
}

// HandleMaterialize runs Materialize for a decoded pinlater payload, as the read path's other
// background work runs: after a gap between requests and in a background lane, at the lanes'
// priority (inLane), so that a backlog of materialize jobs does not take the processors the
// pages wait for. A job whose context ends while it waits fails and is retried. A task that
// can never succeed (not a user ID, a chunk that does not match its row) wraps
// pinlater.ErrInvalidPayload, so the server archives it instead of retrying.
func (s *Service) HandleMaterialize(ctx context.Context, p pinlater.MaterializePayload) error {
	err := s.materializeInLane(ctx, MaterializeTask{User: zen.ID(p.User), ChunkID: p.ChunkID})
	if errors.Is(err, ErrBadTask) {
		return fmt.Errorf("%w: %w", pinlater.ErrInvalidPayload, err)
	}
	return err
}
