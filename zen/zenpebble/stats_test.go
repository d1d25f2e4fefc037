package zenpebble

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
)

// TestStats: the LSM shape of an open store (one memtable at least: a read looks there), and
// after a flush the sstables; the bytes written to the WAL, by the flush and by a compaction;
// nothing after Close.
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
	flushed := s.Stats()
	if flushed.L0Files+int64(flushed.ReadAmp) < 2 {
		t.Errorf("after a flush: %+v, want an sstable counted", flushed)
	}
	if flushed.WALBytes == 0 || flushed.FlushedBytes == 0 || flushed.CompactedBytes != 0 {
		t.Errorf("after a flush: WAL %d, flushed %d, compacted %d bytes; want WAL and flushed bytes, none compacted",
			flushed.WALBytes, flushed.FlushedBytes, flushed.CompactedBytes)
	}
	// A second sstable over the same key: the compaction merges the two (one alone is moved).
	if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte("k"), Value: []byte("w")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed = s.Stats()
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.CompactedBytes == 0 || st.FlushedBytes != flushed.FlushedBytes {
		t.Errorf("after a compaction: flushed %d, compacted %d bytes; want the flushed bytes as before and some compacted",
			st.FlushedBytes, st.CompactedBytes)
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
	s := openStore(t, "")
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

// TestFlushAfter: WithFlushAfter flushes a memtable holding at least flushMinBytes once it is
// old enough, leaves a smaller one alone, and stops with Close; without it nothing flushes a
// memtable that is not full. The deleted rows of a flushed memtable no longer cost readers a
// step each (BenchmarkTopAfterTakes).
func TestFlushAfter(t *testing.T) {
	ctx := context.Background()
	write := func(t *testing.T, s *Store, bytes int) {
		t.Helper()
		tb := openTable(t, s, "t")
		var muts []zen.Mutation
		for i := 0; i*1024 < bytes; i++ {
			muts = append(muts, zen.Mutation{Key: fmt.Appendf(nil, "k%06d", i), Value: make([]byte, 1024)})
		}
		if err := tb.Apply(ctx, muts); err != nil {
			t.Fatal(err)
		}
	}
	flushesWithin := func(s *Store, d time.Duration) int64 {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if n := s.Stats().Flushes; n > 0 {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
		return s.Stats().Flushes
	}
	for _, tc := range []struct {
		name  string
		opts  []Option
		bytes int
		want  bool
	}{
		{"old memtable of 2 MiB", []Option{WithFlushAfter(100 * time.Millisecond)}, 2 << 20, true},
		{"old memtable under 1 MiB", []Option{WithFlushAfter(100 * time.Millisecond)}, 512 << 10, false},
		{"no flush age", nil, 2 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open("", append(tc.opts, WithMemTableSize(64<<20))...)
			if err != nil {
				t.Fatal(err)
			}
			write(t, s, tc.bytes)
			wait := time.Second
			if tc.want {
				wait = 10 * time.Second
			}
			if got := flushesWithin(s, wait) > 0; got != tc.want {
				t.Errorf("flushed %v, want %v (%+v)", got, tc.want, s.Stats())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil { // the flush loop is stopped once
				t.Fatal(err)
			}
		})
	}
}

// TestHoldStates: the store's own references keep the tables a compaction replaced alive as
// zombies (still referenced, not yet deleted) for about holdFor after it, however quickly the
// readers let go, so that the reference dropped last, whose holder deletes them, is the store's;
// then they go.
func TestHoldStates(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "")
	tb := openTable(t, s, "t")
	write := func(round int) {
		t.Helper()
		var ms []zen.Mutation
		for i := range 100 {
			ms = append(ms, zen.Mutation{Key: fmt.Appendf(nil, "k%03d", i), Value: fmt.Appendf(nil, "v%d", round)})
		}
		if err := tb.Apply(ctx, ms); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	// The holder has a reference to the state with this table: the second reference it takes
	// from now on was taken after the compaction (the first may have been on its way already).
	n := s.holds.Load()
	testenv.WaitFor(t, testenv.WaitTimeout, "the holder to take a reference to the state after the compaction", func() bool {
		return s.holds.Load() >= n+2
	})
	write(1)
	start := time.Now()
	// The compaction rewrites the table of round 0 with the rows of round 1.
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	// A reader that comes and goes after the compaction is not the last reference.
	if _, err := tb.Get(ctx, []byte("k001")); err != nil {
		t.Fatal(err)
	}
	if z := s.db.Metrics().Table.ZombieCount; z == 0 && time.Since(start) < holdFor/2 {
		t.Fatalf("no zombie tables right after the compaction: the store held no reference to the state before it")
	}
	deadline := time.Now().Add(holdFor + 5*time.Second)
	for s.db.Metrics().Table.ZombieCount != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d zombie tables %v after the compaction, want none after about %v", s.db.Metrics().Table.ZombieCount, time.Since(start), holdFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if held := time.Since(start); held < holdFor/2 {
		t.Errorf("the replaced tables went after %v, want about %v", held, holdFor)
	}
}

// slowSSTFS is an in-memory FS whose new sstables take a while to create: flushes lag writes.
type slowSSTFS struct {
	vfs.FS
	delay time.Duration
}

func (f slowSSTFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		// sleep: a slow sstable create is what makes flushes lag the writes.
		time.Sleep(f.delay)
	}
	return f.FS.Create(name, category)
}

// TestWriteStalls: writes faster than (slow) flushes make Pebble hold them; Stats counts each
// stall and its time, and the log says so. The same writes into a memtable that holds them all
// (no flush) have none.
func TestWriteStalls(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mem    uint64
		stalls bool
	}{
		{"fits in the memtable", 64 << 20, false},
		{"flushes lag", 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			s := openStore(t, "", WithFS(slowSSTFS{vfs.NewMem(), 200 * time.Millisecond}), WithMemTableSize(tc.mem), WithNoSync(),
				WithLogger(zap.New(core)))
			tb := openTable(t, s, "t")
			val := bytes.Repeat([]byte("v"), 1000)
			for b := range 12 { // 12 MB
				muts := make([]zen.Mutation, 1000)
				for i := range muts {
					muts[i] = zen.Mutation{Key: fmt.Appendf(nil, "k%02d%04d", b, i), Value: val}
				}
				if err := tb.Apply(ctx, muts); err != nil {
					t.Fatal(err)
				}
			}
			st := s.Stats()
			if got := st.WriteStalls > 0; got != tc.stalls {
				t.Fatalf("write stalls %d (%v), want some: %v", st.WriteStalls, st.WriteStallTime, tc.stalls)
			}
			if tc.stalls && (st.WriteStallTime <= 0 || logs.FilterMessage("pebble write stall: writes wait").Len() == 0) {
				t.Errorf("stalls %d took %v, %d stall lines logged; want a time and a line",
					st.WriteStalls, st.WriteStallTime, logs.FilterMessage("pebble write stall: writes wait").Len())
			}
		})
	}
}
