package quiet

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkLanesPriority measures what background work in every lane costs a request-like
// goroutine (a 200µs sleep, then 100µs of work, over and over), with GOMAXPROCS twice the
// CPUs as the binary sets it and one lane per CPU as the binary's default: the request's
// lateness (how much longer than 300µs a round took), at the lanes' default priority and at
// nice 10. Reported: p50-late-µs, p99-late-µs. Compare the two with benchstat.
func BenchmarkLanesPriority(b *testing.B) {
	cpus := runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2 * cpus))
	for _, nice := range []int{0, 10} {
		b.Run(fmt.Sprintf("nice=%d", nice), func(b *testing.B) {
			l := NewLanes(cpus, Nice(nice))
			if _, err := l.Priority(); err != nil {
				b.Skip(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range cpus {
				wg.Go(func() {
					for ctx.Err() == nil {
						_ = l.Do(ctx, func() { spin(2 * time.Millisecond) })
					}
				})
			}
			b.ReportAllocs()
			late := make([]float64, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				time.Sleep(200 * time.Microsecond)
				spin(100 * time.Microsecond)
				late = append(late, float64(time.Since(start)-300*time.Microsecond)/1e3)
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			slices.Sort(late)
			b.ReportMetric(late[len(late)/2], "p50-late-µs")
			b.ReportMetric(late[len(late)*99/100], "p99-late-µs")
		})
	}
}

// spin burns the processor for d.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}
