package shardwatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

const (
	mapA = `{"ranges": [{"from": 0, "to": 4095, "store": "default", "open": true}]}`
	mapB = `{"ranges": [{"from": 0, "to": 2047, "store": "default"}, {"from": 2048, "to": 4095, "store": "default", "open": true}]}`
)

// recorder is the setter: the maps it was handed, in order.
type recorder struct {
	mu   sync.Mutex
	maps []*zen.ShardMap
}

func (r *recorder) set(m *zen.ShardMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maps = append(r.maps, m)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.maps)
}

func newWatcher(t *testing.T) (*Watcher, *recorder, *prometheus.Registry) {
	t.Helper()
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	w, err := New(rec.set, Options{KnownStores: []string{"default"}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return w, rec, reg
}

func TestOfferAppliesGoodMapsAndKeepsTheOldOnBadOnes(t *testing.T) {
	w, rec, _ := newWatcher(t)
	for _, tc := range []struct {
		name, doc string
		wantErr   bool
		wantSets  int
	}{
		{"first map", mapA, false, 1},
		{"same bytes", mapA, false, 1},
		{"gap", `{"ranges": [{"from": 0, "to": 9, "store": "default", "open": true}, {"from": 11, "to": 4095, "store": "default"}]}`, true, 1},
		{"overlap", `{"ranges": [{"from": 0, "to": 10, "store": "default", "open": true}, {"from": 10, "to": 4095, "store": "default"}]}`, true, 1},
		{"unknown store", `{"ranges": [{"from": 0, "to": 4095, "store": "elsewhere", "open": true}]}`, true, 1},
		{"not json", `{"ranges": [`, true, 1},
		{"ends at 4094", `{"ranges": [{"from": 0, "to": 4094, "store": "default", "open": true}]}`, true, 1},
		{"ends at 4096", `{"ranges": [{"from": 0, "to": 4096, "store": "default", "open": true}]}`, true, 1},
		{"ends at 9000", `{"ranges": [{"from": 0, "to": 4095, "store": "default", "open": true}, {"from": 4096, "to": 9000, "store": "default"}]}`, true, 1},
		{"shards 0–100 only", `{"ranges": [{"from": 0, "to": 100, "store": "default", "open": true}]}`, true, 1},
		{"new map", mapB, false, 2},
	} {
		err := w.Offer("file", []byte(tc.doc))
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", tc.name, err, tc.wantErr)
		}
		if got := rec.count(); got != tc.wantSets {
			t.Errorf("%s: setter called %d times, want %d", tc.name, got, tc.wantSets)
		}
	}
	if got := testutil.ToFloat64(w.updates.WithLabelValues("file", "refused")); got != 8 {
		t.Errorf("refused counter = %v, want 8", got)
	}
	want, _ := zen.ParseShardMap([]byte(mapB))
	if !w.Current().Equal(want) {
		t.Errorf("current map %v, want map B", w.Current().Ranges())
	}
}

func TestWatchFileSwapsOnChange(t *testing.T) {
	w, rec, _ := newWatcher(t)
	p := filepath.Join(t.TempDir(), "shards.json")
	if err := os.WriteFile(p, []byte(mapA), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.LoadFile(p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = w.WatchFile(ctx, p, 5*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	if err := os.WriteFile(p, []byte(`{"ranges": [{"from": 5, "to": 4095, "store": "default", "open": true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The watcher counts the bad file refused once it has read it: then nothing was applied.
	for deadline := time.Now().Add(10 * time.Second); testutil.ToFloat64(w.updates.WithLabelValues("file", "refused")) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the bad file was not counted refused within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rec.count() != 1 {
		t.Fatalf("a bad file was applied (%d maps)", rec.count())
	}
	if err := os.WriteFile(p, []byte(mapB), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return rec.count() == 2 })
}

// TestWatchZooKeeper pushes maps through the real ZooKeeper of the test HBase.
func TestWatchZooKeeper(t *testing.T) {
	quorum := testenv.HBase(t)
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
	w, rec, _ := newWatcher(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = w.WatchZK(ctx, quorum, zpath); close(done) }()
	defer func() { cancel(); <-done }()

	a, _ := zen.ParseShardMap([]byte(mapA))
	if err := Publish(t.Context(), quorum, zpath, a); err != nil { // creates the znode: the watcher was waiting for it
		t.Fatal(err)
	}
	waitFor(t, func() bool { return rec.count() == 1 })
	// A bad map written by hand is refused; the map in use stays.
	conn, _, err := zk.Connect([]string{quorum}, 5*time.Second, zk.WithLogger(zapPrintf{log: w.log}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Set(zpath, []byte(`{"ranges": [{"from": 1, "to": 4095, "store": "default", "open": true}]}`), -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return testutil.ToFloat64(w.updates.WithLabelValues("zookeeper", "refused")) == 1 })
	if rec.count() != 1 || !w.Current().Equal(a) {
		t.Fatal("a refused map replaced the one in use")
	}
	b, _ := zen.ParseShardMap([]byte(mapB))
	if err := Publish(t.Context(), quorum, zpath, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return rec.count() == 2 })
	if !w.Current().Equal(b) {
		t.Errorf("current map %v, want map B", w.Current().Ranges())
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAcknowledgements: a publisher waits until every watching process has applied the version
// it wrote (here one process is slow to apply it: its setter blocks), and a process that refuses
// the map fails the wait.
func TestAcknowledgements(t *testing.T) {
	quorum := testenv.HBase(t)
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
	a, _ := zen.ParseShardMap([]byte(mapA))
	if err := Publish(t.Context(), quorum, zpath, a); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var slowMaps atomic.Int32
	slowSet := func(m *zen.ShardMap) {
		if slowMaps.Add(1) == 2 { // the second map (B) is applied only once released
			<-release
		}
	}
	fast := &recorder{}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, set := range []func(*zen.ShardMap){fast.set, slowSet} {
		w, err := New(set, Options{KnownStores: []string{"default"}, AckID: fmt.Sprint("p", i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = w.WatchZK(ctx, quorum, zpath) })
	}
	waitFor(t, func() bool { return fast.count() == 1 && slowMaps.Load() == 1 })
	// A process acknowledges after its setter returns, and WaitAcks knows only the processes
	// that have acknowledged something: wait until both acknowledgements of A are written, or
	// the wait for B below could pass over a process not yet registered.
	waitFor(t, func() bool {
		n, err := WaitAcks(t.Context(), quorum, zpath, 0)
		return err == nil && n == 2
	})
	b, _ := zen.ParseShardMap([]byte(mapB))
	v, err := PublishVersion(t.Context(), quorum, zpath, b)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	if _, err := WaitAcks(wctx, quorum, zpath, v); err == nil {
		t.Error("WaitAcks returned while a process had not applied the map")
	}
	wcancel()
	close(release)
	wctx, wcancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	n, err := WaitAcks(wctx, quorum, zpath, v)
	if err != nil || n != 2 {
		t.Fatalf("WaitAcks after both applied = %d, %v; want 2", n, err)
	}
	// A map naming a store the processes do not know is refused: the wait fails.
	bad, _ := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 4095, Store: "elsewhere", Open: true}})
	v, err = PublishVersion(t.Context(), quorum, zpath, bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WaitAcks(wctx, quorum, zpath, v); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("WaitAcks of a refused map: %v", err)
	}
}

// TestLeaseFollowsTheZnode: a watcher with a lease extends it once it has applied and
// acknowledged the znode's version, lets it lapse while a newer version is not applied yet (its
// setter blocks, as a stalled process would), and extends it again once it is.
func TestLeaseFollowsTheZnode(t *testing.T) {
	quorum := testenv.HBase(t)
	zpath := fmt.Sprintf("/smartfeed-test/%d/shardmap", time.Now().UnixNano())
	a, _ := zen.ParseShardMap([]byte(mapA))
	if err := Publish(t.Context(), quorum, zpath, a); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var sets atomic.Int32
	set := func(*zen.ShardMap) {
		if sets.Add(1) == 2 {
			<-release
		}
	}
	lease := zenroute.NewLease()
	w, err := New(set, Options{KnownStores: []string{"default"}, AckID: "p0", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = w.WatchZK(ctx, quorum, zpath); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, lease.Valid)
	b, _ := zen.ParseShardMap([]byte(mapB))
	if err := Publish(t.Context(), quorum, zpath, b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return sets.Load() == 2 })
	waitFor(t, func() bool { return !lease.Valid() }) // within half the session timeout
	close(release)
	waitFor(t, lease.Valid)
	// The acknowledgement names the stores the process knows, and CheckPeers refuses a map
	// naming another.
	c, _ := zen.NewShardMap([]zen.ShardRange{{From: 0, To: 4095, Store: "cold", Open: true}})
	if err := CheckPeers(t.Context(), quorum, zpath, c); err == nil || !strings.Contains(err.Error(), `process p0 would refuse it`) ||
		!strings.Contains(err.Error(), `unknown store "cold"`) {
		t.Errorf("CheckPeers of a map naming a store the process does not know: %v", err)
	}
	if err := CheckPeers(t.Context(), quorum, zpath, b); err != nil {
		t.Errorf("CheckPeers of a map the process knows: %v", err)
	}
}
