// Package pebblecrash helps tests take crash images of an embedded (zenpebble) store: Table
// calls a function before each write, where a test clones the store's vfs.MemFS as fsynced
// (vfs.MemFS.CrashClone), which is what a machine crash at that moment leaves.
package pebblecrash

import (
	"context"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// Table is an embedded-backend table that calls Before ahead of each of its writes. It embeds
// *zenpebble.Table, so it keeps the backend's Log, CheckAndSetMany and Carrier methods (a
// caller that looks for them still finds them).
type Table struct {
	*zenpebble.Table
	Before func()
}

// Apply calls Before, then applies muts.
func (c Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	c.Before()
	return c.Table.Apply(ctx, muts)
}

// CheckAndSet calls Before, then compares and sets.
func (c Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	c.Before()
	return c.Table.CheckAndSet(ctx, key, expected, value)
}

// CheckAndSetMany calls Before, then compares and sets each condition.
func (c Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	c.Before()
	return c.Table.CheckAndSetMany(ctx, conds)
}

// CheckAndSetWith calls Before, then compares and sets with extra rows.
func (c Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	c.Before()
	return c.Table.CheckAndSetWith(ctx, key, expected, value, extra)
}

// Increment calls Before, then increments.
func (c Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	c.Before()
	return c.Table.Increment(ctx, key, delta)
}

// IncrementWith calls Before, then increments with extra rows.
func (c Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	c.Before()
	return c.Table.IncrementWith(ctx, key, delta, extra)
}

// Store is an embedded store whose tables are Tables calling Before ahead of each write, so a
// test takes a crash image before every write of the code under test, whatever table it uses.
type Store struct {
	*zenpebble.Store
	Before func()
}

// Table returns the named table of the store, wrapped to call Before ahead of each write.
func (s Store) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return Table{Table: t.(*zenpebble.Table), Before: s.Before}, nil
}
