package zen

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotFound is returned when a row, object or edge does not exist (or is soft-deleted).
var ErrNotFound = errors.New("zen: not found")

// ErrDeleted is returned by Graph.Get for an object that exists but is soft-deleted. It wraps
// ErrNotFound (errors.Is(err, ErrNotFound) holds too), so callers that treat both alike need
// not care; callers that must tell a deleted object from one this store never had test it.
var ErrDeleted = fmt.Errorf("deleted: %w", ErrNotFound)

// ErrUnavailable is wrapped by errors that a retry shortly after may not meet: a write to shards
// fenced while they move between stores (zen/zenroute). The gRPC services answer it Unavailable.
var ErrUnavailable = errors.New("zen: temporarily unavailable, retry")

// KV is one row of a Table: its key and its value.
type KV struct {
	Key   []byte
	Value []byte
}

// Mutation is one write in a batch: a put of Value at Key, or a delete of Key when Delete is set.
type Mutation struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// ScanOptions bounds a range scan over [Start, Stop). A nil Start means the first row, a nil
// Stop means past the last row. Reverse returns rows from the highest key below Stop down to
// Start. Limit caps the number of rows returned (0 means no limit).
type ScanOptions struct {
	Start   []byte
	Stop    []byte
	Reverse bool
	Limit   int
}

// Table is a sorted, HBase-like table: byte-string row keys in bytewise order, one value each.
// Every method is safe for concurrent use and bounded by ctx.
//
// Apply is atomic on the embedded backend but only per row on HBase: callers that write several
// rows must stay correct if only some of them land (write in an order that is safe to replay).
type Table interface {
	// Get returns the value at key, or ErrNotFound.
	Get(ctx context.Context, key []byte) ([]byte, error)
	// Apply writes a batch of puts and deletes.
	Apply(ctx context.Context, muts []Mutation) error
	// Scan returns the rows in the range, in key order (or reverse key order).
	Scan(ctx context.Context, opts ScanOptions) ([]KV, error)
	// CheckAndSet writes value at key only if the current value equals expected; a nil expected
	// means "only if absent", a nil value means "delete". It reports whether it wrote.
	CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error)
	// Increment atomically adds delta to the 8-byte big-endian counter at key (absent = 0) and
	// returns the new value.
	Increment(ctx context.Context, key []byte, delta int64) (int64, error)
}

// Store opens the named tables of one storage cluster. Table names are short lowercase words
// (e.g. "objects", "edges", "pools", "feed"); the HBase backend maps each to an HBase table.
type Store interface {
	// Table returns the named table, creating it if the backend needs that. A name that
	// CheckTableName refuses is an error.
	Table(ctx context.Context, name string) (Table, error)
	// Close releases the store.
	Close() error
}

// CheckTableName reports whether name is a valid table name: 1 to 64 characters of [a-z0-9_].
// Every backend refuses other names, so a name that works on one works on all.
func CheckTableName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("table name %q: want 1 to 64 characters", name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("table name %q: want only [a-z0-9_]", name)
		}
	}
	return nil
}

// MultiGetter is an optional extension of Table for backends that read many rows faster together
// than one by one (the HBase backend sends them at once and gohbase batches them per region
// server). zen uses it when a Table implements it. The result has one entry per key: nil when the
// row is absent, the value (possibly empty, never nil) when present.
type MultiGetter interface {
	GetMany(ctx context.Context, keys [][]byte) ([][]byte, error)
}

// MultiScanner is an optional extension of Table for backends that answer several scans faster
// together than one after another (the HBase backend sends them concurrently, so k scans cost
// about one round trip). ScanMany returns one list of rows per element of opts, in order, each
// what Scan would return for it; on an error it returns nil and the first error.
type MultiScanner interface {
	ScanMany(ctx context.Context, opts []ScanOptions) ([][]KV, error)
}

// Carrier is an optional extension of Table for backends that can write extra rows in the same
// atomic commit as a compare-and-set or an increment (the embedded backend; HBase's atomic
// operations are single-row). CheckAndSetWith writes extra only when the compare-and-set holds;
// IncrementWith always. A wrapper whose inner table cannot may return an error wrapping
// errors.ErrUnsupported, having written nothing; callers then fall back to separate writes.
type Carrier interface {
	CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []Mutation) (bool, error)
	IncrementWith(ctx context.Context, key []byte, delta int64, extra []Mutation) (int64, error)
}

// Cond is one element of a CheckAndSetMany call: write Value at Key only if the current value
// equals Expected. As in CheckAndSet, a nil Expected means "only if absent" and a nil Value
// means "delete"; an empty (non-nil) Expected or Value is an empty value, which is present.
type Cond struct {
	Key, Expected, Value []byte
}

// CondBatcher is an optional extension of Table for backends that run many compare-and-sets
// faster together than one by one (the embedded backend commits every write that holds in one
// synced batch; the HBase backend sends them at once). zen uses it when a Table implements it.
//
// CheckAndSetMany has, per element, the semantics of CheckAndSet, and returns one result per
// element, in order: whether that element wrote. The elements are independent (not all or
// nothing): each one holds or not on its own, and each is atomic against every other writer of
// its row. Elements on the same key are evaluated in the order given, each against the value the
// earlier ones left, so the results equal those of calling CheckAndSet on each element in turn
// when nothing else writes those rows. A bad key fails the call before any write. On any other
// error the results are nil and any subset of the elements may have been written (the caller
// re-reads to find out, as after a CheckAndSet that errs).
type CondBatcher interface {
	CheckAndSetMany(ctx context.Context, conds []Cond) ([]bool, error)
}

// Lazily returns ctx marked for lazy writes: a write made with it to a backend that logs a write
// before it makes it durable (the embedded backend: a write-ahead log, fsynced on commit) is
// visible to every reader and compare-and-set when it returns, but does not wait to be durable.
// A crash of the machine (not of the process) may lose it, and any later write of the same log
// that waits for durability makes it durable too (the log is sequential: what survives a crash
// is a prefix of it). Other backends write as usual. Use it for writes whose loss is harmless
// (cleanup readers already treat as done), or for the steps of a sequence that ends with a
// durable write to the same log (SameLog), where a crash leaves a prefix of the steps, as a
// crash between durable steps would.
func Lazily(ctx context.Context) context.Context { return context.WithValue(ctx, lazyKey{}, true) }

// IsLazy reports whether ctx is marked by Lazily (for backends).
func IsLazy(ctx context.Context) bool { v, _ := ctx.Value(lazyKey{}).(bool); return v }

type lazyKey struct{}

// ApplyLazy writes muts with t.Apply under Lazily(ctx).
func ApplyLazy(ctx context.Context, t Table, muts []Mutation) error {
	return t.Apply(Lazily(ctx), muts)
}

// Logged is an optional extension of Table for backends whose writes go through a sequential
// log shared by the tables of a store: Log identifies it (comparable; equal for two tables of
// one store).
type Logged interface {
	Log() any
}

// SameLog reports whether a and b are known to commit through one sequential log (both Logged,
// with equal logs), so that a durable write to either makes every earlier write to both
// durable. Wrappers are not Logged: they may route one table's rows to several stores.
func SameLog(a, b Table) bool {
	la, ok := a.(Logged)
	if !ok {
		return false
	}
	lb, ok := b.(Logged)
	return ok && la.Log() == lb.Log()
}
