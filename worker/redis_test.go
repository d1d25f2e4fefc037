package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestPinlaterRedis runs the worker behind a real pinlater server on Redis: a fanout of a hot
// author puts its chunks in the bulk queue (an ordinary list's chunk goes to the fanout queue), and
// the server's handlers registered by Register deliver the pin to every follower.
func TestPinlaterRedis(t *testing.T) {
	addr := testenv.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := fmt.Sprintf("wt%d", time.Now().UnixNano())
	client, err := pinlater.NewClient(pinlater.RedisAddr(addr), nil, nil, pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := pinlater.NewAdmin(pinlater.RedisAddr(addr), pinlater.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { admin.Purge(context.Background()); admin.Close() }()

	cfg := Config{ChunkSize: 4, HotFollowers: 5}
	wd := newWorld(t, zenmem.New(), cfg, 10, nil)
	w, err := New(wd.g, wd.pools, wd.state, client, cfg, Options{Now: wd.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	pub := NewPublisher(client, wd.g, cfg.HotFollowers)
	if _, err := pub.PinSaved(ctx, PinSaved{Pin: wd.pins[1], User: wd.alice, Board: wd.travel, CreatedMs: wd.clk.now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if st, err := admin.Queue(ctx, pinlater.QueueBulk); err != nil || st.Pending != 1 {
		t.Fatalf("bulk queue after publishing a hot author's pin: %+v, %v; want the fanout pending", st, err)
	}
	// Run the fanout task by hand to see where its chunks go.
	if err := w.HandleFanout(ctx, pinlater.FanoutPayload{V: 1, Pin: uint64(wd.pins[1]), Author: uint64(wd.alice), Board: uint64(wd.travel), CreatedMs: wd.clk.now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	bulk, err := admin.Queue(ctx, pinlater.QueueBulk)
	if err != nil {
		t.Fatal(err)
	}
	fan, err := admin.Queue(ctx, pinlater.QueueFanout)
	if err != nil {
		t.Fatal(err)
	}
	// alice has 10 followers (> 5): 3 chunks of 4 in bulk (+ the fanout); travel has 1: 1 chunk.
	if bulk.Pending != 4 || fan.Pending != 1 {
		t.Errorf("pending: bulk %d (want 4), fanout %d (want 1)", bulk.Pending, fan.Pending)
	}
	srv, err := pinlater.NewServer(pinlater.Config{Redis: pinlater.RedisAddr(addr), Namespace: ns, Concurrency: 2,
		PollInterval: 20 * time.Millisecond, DelayedCheckInterval: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Register(srv)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, q := range []string{pinlater.QueueBulk, pinlater.QueueFanout} {
		if err := admin.WaitDrained(ctx, q, 20*time.Millisecond); err != nil {
			t.Fatalf("drain %s: %v", q, err)
		}
	}
	for _, u := range wd.followers[:11] {
		es, err := w.Pools().Top(ctx, u, zen.SourceFollowing, 10)
		if err != nil || len(es) != 1 || es[0].Pin != wd.pins[1] {
			t.Errorf("receiver %d: %v, %v; want the pin once", u, es, err)
		}
	}
	for _, q := range []string{pinlater.QueueBulk, pinlater.QueueFanout} {
		if st, _ := admin.Queue(ctx, q); st.Dead != 0 {
			t.Errorf("%s: %d dead tasks", q, st.Dead)
		}
	}
}
