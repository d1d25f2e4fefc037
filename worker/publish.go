package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// FollowerCounter counts a list's edges (*zen.Graph satisfies it). The Publisher uses it to send
// the fanout of a hot author to the bulk queue.
type FollowerCounter interface {
	CountEdges(ctx context.Context, from zen.ID, t zen.EdgeType) (int64, error)
}

// Publisher is the producers' Go enqueue client: one method per event, each validating its input
// and enqueuing the matching pinlater task. It writes nothing to zen: the graph change behind an
// event (the pin, the follow edge) is written by graphsvc before the event is published.
type Publisher struct {
	enq     Enqueuer
	counter FollowerCounter
	hot     int64
}

// NewPublisher returns a publisher over enq. counter may be nil (every fanout then goes to the
// fanout queue; the worker still puts the chunks of hot lists in the bulk queue); hotFollowers ≤
// 0 means 50,000.
func NewPublisher(enq Enqueuer, counter FollowerCounter, hotFollowers int64) *Publisher {
	if hotFollowers <= 0 {
		hotFollowers = 50_000
	}
	return &Publisher{enq: enq, counter: counter, hot: hotFollowers}
}

// PinSaved is a new pin or a repin: User saved Pin to Board (a repin adds an existing pin to
// another board), tagged with Interests.
type PinSaved struct {
	Pin, User, Board zen.ID
	Interests        []zen.ID
	CreatedMs        int64
	Repin            bool
}

// RelatedPin is one recommender suggestion for a user.
type RelatedPin struct {
	Pin, Author, Board zen.ID
	CreatedMs          int64
}

// MaxRelatedPins bounds one RelatedPins call.
const MaxRelatedPins = 500

func check(what string, id zen.ID, t zen.Type) error {
	if err := id.Check(t); err != nil {
		return fmt.Errorf("%w: %s: %v", pinlater.ErrInvalidPayload, what, err)
	}
	return nil
}

// Validate refuses a malformed PinSaved.
func (e PinSaved) Validate() error {
	if err := errors.Join(check("pin", e.Pin, zen.TypePin), check("user", e.User, zen.TypeUser),
		check("board", e.Board, zen.TypeBoard)); err != nil {
		return err
	}
	if len(e.Interests) > pinlater.MaxInterests {
		return fmt.Errorf("%w: %d interests (max %d)", pinlater.ErrInvalidPayload, len(e.Interests), pinlater.MaxInterests)
	}
	for _, in := range e.Interests {
		if err := check("interest", in, zen.TypeInterest); err != nil {
			return err
		}
	}
	if e.CreatedMs <= 0 {
		return fmt.Errorf("%w: created_ms %d", pinlater.ErrInvalidPayload, e.CreatedMs)
	}
	return nil
}

func (p *Publisher) fanoutOpts(ctx context.Context, author zen.ID) ([]pinlater.Option, error) {
	if p.counter == nil {
		return nil, nil
	}
	n, err := p.counter.CountEdges(ctx, author, zen.EdgeFollowedByUser)
	if err != nil {
		return nil, fmt.Errorf("count followers of %d: %w", author, err)
	}
	if n > p.hot {
		return []pinlater.Option{pinlater.Bulk()}, nil
	}
	return nil, nil
}

func ids(in []zen.ID) []uint64 {
	out := make([]uint64, len(in))
	for i, v := range in {
		out[i] = uint64(v)
	}
	return out
}

// PinSaved enqueues the fanout of a saved pin. pinlater deduplicates fanouts by (pin, saver,
// board), so a retried publish is dropped while two users repinning the same pin are not.
func (p *Publisher) PinSaved(ctx context.Context, e PinSaved) (*pinlater.Info, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("publish pin saved: %w", err)
	}
	t, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(e.Pin), Author: uint64(e.User),
		Board: uint64(e.Board), Interests: ids(e.Interests), CreatedMs: e.CreatedMs, Repin: e.Repin})
	if err != nil {
		return nil, fmt.Errorf("publish pin saved: %w", err)
	}
	opts, err := p.fanoutOpts(ctx, e.User)
	if err != nil {
		return nil, fmt.Errorf("publish pin saved: %w", err)
	}
	info, err := p.enq.Enqueue(ctx, t, opts...)
	if err != nil {
		return nil, fmt.Errorf("publish pin saved %d: %w", e.Pin, err)
	}
	return info, nil
}

func followPayload(user, target zen.ID) (string, error) {
	if err := check("user", user, zen.TypeUser); err != nil {
		return "", err
	}
	kind, err := KindOf(target)
	if err != nil || !target.Valid() {
		return "", fmt.Errorf("%w: target %d is not a user, board or interest", pinlater.ErrInvalidPayload, target)
	}
	if user == target {
		return "", fmt.Errorf("%w: user %d cannot follow itself", pinlater.ErrInvalidPayload, user)
	}
	return kind, nil
}

