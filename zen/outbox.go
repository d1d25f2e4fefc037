package zen

import (
	"context"
	"errors"
	"fmt"
)

// Outbox is the transactional outbox of the write path: a table of events that a service has
// recorded in the store and that are not done yet. A producer writes an event's row before it
// answers its caller (after the change the event describes, on the same store), a relay hands
// rows to the queue, and the consumer deletes a row once the event is handled. The queue
// (pinlater on Redis) is then a cache of the outbox: if it loses tasks, the relay re-derives
// them from the rows.
//
// Outbox is opaque about keys and values: the caller (pinlater.DurableClient) lays them out.
// Rows are small and short-lived; a backlog is bounded by what the queue holds.
type Outbox struct {
	t Table
}

// OutboxTable is the name of the outbox's table in the main store.
const OutboxTable = "outbox"

// NewOutbox returns the outbox kept in t.
func NewOutbox(t Table) *Outbox { return &Outbox{t: t} }

// Table returns the table the outbox is kept in (for SameLog and Graph.SharesLog).
func (o *Outbox) Table() Table { return o.t }

// Put records (or replaces) the row at key.
func (o *Outbox) Put(ctx context.Context, key, value []byte) error {
	if len(key) == 0 {
		return errors.New("outbox put: empty key")
	}
	if err := o.t.Apply(ctx, []Mutation{{Key: key, Value: value}}); err != nil {
		return fmt.Errorf("outbox put: %w", err)
	}
	return nil
}

// Delete removes the row at key (absent is not an error).
func (o *Outbox) Delete(ctx context.Context, key []byte) error {
	if len(key) == 0 {
		return errors.New("outbox delete: empty key")
	}
	if err := o.t.Apply(ctx, []Mutation{{Key: key, Delete: true}}); err != nil {
		return fmt.Errorf("outbox delete: %w", err)
	}
	return nil
}

// DeleteDone removes the row of a finished event at key without waiting for the removal to be
// durable (ApplyLazy): a crash that loses it leaves the row for the relay, which hands the event
// to the queue once more (its consumer is idempotent). Absent is not an error.
func (o *Outbox) DeleteDone(ctx context.Context, key []byte) error {
	if len(key) == 0 {
		return errors.New("outbox delete: empty key")
	}
	if err := ApplyLazy(ctx, o.t, []Mutation{{Key: key, Delete: true}}); err != nil {
		return fmt.Errorf("outbox delete: %w", err)
	}
	return nil
}

// Range calls fn for the rows in [start, stop), in key order, at most limit of them (0: no
// limit). fn returning an error stops the walk and Range returns that error.
func (o *Outbox) Range(ctx context.Context, start, stop []byte, limit int, fn func(key, value []byte) error) error {
	rows, err := o.t.Scan(ctx, ScanOptions{Start: start, Stop: stop, Limit: limit})
	if err != nil {
		return fmt.Errorf("outbox scan: %w", err)
	}
	for _, kv := range rows {
		if err := fn(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	return nil
}
