package zenhbase

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/internal/zentrace"
)

// The methods of zen.Table and its extensions. Each one is a span, "zen <method>", when its
// context carries a recording span (a traced request's or task's): a child of that span, made
// through that span's tracer provider, with the backend (zen.backend "hbase"), the zen table
// (zen.table, without Options.TablePrefix) and, for the calls of many rows, their number
// (zen.rows: the rows written or asked for, or those the scans returned). gohbase's spans of
// the call's RPCs (Get, Scan, Mutate, Multi, ...) are its children. With tracing off, or a no-op
// tracer provider, a call does one context lookup more than the untraced work and allocates
// nothing more (TestTableUntracedAllocs). A call outside any traced request makes no span.

// spans makes the table calls' spans.
var spans = zentrace.NewBackend("github.com/smartfeed/smartfeed/zen/zenhbase", "hbase")

// startSpan starts the span of one call, "zen " + method, under ctx's span when it records;
// otherwise it returns ctx and a nil span.
func (t *Table) startSpan(ctx context.Context, method string) (context.Context, trace.Span) {
	return spans.Start(ctx, t.zname, method)
}

// Get returns the value at key, or zen.ErrNotFound.
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	ctx, sp := t.startSpan(ctx, "Get")
	v, err := t.getKey(ctx, key)
	zentrace.End(sp, -1, err)
	return v, err
}

// Apply writes the batch: one HBase Put or row Delete per key, sent concurrently. When a key
// appears more than once only its last mutation is sent. It is atomic per row only: on error
// some rows may have been written.
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	ctx, sp := t.startSpan(ctx, "Apply")
	err := t.apply(ctx, muts)
	zentrace.End(sp, len(muts), err)
	return err
}

// Scan returns the rows in [Start, Stop), forward or reversed, up to Limit.
func (t *Table) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	ctx, sp := t.startSpan(ctx, "Scan")
	rows, err := t.scan(ctx, o)
	zentrace.End(sp, len(rows), err)
	return rows, err
}

// CheckAndSet writes value (nil = delete) at key if the current value equals expected (nil =
// absent), atomically on the region server.
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	ctx, sp := t.startSpan(ctx, "CheckAndSet")
	ok, err := t.checkAndSetKey(ctx, key, expected, value)
	zentrace.End(sp, -1, err)
	return ok, err
}

// Increment adds delta to the 8-byte big-endian counter at key (absent = 0) with HBase's
// Increment, once however often gohbase sends it (a nonce: increment.go), and returns the new
// value. A value that is not 8 bytes is an error.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	ctx, sp := t.startSpan(ctx, "Increment")
	n, err := t.incrementKey(ctx, key, delta)
	zentrace.End(sp, -1, err)
	return n, err
}

// GetMany reads keys under one call deadline: from batchFrom keys with one SendBatch through
// the reader (multi requests per region server, sent at once), below it one Get per key, sent
// concurrently (gohbase coalesces concurrent Gets to a region server). Absent rows give nil
// entries.
func (t *Table) GetMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	ctx, sp := t.startSpan(ctx, "GetMany")
	vals, err := t.getMany(ctx, keys)
	zentrace.End(sp, len(keys), err)
	return vals, err
}

// ScanMany runs every scan at once (up to maxInflightScans), each as Scan would, so that the
// sources of a user's pools read in about one round trip instead of one per source. It is one
// span, whose zen.rows is the rows of all the scans.
func (t *Table) ScanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	ctx, sp := t.startSpan(ctx, "ScanMany")
	out, err := t.scanMany(ctx, opts)
	if sp != nil {
		n := 0
		for _, rows := range out {
			n += len(rows)
		}
		zentrace.End(sp, n, err)
	}
	return out, err
}

// CheckAndSetMany sends the check-and-mutates concurrently (up to maxInflightCAS) under one call
// deadline, each atomic on its region server. Conditions on the same key run one after the other
// in the order given, so each sees the value the earlier ones left, as successive CheckAndSets
// would. A bad key fails the call before any write; on another error some conditions may have
// been applied.
func (t *Table) CheckAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	ctx, sp := t.startSpan(ctx, "CheckAndSetMany")
	out, err := t.checkAndSetMany(ctx, conds)
	zentrace.End(sp, len(conds), err)
	return out, err
}
