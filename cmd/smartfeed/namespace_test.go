package main

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/pinlater"
)

// TestNamespaceOwned: a second deployment (another store) configured with the namespace of a
// running one refuses to start, naming the owner; the owner restarts on its own store freely;
// --redis-namespace-takeover claims it for the newcomer.
func TestNamespaceOwned(t *testing.T) {
	first := testConfig(t)
	a, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	owner := a.deployment
	a.closeAll()
	if owner == "" {
		t.Fatal("no deployment ID")
	}
	again, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatalf("the owner's restart: %v", err)
	}
	if again.deployment != owner {
		t.Errorf("deployment ID changed across restarts: %s, then %s", owner, again.deployment)
	}
	again.closeAll()

	second := first
	second.Storage.DataDir = t.TempDir()
	if _, err := newApp(t.Context(), roleAll, second, zap.NewNop(), newRegistry()); !errors.Is(err, pinlater.ErrNamespaceOwned) {
		t.Fatalf("a second deployment on the same namespace: %v, want ErrNamespaceOwned", err)
	}
	second.Redis.NamespaceTakeover = true
	b, err := newApp(t.Context(), roleAll, second, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	b.closeAll()
	if _, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry()); !errors.Is(err, pinlater.ErrNamespaceOwned) {
		t.Errorf("the old owner after the takeover: %v, want ErrNamespaceOwned", err)
	}
}

// takeoverTestDB is the Redis database TestTakeoverDefaultNamespace has to itself: it works on
// the default (empty) namespace, which is the whole database.
const takeoverTestDB = 13

// TestTakeoverDefaultNamespace: --redis-namespace-takeover on the default (empty) namespace
// purges what the previous deployment left: its pending tasks, its dead tasks, a paused queue,
// a rate and a drain mark, so the new deployment starts with empty, running queues. A named
// namespace sharing the database keeps its tasks and settings.
func TestTakeoverDefaultNamespace(t *testing.T) {
	first := testConfig(t)
	first.Redis.Namespace = ""
	first.Redis.DB = takeoverTestDB
	opt := asynq.RedisClientOpt{Addr: first.Redis.Addr, DB: takeoverTestDB}
	rdb := goredis.NewClient(&goredis.Options{Addr: first.Redis.Addr, DB: takeoverTestDB})
	defer rdb.Close()
	if err := rdb.FlushDB(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	// The database is the test's own: it leaves it empty, after the apps below have stopped.
	t.Cleanup(func() {
		c := goredis.NewClient(&goredis.Options{Addr: first.Redis.Addr, DB: takeoverTestDB})
		defer c.Close()
		if err := c.FlushDB(context.Background()).Err(); err != nil {
			t.Errorf("empty the test's database %d: %v", takeoverTestDB, err)
		}
	})
	a, err := newApp(t.Context(), roleAll, first, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.closeAll()

	// What the first deployment leaves: a pending task, a dead one, a paused fanout queue, a
	// rate, a drain mark; and a named namespace's pending task beside it.
	ctx := t.Context()
	client, err := pinlater.NewClient(opt, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	other, err := pinlater.NewClient(opt, zap.NewNop(), nil, pinlater.WithNamespace("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	admin, err := pinlater.NewAdmin(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	otherAdmin, err := pinlater.NewAdmin(opt, pinlater.WithNamespace("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer otherAdmin.Close()
	enqueue := func(c *pinlater.Client, board uint64) *pinlater.Info {
		task, err := pinlater.NewRespace(pinlater.RespacePayload{Board: board})
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Enqueue(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	enqueue(client, 1)
	dead := enqueue(client, 2)
	if err := admin.ArchiveTask(ctx, dead.Queue, dead.ID); err != nil {
		t.Fatal(err)
	}
	enqueue(client, 3)
	enqueue(other, 4)
	for _, err := range []error{
		admin.Pause(ctx, pinlater.QueueFanout),
		admin.SetRate(ctx, pinlater.QueueBulk, 2),
		admin.SetDraining(ctx, pinlater.QueueCritical, true),
		otherAdmin.SetRate(ctx, pinlater.QueueDefault, 3),
		otherAdmin.SetDraining(ctx, pinlater.QueueDefault, true),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	second := first
	second.Storage.DataDir = t.TempDir()
	second.Redis.NamespaceTakeover = true
	b, err := newApp(t.Context(), roleAll, second, zap.NewNop(), newRegistry())
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	b.closeAll()

	type state struct {
		Pending, Dead    int
		Paused, Draining bool
		Rate             float64
	}
	got := map[string]state{}
	qs, err := admin.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if slices.Contains(pinlater.QueueNames(), q.Name) {
			got[q.Name] = state{q.Pending, q.Dead, q.Paused, q.Draining, q.Rate}
		}
	}
	empty := state{Rate: -1}
	want := map[string]state{pinlater.QueueCritical: empty, pinlater.QueueDefault: empty, pinlater.QueueFanout: empty, pinlater.QueueBulk: empty}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the default namespace after the takeover (-want +got):\n%s", diff)
	}
	st, err := otherAdmin.Queue(ctx, pinlater.QueueDefault)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(state{Pending: 1, Draining: true, Rate: 3}, state{st.Pending, st.Dead, st.Paused, st.Draining, st.Rate}); diff != "" {
		t.Errorf("the named namespace's default queue after the takeover, untouched (-want +got):\n%s", diff)
	}
	if owner, err := rdb.Get(ctx, "pinlater:owner").Result(); err != nil || owner != b.deployment {
		t.Errorf("owner after the takeover: %q, %v; want %s", owner, err, b.deployment)
	}
}
