package zenpebble

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// TestStats: the LSM shape of an open store (one memtable at least: a read looks there), and
// after a flush the sstables; nothing after Close.
func TestStats(t *testing.T) {
	ctx := context.Background()
	s, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	tb := openTable(t, s, "t")
	if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.MemTables < 1 || st.ReadAmp < 1 {
		t.Errorf("open store with a write: %+v, want a memtable and read amp ≥ 1", st)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.L0Files+int64(st.ReadAmp) < 2 {
		t.Errorf("after a flush: %+v, want an sstable counted", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st != (Stats{}) {
		t.Errorf("closed store: %+v, want zero", st)
	}
}

// TestScanCopies: a scan's rows are copies that stay whole when a caller appends to one (the
// rows share blocks), and an empty value is empty, not nil.
func TestScanCopies(t *testing.T) {
	ctx := context.Background()
	s, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tb := openTable(t, s, "t")
	var muts []zen.Mutation
	for i := range 3000 { // several blocks
		muts = append(muts, zen.Mutation{Key: fmt.Appendf(nil, "k%05d", i), Value: bytes.Repeat([]byte{byte(i)}, i%40)})
	}
	if err := tb.Apply(ctx, muts); err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Scan(ctx, zen.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		_ = append(rows[i].Key, "overwrite?"...)
		_ = append(rows[i].Value, 0xff, 0xff, 0xff)
	}
	if len(rows) != len(muts) {
		t.Fatalf("%d rows, want %d", len(rows), len(muts))
	}
	for i, r := range rows {
		if !bytes.Equal(r.Key, muts[i].Key) || !bytes.Equal(r.Value, muts[i].Value) || r.Value == nil {
			t.Fatalf("row %d = %q=%x, want %q=%x (non-nil)", i, r.Key, r.Value, muts[i].Key, muts[i].Value)
		}
	}
}
