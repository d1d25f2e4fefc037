package zen

import (
	"context"
	"errors"
	"sync"
)

// maxParallel bounds the concurrent row operations of one call (GetMany, ListEdges, Top,
// Insert): enough to hide round trips to a remote store, few enough to be polite to it.
const maxParallel = 8

// parallel runs fn(0..n-1) on up to maxParallel goroutines and returns the first error (after
// which the remaining indexes are not started).
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n <= 1 {
		for i := range n {
			if err := fn(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(maxParallel, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// GetMany reads keys from t: in one call when t is a MultiGetter, else by point reads with
// bounded parallelism. The result has one entry per key: nil when the row is absent, the value
// (possibly empty, never nil) when present. The first error other than ErrNotFound is returned.
func GetMany(ctx context.Context, t Table, keys [][]byte) ([][]byte, error) {
	if mg, ok := t.(MultiGetter); ok {
		return mg.GetMany(ctx, keys)
	}
	out := make([][]byte, len(keys))
	err := parallel(ctx, len(keys), func(ctx context.Context, i int) error {
		v, err := t.Get(ctx, keys[i])
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if v == nil {
			v = []byte{}
		}
		out[i] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// prefixEnd returns the smallest key above every key that starts with prefix (nil = none).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// keyAfter returns the smallest key strictly above k.
func keyAfter(k []byte) []byte { return append(append(make([]byte, 0, len(k)+1), k...), 0) }
