package main

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestLoadGetFeedVsRedis is a measuring helper, not a check: it offers GetFeed over loopback
// gRPC to a running smartfeed (a demo, so fanout runs meanwhile) and, in alternating windows of
// the same offered rate and concurrency, ZREVRANGE 0 49 of a sorted set per user to Redis (the
// Mastodon-style peer), and prints p50/p99 of each window and their ratio. It runs only when
// SMARTFEED_LOAD_GRPC (the smartfeed address) is set:
//
//	SMARTFEED_LOAD_GRPC=127.0.0.1:19590 SMARTFEED_LOAD_GRAPH=/tmp/demo SMARTFEED_REDIS_ADDR=... \
//	SMARTFEED_LOAD_RATE=200 SMARTFEED_LOAD_CONC=64 SMARTFEED_LOAD_WINDOWS=4 SMARTFEED_LOAD_WINDOW=10s \
//	go test -run TestLoadGetFeedVsRedis -v ./cmd/smartfeed/
//
// SMARTFEED_LOAD_GRAPH is the demo's data directory (its graph.json names the users).
func TestLoadGetFeedVsRedis(t *testing.T) {
	addr := os.Getenv("SMARTFEED_LOAD_GRPC")
	if addr == "" {
		t.Skip("SMARTFEED_LOAD_GRPC not set: no smartfeed to load")
	}
	g, ok, err := loadDemoGraph(os.Getenv("SMARTFEED_LOAD_GRAPH"))
	if err != nil || !ok {
		t.Fatalf("SMARTFEED_LOAD_GRAPH: no demo graph (%v)", err)
	}
	rate := envInt(t, "SMARTFEED_LOAD_RATE", 200)
	conc := envInt(t, "SMARTFEED_LOAD_CONC", 64)
	windows := envInt(t, "SMARTFEED_LOAD_WINDOWS", 4)
	window, err := time.ParseDuration(envOr("SMARTFEED_LOAD_WINDOW", "10s"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	feed := feedv1.NewFeedServiceClient(conn)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("SMARTFEED_REDIS_ADDR"), PoolSize: conc})
	defer rdb.Close()
	// The peer's data: 800 scored pins per user, like a full pool.
	for _, u := range g.Users {
		zs := make([]redis.Z, 800)
		for i := range zs {
			zs[i] = redis.Z{Score: rand.Float64(), Member: strconv.Itoa(i)}
		}
		key := "loadtest:feed:" + u.String()
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]func(ctx context.Context, u zen.ID) error{
		"getfeed": func(ctx context.Context, u zen.ID) error {
			_, err := feed.GetFeed(ctx, &feedv1.GetFeedRequest{UserId: uint64(u)})
			return err
		},
		"redis": func(ctx context.Context, u zen.ID) error {
			return rdb.ZRevRangeWithScores(ctx, "loadtest:feed:"+u.String(), 0, 49).Err()
		},
	}
	for w := range windows {
		for _, name := range []string{"getfeed", "redis"} {
			r := offer(ctx, g.Users, calls[name], rate, conc, window)
			t.Logf("window %d %-7s offered %d/s conc %d: achieved %.0f/s p50 %v p99 %v max %v errors %d skipped %d",
				w, name, rate, conc, r.achieved, r.p(50), r.p(99), r.p(100), r.errs, r.skipped)
		}
	}
}

type loadResult struct {
	lat           []time.Duration
	achieved      float64
	errs, skipped int
}

// p returns the q-th percentile of the latencies (nearest rank).
func (r loadResult) p(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q/100*float64(len(r.lat))+0.5) - 1
	return r.lat[min(max(i, 0), len(r.lat)-1)]
}

// offer calls fn at rate per second with at most conc calls in flight for d, on random users;
// a tick that finds every worker busy is skipped (counted), not queued.
func offer(ctx context.Context, users []zen.ID, fn func(context.Context, zen.ID) error, rate, conc int, d time.Duration) loadResult {
	ticks := make(chan zen.ID)
	var mu sync.Mutex
	var res loadResult
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for u := range ticks {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				start := time.Now()
				err := fn(cctx, u)
				lat := time.Since(start)
				cancel()
				mu.Lock()
				if err != nil {
					res.errs++
				} else {
					res.lat = append(res.lat, lat)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	next := start
	for time.Since(start) < d {
		next = next.Add(interval)
		time.Sleep(time.Until(next))
		select {
		case ticks <- users[rand.IntN(len(users))]:
		default:
			res.skipped++
		}
	}
	close(ticks)
	wg.Wait()
	res.achieved = float64(len(res.lat)) / time.Since(start).Seconds()
	slices.Sort(res.lat)
	return res
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, k string, def int) int {
	t.Helper()
	v, err := strconv.Atoi(envOr(k, strconv.Itoa(def)))
	if err != nil || v < 1 {
		t.Fatalf("%s: want a positive integer", k)
	}
	return v
}
