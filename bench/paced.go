package bench

import (
	"context"
	"sync"
	"time"
)

// paced calls fn at rate per second for d (or n times when n > 0), each in its own goroutine
// bounded by conc, and waits for them.
func paced(ctx context.Context, rate float64, d time.Duration, n, conc int, fn func(i int)) int {
	return pacedAt(ctx, rate, d, n, conc, func(i int, _ time.Time) { fn(i) })
}

// pacedAt is paced that also hands fn the time its call was scheduled for (a call starts later
// when the conc slots are all busy).
func pacedAt(ctx context.Context, rate float64, d time.Duration, n, conc int, fn func(i int, due time.Time)) int {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	start := time.Now()
	i := 0
	for ; ctx.Err() == nil; i++ {
		if n > 0 && i >= n || n == 0 && time.Since(start) >= d {
			break
		}
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if w := time.Until(due); w > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w):
			}
		}
		// A cancel during the wait, or the wait for a slot, starts nothing more: select picks
		// at random among ready cases, so the context is checked after the slot is taken too.
		if ctx.Err() != nil {
			break
		}
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			if acquired {
				<-sem
			}
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i, due)
		}(i)
	}
	wg.Wait()
	return i
}
