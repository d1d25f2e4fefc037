package zentest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// RunBulkSink is the acceptance test of a backend's zen.BulkSink: one graph is loaded through
// the tables' writes and another through the sink (sink(t, s) for the store s open made), from
// the same records, with a small batch so that keys come several times. Every table must then
// hold the same rows in both (point rows' random nonces aside), the row a key got last winning;
// the graph API must read the loaded objects and counts; and the same sink must take a second
// load after the first. after, if not nil, runs after the first load for the backend's own
// checks.
func RunBulkSink(t *testing.T, open func(t *testing.T) zen.Store, sink func(t *testing.T, s zen.Store) zen.BulkSink, after func(t *testing.T)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	viaApply, viaBulk := open(t), open(t)
	loadBulkGraph(ctx, t, viaApply)
	sk := sink(t, viaBulk)
	g := loadBulkGraph(ctx, t, viaBulk, zen.WithBulkSink(sk))
	if after != nil {
		after(t)
	}
	for _, name := range []string{zen.TableObjects, zen.TableEdges, zen.TableCounters, zen.TableModShard} {
		want, got := scanTable(ctx, t, viaApply, name), scanTable(ctx, t, viaBulk, name)
		if name == zen.TableEdges {
			// An edge's point row holds a random nonce (bytes 1 to 8), drawn anew by each load.
			maskNonces(want)
			maskNonces(got)
		}
		if len(want) == 0 {
			t.Fatalf("%s: nothing written through Apply", name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: bulk-loaded rows differ from applied ones (-apply +bulk):\n%s", name, diff)
		}
	}
	obj, err := g.Get(ctx, bulkUser(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	if obj.Data["bio"] != "again" {
		t.Errorf("user 0 after the load: %v, want the last row written (bio again)", obj.Data)
	}
	if n, err := g.CountEdges(ctx, bulkUser(t, 0), zen.EdgeFollowsUser); err != nil || n != 5 {
		t.Errorf("CountEdges = %d, %v; want 5", n, err)
	}

	// The sink takes a second load after the first; its rows win over the first's.
	b := g.NewBulk(50, zen.WithBulkSink(sk))
	if err := b.PutObject(ctx, bulkUser(t, 1), map[string]any{"username": "u1", "bio": "second"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("a second commit of the sink: %v", err)
	}
	if obj, err := g.Get(ctx, bulkUser(t, 1)); err != nil || obj.Data["bio"] != "second" {
		t.Errorf("user 1 after a second load: %v, %v; want bio second", obj.Data, err)
	}
}

// bulkUser is the ID of RunBulkSink's user i.
func bulkUser(t *testing.T, i int) zen.ID {
	t.Helper()
	id, err := zen.NewID(uint16(i%40), zen.TypeUser, uint64(1000+i))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// loadBulkGraph loads RunBulkSink's graph into s with a Bulk of batch 50: 300 users with a
// username each, the first user's object twice (the later one wins), five follows each, counted.
func loadBulkGraph(ctx context.Context, t *testing.T, s zen.Store, opts ...zen.BulkOption) *zen.Graph {
	t.Helper()
	g, err := zen.NewGraph(ctx, s, nil, func() time.Time { return time.UnixMilli(1_700_000_000_000) })
	if err != nil {
		t.Fatal(err)
	}
	g.SeedShards(7)
	b := g.NewBulk(50, opts...)
	users := make([]zen.ID, 300)
	for i := range users {
		users[i] = bulkUser(t, i)
		if err := b.PutObject(ctx, users[i], map[string]any{"username": fmt.Sprintf("u%d", i)}); err != nil {
			t.Fatal(err)
		}
		if err := b.MapKey(ctx, "username", fmt.Sprintf("u%d", i), users[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutObject(ctx, users[0], map[string]any{"username": "u0", "bio": "again"}); err != nil {
		t.Fatal(err)
	}
	for i, from := range users {
		for j := 1; j <= 5; j++ {
			to := users[(i+j*7)%len(users)]
			if err := b.AddEdge(ctx, zen.Edge{From: from, Type: zen.EdgeFollowsUser, To: to, Seq: seq.FromMillis(int64(i*10 + j))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.SetCount(ctx, from, zen.EdgeFollowsUser, 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

// maskNonces zeroes bytes 1 to 8 of every value long enough to hold a point row's nonce.
func maskNonces(rows []zen.KV) {
	for _, r := range rows {
		if len(r.Value) >= 9 {
			clear(r.Value[1:9])
		}
	}
}

// scanTable reads every row of the store's table name.
func scanTable(ctx context.Context, t *testing.T, s zen.Store, name string) []zen.KV {
	t.Helper()
	tb, err := s.Table(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tb.Scan(ctx, zen.ScanOptions{Start: []byte{0}, Stop: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
