package feedsvc

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/feedsvc/hedge"
)

// BenchmarkFailover is the tail-under-trouble experiment of docs/feedsvc-benchmarks.md: GetFeed (later
// pages: the hedged materialized read alone) against a primary whose reads take 1–3 ms, with
// 1% of them slowed to 1 s, hedging off and on; and with the primary fully down. Each
// iteration starts one request; up to 64 run at once. It reports latency percentiles, the
// extra load (standby reads per request) and the success rate. Run it with a fixed count so
// the percentiles have enough samples, e.g.
//
//	go test ./feedsvc -run XXX -bench Failover -benchtime 5000x
func BenchmarkFailover(b *testing.B) {
	base := faults.Config{Base: time.Millisecond, Jitter: 2 * time.Millisecond}
	slow := base
	slow.SlowFraction, slow.Slow = 0.01, time.Second
	down := faults.Config{Outage: true}
	percentile := func(q float64, budget float64) func(*hedge.Policy) {
		return func(p *hedge.Policy) { p.Mode, p.Percentile, p.Budget = hedge.ModePercentile, q, budget }
	}
	for _, tc := range []struct {
		name    string
		primary faults.Config
		policy  func(*hedge.Policy)
	}{
		{"slow1pct/hedging=off", slow, func(p *hedge.Policy) { p.Mode = hedge.ModeOff }},
		{"slow1pct/hedging=p99.9,clamp2-100ms,budget2pct", slow, percentile(99.9, 0.02)},
		{"slow1pct/hedging=p99,clamp2-100ms,budget2pct", slow, percentile(99, 0.02)},
		{"slow1pct/hedging=fixed10ms,budget2pct", slow, func(p *hedge.Policy) { p.Mode, p.Delay = hedge.ModeFixed, 10*time.Millisecond }},
		{"primary-down/hedging=p99.9", down, percentile(99.9, 0.02)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, func(_ *Config, p *hedge.Policy) { tc.policy(p) })
			for range 4 {
				e.get(b, "", 100)
				e.materialize(b)
			}
			e.flush(b)
			e.gen.err = errGen
			cursor := e.get(b, "", 5).NextCursor
			if err := e.standby.Set(base); err != nil {
				b.Fatal(err)
			}
			if err := e.primary.Set(tc.primary); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			req := Request{User: e.user, Cursor: cursor, PageSize: 10}
			// Warm the latency window past MinSamples, off the clock.
			for range 200 {
				_, _ = e.svc.GetFeed(ctx, req)
			}
			standbyBefore := e.standby.Stats().Calls
			var (
				mu       sync.Mutex
				lat      []time.Duration
				failures atomic.Int64
				wg       sync.WaitGroup
			)
			sem := make(chan struct{}, 64)
			b.ReportAllocs()
			for b.Loop() {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					start := time.Now()
					p, err := e.svc.GetFeed(ctx, req)
					took := time.Since(start)
					if err != nil || len(p.Items) == 0 {
						failures.Add(1)
					}
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
				})
			}
			wg.Wait()
			e.svc.Wait()
			n := len(lat)
			slices.Sort(lat)
			pct := func(q float64) float64 {
				i := min(n-1, max(0, int(float64(n)*q/100+0.5)-1))
				return float64(lat[i]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(50), "p50-ms")
			b.ReportMetric(pct(99), "p99-ms")
			b.ReportMetric(pct(99.9), "p99.9-ms")
			b.ReportMetric(float64(lat[n-1])/float64(time.Millisecond), "max-ms")
			b.ReportMetric(100*float64(e.standby.Stats().Calls-standbyBefore)/float64(n), "extra-load-%")
			b.ReportMetric(100*float64(int64(n)-failures.Load())/float64(n), "success-%")
			b.ReportMetric(metricValue(b, e.reg, "smartfeed_hedge_budget_exhausted_total"), "budget-exhausted")
			b.ReportMetric(float64(e.primary.Stats().Slowed), "primary-slowed")
			cut, _ := e.svc.Hedger().Cutoff()
			b.ReportMetric(float64(cut)/float64(time.Millisecond), "cutoff-ms")
		})
	}
}

// BenchmarkGetFeedFirstPage measures a first page with a fresh chunk on in-memory stores: the
// generator call and materialized read in parallel, the pending write, the merge.
func BenchmarkGetFeedFirstPage(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.svc.GetFeed(ctx, Request{User: e.user, PageSize: 25}); err != nil {
			b.Fatal(err)
		}
		e.materialize(b)
	}
}

// BenchmarkGetFeedRecentPage measures the page most calls get: a first page within
// min_chunk_interval of the user's last generator call, a plain read of 50 materialized items
// (the read, the liveness filter, the merge; every chunk materialized, so the feed's head is
// what the head cache holds in the steady state). Its allocations are what the collector pays for
// on every call (docs/read-path.md, "The collector's heap floor").
func BenchmarkGetFeedRecentPage(b *testing.B) {
	e := newEnv(b, func(c *Config, _ *hedge.Policy) { c.MinChunkInterval = 0 })
	e.gen.size = 10
	ctx := context.Background()
	for range 6 {
		if _, err := e.svc.GetFeed(ctx, Request{User: e.user, PageSize: 50}); err != nil {
			b.Fatal(err)
		}
		e.svc.enqueues.Wait() // the chunk's job is enqueued after the answer
		e.materialize(b)
	}
	cfg := e.svc.Config()
	cfg.MinChunkInterval = time.Hour
	if err := e.svc.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	p, err := e.svc.GetFeed(ctx, Request{User: e.user, PageSize: 50})
	if err != nil || len(p.Items) != 50 || p.FreshStatus != FreshRecent {
		b.Fatalf("primed page: %d items, %v, %v", len(p.Items), p.FreshStatus, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.svc.GetFeed(ctx, Request{User: e.user, PageSize: 50}); err != nil {
			b.Fatal(err)
		}
	}
}
