// Package zenmem is an in-memory zen.Store for unit tests of logic: a hand-written fake of the
// sorted Table, kept beside the interface. It is the reference model in the randomized
// comparison against the real backends. It is not durable and not for production.
package zenmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/smartfeed/smartfeed/zen"
)

// Store is an in-memory zen.Store. The zero value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	tables map[string]*Table
}

var _ zen.Store = (*Store)(nil)

// New returns an empty in-memory store.
func New() *Store { return &Store{tables: map[string]*Table{}} }

// Table returns the named table, creating it empty on first use.
func (s *Store) Table(_ context.Context, name string) (zen.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[name]
	if !ok {
		t = &Table{}
		s.tables[name] = t
	}
	return t, nil
}

// Close does nothing.
func (s *Store) Close() error { return nil }

// Table is an in-memory sorted table: a slice of rows kept in key order.
type Table struct {
	mu   sync.RWMutex
	rows []zen.KV
	// Fail, when set, is returned by every call before it touches the data (fault injection).
	Fail error
}

var (
	_ zen.Table   = (*Table)(nil)
	_ zen.Carrier = (*Table)(nil)
)

func (t *Table) find(key []byte) (int, bool) {
	i := sort.Search(len(t.rows), func(i int) bool { return bytes.Compare(t.rows[i].Key, key) >= 0 })
	return i, i < len(t.rows) && bytes.Equal(t.rows[i].Key, key)
}

// newKV returns a row holding copies of key and value (an empty value stays non-nil).
func newKV(key, value []byte) zen.KV {
	kv := zen.KV{Key: bytes.Clone(key), Value: bytes.Clone(value)}
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	return kv
}

func (t *Table) set(key, value []byte) {
	i, ok := t.find(key)
	kv := newKV(key, value)
	if ok {
		t.rows[i] = kv
		return
	}
	t.rows = append(t.rows, zen.KV{})
	copy(t.rows[i+1:], t.rows[i:])
	t.rows[i] = kv
}

func (t *Table) del(key []byte) {
	if i, ok := t.find(key); ok {
		t.rows = append(t.rows[:i], t.rows[i+1:]...)
	}
}

// Get returns the value at key, or zen.ErrNotFound.
func (t *Table) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if i, ok := t.find(key); ok {
		return bytes.Clone(t.rows[i].Value), nil
	}
	return nil, zen.ErrNotFound
}

// Apply writes the batch atomically.
func (t *Table) Apply(ctx context.Context, muts []zen.Mutation) error {
	if err := t.check(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.applyLocked(muts)
	return nil
}

// Scan returns the rows in [Start, Stop), forward or reversed, up to Limit.
func (t *Table) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if err := t.check(ctx); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	lo := 0
	if o.Start != nil {
		lo, _ = t.find(o.Start)
	}
	hi := len(t.rows)
	if o.Stop != nil {
		hi, _ = t.find(o.Stop)
	}
	var out []zen.KV
	emit := func(i int) bool {
		out = append(out, zen.KV{Key: bytes.Clone(t.rows[i].Key), Value: bytes.Clone(t.rows[i].Value)})
		return o.Limit > 0 && len(out) >= o.Limit
	}
	if o.Reverse {
		for i := hi - 1; i >= lo; i-- {
			if emit(i) {
				break
			}
		}
	} else {
		for i := lo; i < hi; i++ {
			if emit(i) {
				break
			}
		}
	}
	return out, nil
}

// CheckAndSet writes value (nil = delete) at key if the current value equals expected (nil = absent).
func (t *Table) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	return t.CheckAndSetWith(ctx, key, expected, value, nil)
}

// CheckAndSetWith is CheckAndSet that also writes extra, atomically, when it holds.
func (t *Table) CheckAndSetWith(ctx context.Context, key, expected, value []byte, extra []zen.Mutation) (bool, error) {
	if err := t.check(ctx); err != nil {
		return false, err
	}
	if err := checkExtra(extra); err != nil {
		return false, fmt.Errorf("check-and-set %x: %w", key, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.find(key)
	switch {
	case expected == nil && ok, expected != nil && !ok, ok && !bytes.Equal(t.rows[i].Value, expected):
		return false, nil
	}
	if value == nil {
		t.del(key)
	} else {
		t.set(key, value)
	}
	t.applyLocked(extra)
	return true, nil
}

// checkExtra refuses extra rows with an empty key, as the real backends do.
func checkExtra(extra []zen.Mutation) error {
	for i, m := range extra {
		if len(m.Key) == 0 {
			return fmt.Errorf("extra mutation %d: empty row key", i)
		}
	}
	return nil
}

func (t *Table) applyLocked(muts []zen.Mutation) {
	if len(muts) <= mergeFrom {
		for _, m := range muts {
			if m.Delete {
				t.del(m.Key)
			} else {
				t.set(m.Key, m.Value)
			}
		}
		return
	}
	// A large batch is merged with the rows in one pass (the batch sorted, the last mutation of
	// a key winning): one row at a time would shift the sorted slice once per row, and a batch
	// deleting most of a large table would take quadratic time.
	b := slices.Clone(muts)
	slices.SortStableFunc(b, func(x, y zen.Mutation) int { return bytes.Compare(x.Key, y.Key) })
	w := 0
	for _, m := range b {
		if w > 0 && bytes.Equal(b[w-1].Key, m.Key) {
			b[w-1] = m
			continue
		}
		b[w] = m
		w++
	}
	out := make([]zen.KV, 0, len(t.rows)+w)
	i := 0
	for _, m := range b[:w] {
		for i < len(t.rows) && bytes.Compare(t.rows[i].Key, m.Key) < 0 {
			out = append(out, t.rows[i])
			i++
		}
		if i < len(t.rows) && bytes.Equal(t.rows[i].Key, m.Key) {
			i++ // replaced or deleted
		}
		if !m.Delete {
			out = append(out, newKV(m.Key, m.Value))
		}
	}
	t.rows = append(out, t.rows[i:]...)
}

// mergeFrom is the batch size above which applyLocked merges instead of writing row by row.
const mergeFrom = 16

// Increment adds delta to the 8-byte big-endian counter at key.
func (t *Table) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	return t.IncrementWith(ctx, key, delta, nil)
}

// IncrementWith is Increment that also writes extra, atomically.
func (t *Table) IncrementWith(ctx context.Context, key []byte, delta int64, extra []zen.Mutation) (int64, error) {
	if err := t.check(ctx); err != nil {
		return 0, err
	}
	if err := checkExtra(extra); err != nil {
		return 0, fmt.Errorf("increment %x: %w", key, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var cur int64
	if i, ok := t.find(key); ok {
		if len(t.rows[i].Value) != 8 {
			return 0, fmt.Errorf("increment %x: value is %d bytes, not a counter", key, len(t.rows[i].Value))
		}
		cur = int64(binary.BigEndian.Uint64(t.rows[i].Value))
	}
	cur += delta
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(cur))
	t.set(key, b[:])
	t.applyLocked(extra)
	return cur, nil
}

func (t *Table) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.Fail
}
