package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestGraphReadsCountsStoreCalls: on the real Redis, the join cache serves the warm reads
// without reaching the store, the store alone is reached on every read, and the report
// section lists all four rows.
func TestGraphReadsCountsStoreCalls(t *testing.T) {
	addr, prefix := testenv.RedisKeyPrefix(t, "graphreads")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := GraphReads(ctx, zenmem.New(), rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4 (two reads, cache off and on)", len(rs))
	}
	for _, r := range rs {
		if r.Latency.N != GraphReadsN {
			t.Errorf("%s cache %v: %d reads timed, want %d", r.Read, r.Cache, r.Latency.N, GraphReadsN)
		}
		switch {
		case r.Cache && r.StoreCallsPer != 0:
			t.Errorf("%s through the warm cache: %.2f store calls a read, want 0", r.Read, r.StoreCallsPer)
		case !r.Cache && r.StoreCallsPer < 1:
			t.Errorf("%s on the store: %.2f store calls a read, want at least 1", r.Read, r.StoreCallsPer)
		}
	}
	md := graphReadsMarkdown(rs)
	for _, want := range []string{"get_objects_50 | off", "get_objects_50 | on", "edge_page_50 | off", "edge_page_50 | on"} {
		if !strings.Contains(md, want) {
			t.Errorf("report section lacks %q:\n%s", want, md)
		}
	}
}
