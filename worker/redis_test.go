package worker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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

	// Every list as chunk tasks (no inline delivery): this test is about where they go.
	cfg := Config{ChunkSize: 4, HotFollowers: 5, InlineReceivers: -1}
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

// TestFanoutSurvivesRedisLoss: Redis is killed in the middle of a 10,000-follower fanout
// (100,000 with SMARTFEED_LONG=1) and comes back empty (its data gone, the worst case): the
// outbox relay re-enqueues the fanout chunks that were not done, and every follower gets the
// pin exactly once. Without the outbox, the followers of the lost chunks never get it.
func TestFanoutSurvivesRedisLoss(t *testing.T) {
	rp := testenv.StartRedis(t)
	n := 10_000
	if os.Getenv("SMARTFEED_LONG") == "1" {
		n = 100_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opt := pinlater.RedisAddr(rp.Addr())
	client, err := pinlater.NewClient(opt, nil, nil, pinlater.WithNamespace("loss"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store := zenmem.New()
	outboxT, err := store.Table(ctx, zen.OutboxTable)
	if err != nil {
		t.Fatal(err)
	}
	box := zen.NewOutbox(outboxT)
	reg := prometheus.NewRegistry()
	durable, err := pinlater.NewDurableClient(client, box, pinlater.DurableOptions{Registerer: reg,
		Grace: time.Second, RelayInterval: 200 * time.Millisecond, EnqueueTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ChunkSize: 100, HotFollowers: int64(n) * 10}
	wd := newWorld(t, store, cfg, n, nil)
	w, err := New(wd.g, wd.pools, wd.state, durable, cfg, Options{Now: wd.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pinlater.NewServer(pinlater.Config{Redis: opt, Namespace: "loss", Concurrency: 4, Outbox: box,
		PollInterval: 20 * time.Millisecond, DelayedCheckInterval: 100 * time.Millisecond, ShutdownTimeout: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Register(srv)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { durable.Relay(rctx); close(relayDone) }()
	defer func() { stopRelay(); <-relayDone }()

	pin := wd.pins[1]
	pub := NewPublisher(durable, wd.g, cfg.HotFollowers)
	if _, err := pub.PinSaved(ctx, PinSaved{Pin: pin, User: wd.alice, Board: wd.travel, CreatedMs: wd.clk.now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	// Kill Redis once about a fifth of the followers have the pin.
	for testutil.ToFloat64(w.m.inserts) < float64(n/5) {
		if ctx.Err() != nil {
			t.Fatal("fanout never got going")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rp.Kill()
	at := testutil.ToFloat64(w.m.inserts)
	rp.Wipe()
	// sleep: Redis stays down for a second, which the enqueues and the tasks in flight ride out.
	time.Sleep(time.Second)
	rp.Start()
	t.Logf("Redis killed and wiped after %.0f of %d pool inserts", at, n)
	if at >= float64(n) {
		t.Fatalf("the fanout finished before Redis was killed: make it longer")
	}

	// Everything done: the outbox empties, then every follower holds the pin exactly once.
	empty := func() bool {
		rows := 0
		_ = box.Range(ctx, nil, nil, 0, func(_, _ []byte) error { rows++; return nil })
		return rows == 0
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !empty() {
		if time.Now().After(deadline) {
			t.Fatal("the outbox never emptied")
		}
		time.Sleep(100 * time.Millisecond)
	}
	missing, dup := 0, 0
	for _, u := range wd.followers[:n] {
		es, err := w.Pools().Top(ctx, u, zen.SourceFollowing, 10)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, e := range es {
			if e.Pin == pin {
				got++
			}
		}
		switch {
		case got == 0:
			missing++
		case got > 1:
			dup++
		}
	}
	if missing > 0 || dup > 0 {
		t.Fatalf("after Redis lost the fanout: %d of %d followers never got the pin, %d got it more than once", missing, n, dup)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "pinlater_outbox_relayed_total" {
			t.Logf("the relay re-enqueued %.0f tasks Redis had lost", mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
}
