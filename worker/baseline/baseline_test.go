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
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(t)})
	defer rdb.Close()
	ctx := context.Background()
	z, err := New(rdb, fmt.Sprintf("test:baseline:%d:", time.Now().UnixNano()), 3, 2)
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
	if _, err := New(nil, "x", 1, 0); err == nil {
		t.Error("New without a client: no error")
	}
}
