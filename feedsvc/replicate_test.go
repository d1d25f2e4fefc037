package feedsvc

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/smartfeed/smartfeed/feedsvc/faults"
	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += value(m)
		}
		return sum
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func newRepl(t *testing.T, o ReplicatorOptions) (*Replicator, zen.Table, *faults.Table, *prometheus.Registry) {
	t.Helper()
	p, _ := zenmem.New().Table(t.Context(), "feed")
	s, _ := zenmem.New().Table(t.Context(), "feed")
	st := faults.Wrap(s, 1)
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	r, err := NewReplicator(p, st, o)
	if err != nil {
		t.Fatal(err)
	}
	return r, p, st, reg
}

func run(t *testing.T, r *Replicator) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func flush(t *testing.T, r *Replicator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every kind of write reaches the standby, in order, with the lag measured.
func TestReplicatorCopiesWrites(t *testing.T) {
	// A primary that writes extra rows with a compare-and-set or an increment (zenmem, Pebble)
	// logs each in the same commit, and a refused compare-and-set logs nothing; one that cannot
	// (HBase) goes through a pending entry, logged whatever the outcome.
	for _, tc := range []struct {
		name    string
		carrier bool
		entries float64
	}{{"carrier", true, 56}, {"pending entries", false, 57}} {
		t.Run(tc.name, func(t *testing.T) {
			// In synctest's bubble: the flush's time below is the replicator's own, not the
			// machine's load.
			synctest.Test(t, func(t *testing.T) { testReplicatorCopiesWrites(t, tc.carrier, tc.entries) })
		})
	}
}

// plainTable hides every optional interface of the table it wraps.
type plainTable struct{ zen.Table }

func testReplicatorCopiesWrites(t *testing.T, carrier bool, entries float64) {
	pt, _ := zenmem.New().Table(t.Context(), "feed")
	st, _ := zenmem.New().Table(t.Context(), "feed")
	var p zen.Table = pt
	if !carrier {
		p = plainTable{pt}
	}
	s := faults.Wrap(st, 1)
	reg := prometheus.NewRegistry()
	r, err := NewReplicator(p, s, ReplicatorOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	ctx := t.Context()
	for i := range 50 {
		k := fmt.Appendf(nil, "k%02d", i%10) // rewrites of one key must land in order
		if err := r.Apply(ctx, []zen.Mutation{{Key: k, Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CheckAndSet(ctx, []byte("cas"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.CheckAndSet(ctx, []byte("cas"), nil, []byte("y")); ok {
		t.Fatal("second CheckAndSet wrote")
	}
	if _, err := r.CheckAndSet(ctx, []byte("k00"), []byte("v40"), nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := r.Increment(ctx, []byte("n"), 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Apply(ctx, []zen.Mutation{{Key: []byte("k01"), Delete: true}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	flush(t, r)
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Errorf("flush took %v, want well under a few hundred ms", took)
	}
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby differs from primary (-primary +standby):\n%s", diff)
	}
	// One log entry per write: 50 applies, 1 CheckAndSet (+1 for the refused one without a
	// carrier), 1 delete by CheckAndSet, 3 increments, 1 delete.
	if n := metricValue(t, reg, "smartfeed_feed_replication_lag_seconds"); n != entries {
		t.Errorf("lag samples = %v, want one per replicated write (%v)", n, entries)
	}
	if lags, next, _ := r.Lags().Since(0); float64(len(lags)) != entries || float64(next) != entries {
		t.Errorf("lag log has %d measurements (next %d), want the histogram's %v", len(lags), next, entries)
	}
	if v := r.Staleness(); v != 0 {
		t.Errorf("staleness after flush = %v, want 0", v)
	}
}

// A standby outage holds the writes, shows as staleness, and they land in order once it ends.
func TestReplicatorSurvivesStandbyOutage(t *testing.T) {
	r, p, s, reg := newRepl(t, ReplicatorOptions{})
	run(t, r)
	if err := s.Set(faults.Config{Outage: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := r.Apply(t.Context(), []zen.Mutation{{Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatalf("a standby outage failed a primary write: %v", err)
		}
	}
	testenv.WaitFor(t, testenv.WaitTimeout, "the applier to meet the outage", func() bool {
		return metricValue(t, reg, "smartfeed_feed_replication_retries_total") > 0
	})
	// sleep: the outage lasts 20 ms more, which the staleness must show.
	time.Sleep(20 * time.Millisecond)
	if st := r.Staleness(); st < 10*time.Millisecond {
		t.Errorf("staleness during the outage = %v", st)
	}
	if g := metricValue(t, reg, "smartfeed_feed_replication_staleness_seconds"); g <= 0 {
		t.Errorf("exported staleness = %v", g)
	}
	if err := s.Set(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby after the outage (-primary +standby):\n%s", diff)
	}
	if n := metricValue(t, reg, "smartfeed_feed_replication_retries_total"); n == 0 {
		t.Error("no retries counted")
	}
}

// A crash with writes not yet on the standby loses nothing: the change log is in the primary,
// and the next Replicator replays it. A standby rebuilt empty is repaired by ResyncAll.
func TestReplicatorReplaysAfterCrashAndResyncs(t *testing.T) {
	r, p, s, _ := newRepl(t, ReplicatorOptions{})
	// Not running: the process "crashes" with every write still in the log.
	u := userID(t, 1)
	for i := range 5 {
		if err := r.Apply(t.Context(), []zen.Mutation{{Key: itemKey(u, position{Seq: uint64(i + 1)}), Value: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Increment(t.Context(), userPrefix(prefixCounter, u), 3); err != nil {
		t.Fatal(err)
	}
	if rows := dump(t, s); len(rows) != 0 {
		t.Fatalf("standby has %d rows before any applier ran", len(rows))
	}
	// A new process over the same stores.
	r2, err := NewReplicator(p, s, ReplicatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run(t, r2)
	flush(t, r2)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby after replay (-primary +standby):\n%s", diff)
	}
	// The standby is rebuilt: empty, plus a stray row the primary lacks.
	for _, kv := range dump(t, s) {
		if err := s.Apply(t.Context(), []zen.Mutation{{Key: kv.Key, Delete: true}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Apply(t.Context(), []zen.Mutation{{Key: pinKey(u, pinID(9)), Value: []byte("stale")}}); err != nil {
		t.Fatal(err)
	}
	n, err := ResyncAll(t.Context(), p, s, nil)
	if err != nil || n != 7 {
		t.Errorf("ResyncAll = %d, %v; want 7 rows queued (6 primary, 1 standby)", n, err)
	}
	flush(t, r2)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby after resync (-primary +standby):\n%s", diff)
	}
	if rows, _ := p.Scan(t.Context(), zen.ScanOptions{Start: logPrefix, Stop: zen.PrefixEnd(logPrefix)}); len(rows) != 0 {
		t.Errorf("%d change-log entries left after flush", len(rows))
	}
}

// Concurrent writes of one key reach the standby with the primary's final value, whatever
// order their log entries are applied in; Resync of one user still repairs a standby.
func TestReplicatorConcurrentWritesConverge(t *testing.T) {
	r, p, s, _ := newRepl(t, ReplicatorOptions{MaxBatch: 3})
	run(t, r)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				k := fmt.Appendf(nil, "k%d", i%3)
				if err := r.Apply(t.Context(), []zen.Mutation{{Key: k, Value: fmt.Appendf(nil, "w%d-%d", w, i)}}); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.CheckAndSet(t.Context(), []byte("cas"), nil, fmt.Appendf(nil, "w%d", w)); err != nil {
					t.Error(err)
					return
				}
				if _, err := r.Increment(t.Context(), []byte("n"), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	flush(t, r)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby differs from primary (-primary +standby):\n%s", diff)
	}
	u := userID(t, 2)
	if err := s.Apply(t.Context(), []zen.Mutation{{Key: pinKey(u, pinID(9)), Value: []byte("stale")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := Resync(t.Context(), p, s, u); err != nil || n != 1 {
		t.Errorf("Resync = %d, %v; want 1 row changed", n, err)
	}
}

// A writer that dies between its pending entry and the operation's commit: the entry is
// applied once PendingTimeout passes, with what the primary holds.
func TestReplicatorPendingEntryOfDeadWriter(t *testing.T) {
	r, p, s, _ := newRepl(t, ReplicatorOptions{PendingTimeout: 50 * time.Millisecond})
	key := []byte("cas")
	if err := p.Apply(t.Context(), []zen.Mutation{{Key: logKey(r.nextSeq()), Value: encodeEntry(entryPending, [][]byte{key})}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CheckAndSet(t.Context(), key, nil, []byte("v")); err != nil { // landed, never committed
		t.Fatal(err)
	}
	run(t, r)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, err := s.Get(t.Context(), key); err == nil && string(v) == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead writer's change never reached the standby")
		}
		time.Sleep(10 * time.Millisecond)
	}
	flush(t, r)
	if diff := cmp.Diff(dump(t, p), dump(t, s)); diff != "" {
		t.Errorf("standby differs (-primary +standby):\n%s", diff)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(entryCommitted, [][]byte{[]byte("a"), []byte("bc")}))
	f.Add(encodeEntry(entryPending, nil))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		state, keys, err := decodeEntry(b)
		if err != nil {
			return
		}
		if got := encodeEntry(state, keys); !bytes.Equal(got, b) {
			t.Fatalf("decode then encode = %x, want %x", got, b)
		}
	})
}

// scanStarts records the start key of every Scan of the change log; slowKey, when set, makes
// an Apply that writes it wait for release (a writer holding its sequence across a slow write).
type scanStarts struct {
	zen.Table
	mu      sync.Mutex
	starts  [][]byte
	slowKey []byte
	release chan struct{}
	entered chan struct{}
}

func (s *scanStarts) Scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if isLogKey(o.Start) || bytes.Equal(o.Start, logPrefix) {
		s.mu.Lock()
		s.starts = append(s.starts, bytes.Clone(o.Start))
		s.mu.Unlock()
	}
	return s.Table.Scan(ctx, o)
}

func (s *scanStarts) Apply(ctx context.Context, m []zen.Mutation) error {
	for _, mu := range m {
		if s.slowKey != nil && bytes.Equal(mu.Key, s.slowKey) {
			close(s.entered)
			<-s.release
		}
	}
	return s.Table.Apply(ctx, m)
}

func (s *scanStarts) last() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[len(s.starts)-1]
}

// TestReplicatorScansFromItsFloor: a pass reads the change log from past what it already
// applied (an LSM store keeps the deleted entries as tombstones; a scan from the start walks
// them all), yet an entry whose write was slow, with a smaller sequence than entries applied
// before it landed, is still applied, without waiting for a full scan.
func TestReplicatorScansFromItsFloor(t *testing.T) {
	p, _ := zenmem.New().Table(t.Context(), "feed")
	s, _ := zenmem.New().Table(t.Context(), "feed")
	ss := &scanStarts{Table: p, slowKey: []byte("\x01slow"), release: make(chan struct{}), entered: make(chan struct{})}
	r, err := NewReplicator(ss, s, ReplicatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	put := func(k string) {
		t.Helper()
		if err := r.Apply(ctx, []zen.Mutation{{Key: []byte(k), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	pass := func() {
		t.Helper()
		if _, _, err := r.pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass() // the first pass of a process reads from the start
	if got := ss.last(); !bytes.Equal(got, logPrefix) {
		t.Fatalf("first pass started at %x, want the log's start", got)
	}
	put("\x01a")
	pass()
	first := r.floor.Load()
	put("\x01b")
	pass()
	if got := ss.last(); !bytes.Equal(got, logKey(first)) || bytes.Compare(got, logPrefix) <= 0 {
		t.Errorf("pass started at %x, want its floor %x", got, logKey(first))
	}
	if r.floor.Load() <= first {
		t.Errorf("floor %d did not move past %d after applying an entry", r.floor.Load(), first)
	}

	// A slow writer takes its sequence, then a fast one writes and is applied past it.
	slow := make(chan error, 1)
	go func() { slow <- r.Apply(ctx, []zen.Mutation{{Key: []byte("\x01slow"), Value: []byte("v")}}) }()
	<-ss.entered
	put("\x01fast")
	pass()
	if _, err := s.Get(ctx, []byte("\x01fast")); err != nil {
		t.Fatalf("fast write not on the standby: %v", err)
	}
	close(ss.release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	pass()
	if _, err := s.Get(ctx, []byte("\x01slow")); err != nil {
		t.Errorf("slow write (smaller sequence, landed later) not on the standby after a pass: %v", err)
	}
}
