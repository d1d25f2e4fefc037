// Package zen stands for the module's zen: a table with atomic steps.
package zen

import "context"

// Table is a sorted table.
type Table interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error)
	Increment(ctx context.Context, key []byte, delta int64) (int64, error)
}
