package feedsvc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
	"github.com/smartfeed/smartfeed/zen/zentest"
)

// lagOf is a Lagger with a fixed staleness.
type lagOf time.Duration

func (l lagOf) Staleness() time.Duration { return time.Duration(l) }

// TestForwardsExtensions: the feed's table wrappers, the Replicator over the primary and the
// StalenessGate over the standby, keep every optional extension of the table they wrap.
func TestForwardsExtensions(t *testing.T) {
	base := func(t *testing.T) zen.Table {
		tb, err := zenmem.New().Table(t.Context(), "feed")
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	t.Run("Replicator", func(t *testing.T) {
		zentest.RunForwarding(t, base(t), func(inner zen.Table) zen.Table {
			r, err := NewReplicator(inner, base(t), ReplicatorOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r
		})
	})
	t.Run("StalenessGate", func(t *testing.T) {
		zentest.RunForwarding(t, base(t), func(inner zen.Table) zen.Table {
			g, err := NewStalenessGate(inner, lagOf(0), time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			return g
		})
	})
}

// TestReplicatorBatchesReplicate: the rows written by the Replicator's CheckAndSetMany reach the
// standby, and ScanMany leaves the change-log rows out, as Scan does.
func TestReplicatorBatchesReplicate(t *testing.T) {
	ctx := t.Context()
	primary, standby := zenmem.New(), zenmem.New()
	pt, _ := primary.Table(ctx, "feed")
	st, _ := standby.Table(ctx, "feed")
	r, err := NewReplicator(pt, st, ReplicatorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	oks, err := r.CheckAndSetMany(ctx, []zen.Cond{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")},
		{Key: []byte("a"), Value: []byte("lost")}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]bool{true, true, false}, oks); d != "" {
		t.Errorf("CheckAndSetMany results (-want +got):\n%s", d)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "1", "b": "2"} {
		if v, err := st.Get(ctx, []byte(k)); err != nil || string(v) != want {
			t.Errorf("standby %s = %q, %v; want %q", k, v, err, want)
		}
	}
	lists, err := r.ScanMany(ctx, []zen.ScanOptions{{}, {Start: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, rows := range lists {
		var keys []string
		for _, kv := range rows {
			keys = append(keys, string(kv.Key))
		}
		got = append(got, keys)
	}
	if d := cmp.Diff([][]string{{"a", "b"}, {"b"}}, got); d != "" {
		t.Errorf("ScanMany keys (-want +got):\n%s", d)
	}
	if _, err := r.CheckAndSetMany(ctx, []zen.Cond{{Key: []byte("c"), Value: []byte("3")}, {Key: logKey(1), Value: []byte("x")}}); err == nil {
		t.Error("CheckAndSetMany with a change-log key: no error")
	}
	if _, err := pt.Get(ctx, []byte("c")); !errors.Is(err, zen.ErrNotFound) {
		t.Errorf("a refused CheckAndSetMany wrote c: %v", err)
	}
}
