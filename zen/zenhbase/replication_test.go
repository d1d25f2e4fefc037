package zenhbase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/smartfeed/smartfeed/internal/testenv"
	"github.com/smartfeed/smartfeed/zen"
)

// TestNativeReplication checks HBase's own replication between the two test clusters that
// `make test` starts (scripts/hbase.sh replicate): rows written through zen on a Replicated
// primary table reach the same table on the standby, deletes too, and the lag stays within a
// few seconds (it is reported: the seeds' figure is a few hundred milliseconds).
func TestNativeReplication(t *testing.T) {
	pzk, szk := testenv.HBaseStandby(t)
	prefix := fmt.Sprintf("zr%d_", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	open := func(zk string, replicated bool) *Store {
		s, err := Open(ctx, zk, Options{TablePrefix: prefix, FlushInterval: 2 * time.Millisecond,
			CreateTimeout: 45 * time.Second, Replicated: replicated})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	// The sink needs the table before the first edit ships: create it on the standby first.
	standby, primary := open(szk, false), open(pzk, true)
	st, err := standby.Table(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	pt, err := primary.Table(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = primary.Drop(c, "feed")
		_ = standby.Drop(c, "feed")
	})

	// waitFor polls the standby until get(key) satisfies ok, and returns how long it took.
	waitFor := func(key []byte, ok func([]byte, error) bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		for time.Since(t0) < 30*time.Second {
			v, err := st.Get(ctx, key)
			if ok(v, err) {
				return time.Since(t0)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("row %x did not reach the standby in 30s", key)
		return 0
	}
	var lags []time.Duration
	for i := range 20 {
		// Rows on different pre-split regions (shards 0, 300, 600, …).
		key := rowKey(t, uint16(i*300%4096), uint64(i+1))
		val := []byte(fmt.Sprintf("v%d", i))
		if err := pt.Apply(ctx, []zen.Mutation{{Key: key, Value: val}}); err != nil {
			t.Fatal(err)
		}
		lags = append(lags, waitFor(key, func(v []byte, err error) bool { return err == nil && string(v) == string(val) }))
		if i%5 == 4 { // deletes replicate as well
			if err := pt.Apply(ctx, []zen.Mutation{{Key: key, Delete: true}}); err != nil {
				t.Fatal(err)
			}
			waitFor(key, func(_ []byte, err error) bool { return errors.Is(err, zen.ErrNotFound) })
		}
	}
	slices.Sort(lags)
	t.Logf("replication lag over %d single-row writes: p50 %v, max %v", len(lags), lags[len(lags)/2], lags[len(lags)-1])
	if lags[len(lags)/2] > 5*time.Second {
		t.Errorf("median replication lag %v: want well under 5s", lags[len(lags)/2])
	}
	// A table that is not Replicated stays put on the primary.
	local := open(pzk, false)
	lt, err := local.Table(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := standby.Table(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = local.Drop(c, "local")
		_ = standby.Drop(c, "local")
	})
	key := rowKey(t, 1, 1)
	if err := lt.Apply(ctx, []zen.Mutation{{Key: key, Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	// A replicated write after it, on the same region server, shows the WAL has shipped past it.
	marker := rowKey(t, 2, 1)
	if err := pt.Apply(ctx, []zen.Mutation{{Key: marker, Value: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(marker, func(v []byte, err error) bool { return err == nil })
	if _, err := sl.Get(ctx, key); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("a row of a scope-0 table reached the standby (err %v)", err)
	}
}

// rowKey is the 8-byte big-endian pin ID (shard, local): rows spread over the pre-split regions.
func rowKey(t *testing.T, shard uint16, local uint64) []byte {
	t.Helper()
	id, err := zen.NewID(shard, zen.TypePin, local)
	if err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.AppendUint64(nil, uint64(id))
}
