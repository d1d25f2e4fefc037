package ratelimit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// newRedis returns a client of the test Redis, its address and a key prefix of the test's own.
func newRedis(t *testing.T) (*redis.Client, string, string) {
	t.Helper()
	addr, prefix := testenv.RedisKeyPrefix(t, "ratelimit")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, addr, prefix + ":"
}

// TestTake drives one limit with a test clock: the burst goes through, then calls that may
// reserve get slots one interval apart up to the bound, then are refused with the wait until
// there is room; a caller without a reservation key is refused at once; a reserved caller that
// comes back early is told the rest of its wait and takes nothing, and at its slot goes through
// once.
func TestTake(t *testing.T) {
	rdb, _, prefix := newRedis(t)
	ctx := t.Context()
	now := time.UnixMilli(1_900_000_000_000)
	rate := Rate{PerSecond: 5, Burst: 5}
	take := func(caller string, reserve time.Duration) string {
		t.Helper()
		r := Request{Key: prefix + "q", Rate: rate, Reserve: reserve, Now: now}
		if caller != "" {
			r.Reservation = prefix + "resv:" + caller
		}
		res, err := Take(ctx, rdb, r)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%v %v", res.Outcome, res.Wait)
	}
	var got, want []string
	for i := range 5 {
		got = append(got, take(fmt.Sprint("t", i), 2*time.Second))
		want = append(want, "allowed 0s")
	}
	// No reservation key: refused, with the wait until the next slot.
	got = append(got, take("", 2*time.Second))
	want = append(want, "refused 200ms")
	for i := 5; i < 15; i++ {
		got = append(got, take(fmt.Sprint("t", i), 2*time.Second))
		want = append(want, fmt.Sprintf("reserved %v", time.Duration(i-4)*200*time.Millisecond))
	}
	got = append(got, take("t15", 2*time.Second), take("t16", 0))
	want = append(want, "refused 2.2s", "refused 2.2s")
	// t5 asks again before its slot: the rest of its wait, nothing taken.
	got = append(got, take("t5", 2*time.Second))
	want = append(want, "reserved 200ms")
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("outcomes (-want +got):\n%s", d)
	}
	// A second later the first five slots are due: each goes through once; t5 again is a new
	// call, and waits.
	now = now.Add(time.Second)
	for i := 5; i < 10; i++ {
		if got := take(fmt.Sprint("t", i), 2*time.Second); got != "allowed 0s" {
			t.Errorf("t%d at its slot: %s, want allowed", i, got)
		}
	}
	if got := take("t5", 0); got == "allowed 0s" {
		t.Errorf("t5 after its slot was used: %s, want to wait", got)
	}
}

// TestTakeShared: limiters of several processes (clients) over one key grant, in total, exactly
// the burst with the clock frozen, and reserve exactly the slots within the bound, however
// their calls interleave.
func TestTakeShared(t *testing.T) {
	_, addr, prefix := newRedis(t)
	ctx := t.Context()
	now := time.UnixMilli(1_900_000_000_000)
	var allowed, reserved atomic.Int32
	var wg sync.WaitGroup
	for p := range 4 {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		wg.Go(func() {
			for i := range 25 {
				res, err := Take(ctx, rdb, Request{Key: prefix + "shared", Rate: Rate{PerSecond: 20, Burst: 20},
					Reservation: fmt.Sprintf("%sresv:p%d-%d", prefix, p, i), Reserve: time.Second, Now: now})
				if err != nil {
					t.Error(err)
					return
				}
				switch res.Outcome {
				case Allowed:
					allowed.Add(1)
				case Reserved:
					reserved.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 20 || reserved.Load() != 20 {
		t.Errorf("allowed %d, reserved %d; want 20 and 20", allowed.Load(), reserved.Load())
	}
}

// TestTakeBadRate: a rate that is not a rate is refused before Redis is asked.
func TestTakeBadRate(t *testing.T) {
	for _, r := range []Rate{{0, 1}, {-1, 1}, {1, 0}, {1, 0.5}} {
		if _, err := Take(t.Context(), nil, Request{Key: "k", Rate: r}); !errors.Is(err, ErrBadRate) {
			t.Errorf("Take at %+v: %v, want ErrBadRate", r, err)
		}
	}
}