// Followed enqueues the backfill of a new follow (user → target, a user, board or interest).
func (p *Publisher) Followed(ctx context.Context, user, target zen.ID) (*pinlater.Info, error) {
	kind, err := followPayload(user, target)
	if err != nil {
		return nil, fmt.Errorf("publish follow: %w", err)
	}
	t, err := pinlater.NewFollowBackfill(pinlater.FollowBackfillPayload{User: uint64(user), Target: uint64(target), TargetKind: kind})
	if err != nil {
		return nil, fmt.Errorf("publish follow: %w", err)
	}
	info, err := p.enq.Enqueue(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("publish follow %d->%d: %w", user, target, err)
	}
	return info, nil
}

// Unfollowed enqueues the cleanup of an unfollow.
func (p *Publisher) Unfollowed(ctx context.Context, user, target zen.ID) (*pinlater.Info, error) {
	kind, err := followPayload(user, target)
	if err != nil {
		return nil, fmt.Errorf("publish unfollow: %w", err)
	}
	t, err := pinlater.NewUnfollowCleanup(pinlater.UnfollowCleanupPayload{User: uint64(user), Target: uint64(target), TargetKind: kind})
	if err != nil {
		return nil, fmt.Errorf("publish unfollow: %w", err)
	}
	info, err := p.enq.Enqueue(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("publish unfollow %d->%d: %w", user, target, err)
	}
	return info, nil
}

// PinDeleted enqueues the purge of a deleted pin.
func (p *Publisher) PinDeleted(ctx context.Context, pin, author zen.ID) (*pinlater.Info, error) {
	if err := errors.Join(check("pin", pin, zen.TypePin), check("author", author, zen.TypeUser)); err != nil {
		return nil, fmt.Errorf("publish pin deleted: %w", err)
	}
	t, err := pinlater.NewPinDelete(pinlater.PinDeletePayload{Pin: uint64(pin), Author: uint64(author)})
	if err != nil {
		return nil, fmt.Errorf("publish pin deleted: %w", err)
	}
	info, err := p.enq.Enqueue(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("publish pin deleted %d: %w", pin, err)
	}
	return info, nil
}

// UserDeleted enqueues the removal of a deleted user's pools and feed.
func (p *Publisher) UserDeleted(ctx context.Context, user zen.ID) (*pinlater.Info, error) {
	if err := check("user", user, zen.TypeUser); err != nil {
		return nil, fmt.Errorf("publish user deleted: %w", err)
	}
	t, err := pinlater.NewUserDelete(pinlater.UserDeletePayload{User: uint64(user)})
	if err != nil {
		return nil, fmt.Errorf("publish user deleted: %w", err)
	}
	info, err := p.enq.Enqueue(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("publish user deleted %d: %w", user, err)
	}
	return info, nil
}

// RelatedPins enqueues a recommender's related pins for user: one fanout task per pin with
// RelatedFor set, deduplicated by (pin, user). All pins are validated before anything is
// enqueued.
func (p *Publisher) RelatedPins(ctx context.Context, user zen.ID, pins []RelatedPin) ([]*pinlater.Info, error) {
	if err := check("user", user, zen.TypeUser); err != nil {
		return nil, fmt.Errorf("publish related pins: %w", err)
	}
	if len(pins) > MaxRelatedPins {
		return nil, fmt.Errorf("publish related pins: %w: %d pins (max %d)", pinlater.ErrInvalidPayload, len(pins), MaxRelatedPins)
	}
	tasks := make([]*pinlater.Task, len(pins))
	for i, rp := range pins {
		if err := errors.Join(check("pin", rp.Pin, zen.TypePin), check("author", rp.Author, zen.TypeUser),
			check("board", rp.Board, zen.TypeBoard)); err != nil {
			return nil, fmt.Errorf("publish related pins: pins[%d]: %w", i, err)
		}
		t, err := pinlater.NewFanout(pinlater.FanoutPayload{Pin: uint64(rp.Pin), Author: uint64(rp.Author),
			Board: uint64(rp.Board), CreatedMs: rp.CreatedMs, RelatedFor: uint64(user)})
		if err != nil {
			return nil, fmt.Errorf("publish related pins: pins[%d]: %w", i, err)
		}
		tasks[i] = t
	}
	out := make([]*pinlater.Info, 0, len(pins))
	for i, t := range tasks {
		info, err := p.enq.Enqueue(ctx, t, pinlater.TaskID("related:"+pins[i].Pin.String()+":"+user.String()+":"+strconv.FormatInt(pins[i].CreatedMs, 10)))
		if err != nil {
			return out, fmt.Errorf("publish related pins for %d: %w", user, err)
		}
		out = append(out, info)
	}
	return out, nil
}
