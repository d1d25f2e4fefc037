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
