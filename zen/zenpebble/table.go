package zenpebble

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/internal/zentrace"
)

// The methods of zen.Table and its extensions. Each one is a span, "zen <method>", when its
// context carries a recording span (a traced request's or task's): a child of that span, made
// through that span's tracer provider, with the backend (zen.backend "pebble"), the table
// (zen.table) and, for the calls of many rows, their number (zen.rows: the rows written or asked
// for, or those a scan returned). With tracing off, or a no-op tracer provider, a call does one
// context lookup more than the untraced work and allocates nothing more (BenchmarkTableTracing).
// A call outside any traced request makes no span: the store's own upkeep is not traced.

// spans makes the table calls' spans.
var spans = zentrace.NewBackend("github.com/smartfeed/smartfeed/zen/zenpebble", "pebble")

// startSpan starts the span of one call, "zen " + method, under ctx's span when it records;
// otherwise it returns ctx and a nil span.
func (t *Table) startSpan(ctx context.Context, method string) (context.Context, trace.Span) {
	return spans.Start(ctx, t.name, method)
}

// endSpan ends sp (nil: none) with the call's rows (negative: not reported) and error.
func endSpan(sp trace.Span, rows int, err error) { zentrace.End(sp, rows, err) }

// Get returns the value at key, or zen.ErrNotFound.
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	ctx, sp := t.startSpan(ctx, "Get")
	v, err := t.getRow(ctx, key)
	endSpan(sp, -1, err)
	return v, err
}

// Apply writes the batch atomically: after a crash either all or none of it is there. When a
// key appears more than once the last mutation wins.
//
// Under zen.Lazily the write does not wait for its WAL fsync: it is in the log and visible, and
// the store's next synced commit makes it durable. So for every write below.
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	ctx, sp := t.startSpan(ctx, "Apply")
	err := t.apply(ctx, muts)
	endSpan(sp, len(muts), err)
	return err
}

// Scan returns the rows in [Start, Stop), forward or reversed, up to Limit.
func (t *Table) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	ctx, sp := t.startSpan(ctx, "Scan")
	rows, err := t.scan(ctx, o)
	endSpan(sp, len(rows), err)
	return rows, err
}

// CheckAndSet writes value (nil = delete) at key if the current value equals expected (nil =
// absent), under the key's stripe lock.
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	ctx, sp := t.startSpan(ctx, "CheckAndSet")
	ok, err := t.checkAndSet(ctx, key, expected, value, nil)
	endSpan(sp, -1, err)
	return ok, err
}

// CheckAndSetWith is CheckAndSet that also writes extra, in the same atomic batch, when the
// compare-and-set holds.
func (t *Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	ctx, sp := t.startSpan(ctx, "CheckAndSetWith")
	ok, err := t.checkAndSet(ctx, key, expected, value, extra)
	endSpan(sp, 1+len(extra), err)
	return ok, err
}

// Increment adds delta to the 8-byte big-endian counter at key (absent = 0) under the key's
// stripe lock, and returns the new value. A value that is not 8 bytes is an error and is left
// unchanged.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	ctx, sp := t.startSpan(ctx, "Increment")
	n, err := t.increment(ctx, key, delta, nil)
	endSpan(sp, -1, err)
	return n, err
}

// IncrementWith is Increment that also writes extra in the same atomic batch.
func (t *Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	ctx, sp := t.startSpan(ctx, "IncrementWith")
	n, err := t.increment(ctx, key, delta, extra)
	endSpan(sp, 1+len(extra), err)
	return n, err
}

// GetMany reads the keys one after the other: a Pebble point read is a memory or block-cache
// lookup, cheaper than any goroutine fan-out. Absent rows give nil entries.
func (t *Table) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	ctx, sp := t.startSpan(ctx, "GetMany")
	vals, err := t.getMany(ctx, keys)
	endSpan(sp, len(keys), err)
	return vals, err
}

// CheckAndSetMany evaluates every condition under the stripe locks of all its keys (taken in
// ascending stripe order, as Apply takes them, and held until the batch is visible), and writes
// those that hold as one Pebble batch: one commit, so one fsync, for the whole call. Conditions
// on the same key are evaluated in order, each against the value the earlier ones of the call
// left (their pending writes), exactly as successive CheckAndSets would. A bad key fails the
// call before any read; a failed commit writes nothing.
func (t *Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	ctx, sp := t.startSpan(ctx, "CheckAndSetMany")
	out, err := t.checkAndSetMany(ctx, conds)
	endSpan(sp, len(conds), err)
	return out, err
}
