package main

import (
	"context"
	"testing"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenpebble"
)

// BenchmarkCandidateLiveness compares the two liveness checks the generator can be wired to, on
// Pebble, for one chunk's 100 candidates of 2,000 pins, 20 of them deleted: a read of every
// pin's object (graphLiveness) and the deletion log's set (setLiveness, one point read of the
// log per check). Both must agree on which pins are live.
func BenchmarkCandidateLiveness(b *testing.B) {
	ctx := context.Background()
	s, err := zenpebble.Open(b.TempDir(), zenpebble.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	g, err := zen.NewGraph(ctx, s, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	pins := make([]zen.ID, 2000)
	for i := range pins {
		o, err := g.Create(ctx, zen.TypePin, 0, map[string]any{"n": i})
		if err != nil {
			b.Fatal(err)
		}
		pins[i] = o.ID
	}
	for i := 0; i < 2000; i += 100 {
		if err := g.Delete(ctx, pins[i]); err != nil {
			b.Fatal(err)
		}
	}
	cand := pins[:100]
	set := newSetLiveness(feedsvc.NewDeletedSet(g), g)
	want, err := graphLiveness{g}.Live(ctx, cand)
	if err != nil {
		b.Fatal(err)
	}
	got, err := set.Live(ctx, cand)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range cand {
		if want[p] != got[p] {
			b.Fatalf("pin %d: objects say live=%v, the deletion log's set %v", p, want[p], got[p])
		}
	}
	for _, bc := range []struct {
		name string
		live interface {
			Live(context.Context, []zen.ID) (map[zen.ID]bool, error)
		}
	}{{"objects", graphLiveness{g}}, {"deletion_log_set", set}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.live.Live(ctx, cand); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
