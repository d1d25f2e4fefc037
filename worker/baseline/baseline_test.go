package baseline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

func TestPushTrimRead(t *testing.T) {
	addr, prefix := testenv.RedisKeyPrefix(t, "baseline")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	z, err := New(rdb, prefix+":", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	users := []uint64{1, 2, 3}
	defer z.Clear(ctx, users)
	for pin := uint64(10); pin < 15; pin++ {
		if n, err := z.Push(ctx, users, pin, float64(pin)); err != nil || n != 3 {
			t.Fatalf("push %d: %d, %v", pin, n, err)
		}
	}
	got, err := z.Read(ctx, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]uint64{14, 13, 12}, got); d != "" {
		t.Errorf("feed of user 2 (-want +got):\n%s", d)
	}
	// ClearAll removes the sets under the prefix, and only those.
	other, err := New(rdb, fmt.Sprintf("test:baseline:other%d:", time.Now().UnixNano()), 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Clear(ctx, []uint64{1})
	if _, err := other.Push(ctx, []uint64{1}, 99, 1); err != nil {
		t.Fatal(err)
	}
	if n, err := z.ClearAll(ctx); err != nil || n != len(users) {
		t.Fatalf("ClearAll: %d, %v; want %d sets", n, err, len(users))
	}
	for _, u := range users {
		if got, err := z.Read(ctx, u, 10); err != nil || len(got) != 0 {
			t.Errorf("after ClearAll, user %d: %v, %v; want nothing", u, got, err)
		}
	}
	if got, err := other.Read(ctx, 1, 10); err != nil || len(got) != 1 {
		t.Errorf("another prefix after ClearAll: %v, %v; want its one pin", got, err)
	}
	if _, err := New(nil, "x", 1, 0); err == nil {
		t.Error("New without a client: no error")
	}
}

// TrimEvery trims on the worker's schedule: about 1 in n inserts, the same receivers for the
// same pin every time; 1 trims every insert.
func TestTrimEvery(t *testing.T) {
	z := &ZSetFeeds{trimEvery: 16}
	picked := 0
	for u := uint64(1); u <= 16000; u++ {
		first := z.trimPick(u, 77)
		if first {
			picked++
		}
		if again := z.trimPick(u, 77); again != first {
			t.Fatal("the pick changed between calls")
		}
	}
	if picked < 800 || picked > 1200 {
		t.Errorf("picked %d of 16000, want about 1000", picked)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	ctx := context.Background()
	base, err := New(rdb, fmt.Sprintf("test:baseline:trim%d:", time.Now().UnixNano()), 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	users := []uint64{1, 2, 3, 4}
	defer base.Clear(ctx, users)
	never := base.TrimEvery(1 << 40)
	for pin := uint64(10); pin < 20; pin++ {
		if _, err := never.Push(ctx, users, pin, float64(pin)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rdb.ZCard(ctx, base.key(2)).Result(); err != nil || n != 10 {
		t.Errorf("trimmed 1 in 2^40: %d members, %v; want all 10", n, err)
	}
	if _, err := base.TrimEvery(1).Push(ctx, users, 20, 20); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.ZCard(ctx, base.key(2)).Result(); err != nil || n != 3 {
		t.Errorf("trimmed every insert: %d members, %v; want the cap, 3", n, err)
	}
}
