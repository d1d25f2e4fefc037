package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// pinEvent is one pin saved in the demo.
type pinEvent struct {
	Pin, Author, Board, Interest zen.ID
	CreatedMs                    int64
}

// publisher delivers a pin event to the feeds.
type publisher interface {
	Publish(ctx context.Context, e pinEvent) error
	// Name says how events reach the pools, for the summary.
	Name() string
}

// enqueuer is the part of *pinlater.Client the queue publisher needs.
type enqueuer interface {
	Enqueue(ctx context.Context, t *pinlater.Task, opts ...pinlater.Option) (*pinlater.Info, error)
}

// queuePublisher enqueues a pinlater fanout task; the worker's handlers do the fanout.
type queuePublisher struct{ q enqueuer }

func (p queuePublisher) Name() string { return "pinlater fanout → worker" }

func (p queuePublisher) Publish(ctx context.Context, e pinEvent) error {
	var interests []uint64
	if e.Interest != 0 {
		interests = []uint64{uint64(e.Interest)}
	}
	t, err := pinlater.NewFanout(pinlater.FanoutPayload{V: pinlater.PayloadVersion, Pin: uint64(e.Pin),
		Author: uint64(e.Author), Board: uint64(e.Board), Interests: interests, CreatedMs: e.CreatedMs})
	if err != nil {
		return err
	}
	_, err = p.q.Enqueue(ctx, t)
	return err
}

// pinMaker creates the demo's pins in the graph: the pin object on its board's shard and the
// user→pins, board→pins (+ pin→boards) and pin→interests (+ interest→pins) edges.
type pinMaker struct {
	g     graphWriter
	graph demoGraph
	r     *rand.Rand
	now   func() time.Time
	// lazy: the pin's event is published through an outbox row in the graph's log, written
	// durably right after next returns, so the pin's own writes wait for no fsync (as
	// graphsvc.WithEventTable does for CreatePin).
	lazy bool
}

func (m *pinMaker) next(ctx context.Context) (pinEvent, error) {
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
		return pinEvent{}, fmt.Errorf("create pin: %w", err)
	}
	edges := []zen.Edge{{From: author, Type: zen.EdgeUserPins, To: pin.ID}}
	if board != 0 {
		edges = append(edges, zen.Edge{From: board, Type: zen.EdgeBoardPins, To: pin.ID})
	}
	if interest != 0 {
		edges = append(edges, zen.Edge{From: pin.ID, Type: zen.EdgePinInterests, To: interest})
	}
	for _, e := range edges {
		if err := addBoth(ctx, m.g, e); err != nil {
			return pinEvent{}, fmt.Errorf("pin edges: %w", err)
		}
	}
	return pinEvent{Pin: pin.ID, Author: author, Board: board, Interest: interest, CreatedMs: now.UnixMilli()}, nil
}
