package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// PinEvent is one pin saved in the demo.
type PinEvent struct {
	Pin, Author, Board, Interest zen.ID
	CreatedMs                    int64
}

// Publisher delivers a pin event to the feeds.
type Publisher interface {
	Publish(ctx context.Context, e PinEvent) error
	// Name says how events reach the pools, for the summary.
	Name() string
}

// Enqueuer is the part of *pinlater.Client the queue Publisher needs.
type Enqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// QueuePublisher enqueues a pinlater fanout task; the worker's handlers do the fanout.
type QueuePublisher struct{ Q Enqueuer }

// Name says how events reach the pools.
func (p QueuePublisher) Name() string { return "pinlater fanout → worker" }

// Publish enqueues e's fanout task.
func (p QueuePublisher) Publish(ctx context.Context, e PinEvent) error {
	var interests []uint64
	if e.Interest != 0 {
		interests = []uint64{uint64(e.Interest)}
	}
	t, err := pinlater.NewFanout(pinlater.FanoutPayload{V: pinlater.PayloadVersion, Pin: uint64(e.Pin),
		Author: uint64(e.Author), Board: uint64(e.Board), Interests: interests, CreatedMs: e.CreatedMs})
	if err != nil {
		return err
	}
	_, err = p.Q.Enqueue(ctx, t)
	return err
}

// pinMaker creates the demo's pins in the graph: the pin object on its board's shard and the
// user→pins, board→pins (+ pin→boards) and pin→interests (+ interest→pins) edges.
type pinMaker struct {
	g     GraphWriter
	graph Graph
	r     *rand.Rand
	now   func() time.Time
	// lazy: the pin's event is published through an outbox row in the graph's log, written
	// durably right after next returns, so the pin's own writes wait for no fsync (as
	// graphsvc.WithEventTable does for CreatePin).
	lazy bool
}

func (m *pinMaker) next(ctx context.Context) (PinEvent, error) {
	i := m.r.IntN(len(m.graph.Users))
	author := m.graph.Users[i]
	var board, interest zen.ID
	if bs := m.graph.Boards[i]; len(bs) > 0 {
		board = bs[m.r.IntN(len(bs))]
	}
	if len(m.graph.Interests) > 0 {
		interest = m.graph.Interests[m.r.IntN(len(m.graph.Interests))]
	}
	if m.lazy {
		ctx = zen.Lazily(ctx)
	}
	now := m.now()
	pin, err := m.g.Create(ctx, zen.TypePin, board, map[string]any{"author": author.String(), "board": board.String(),
		"title": fmt.Sprintf("pin by %s at %s", author, now.Format(time.TimeOnly))})
	if err != nil {
		return PinEvent{}, fmt.Errorf("create pin: %w", err)
	}
	edges := []zen.Edge{{From: author, Type: zen.EdgeUserPins, To: pin.ID}}
	if board != 0 {
		edges = append(edges, zen.Edge{From: board, Type: zen.EdgeBoardPins, To: pin.ID})
	}
	if interest != 0 {
		edges = append(edges, zen.Edge{From: pin.ID, Type: zen.EdgePinInterests, To: interest})
	}
	for _, e := range edges {
		if err := AddBoth(ctx, m.g, e); err != nil {
			return PinEvent{}, fmt.Errorf("pin edges: %w", err)
		}
	}
	return PinEvent{Pin: pin.ID, Author: author, Board: board, Interest: interest, CreatedMs: now.UnixMilli()}, nil
}
