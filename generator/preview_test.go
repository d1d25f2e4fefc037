package generator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/smartfeed/smartfeed/zen"
)

// TestPreviewTakesNothingAndMatchesGenerate: a preview leaves the pools and the generator's
// state as they were, and the chunk GenerateChunk then composes is the one previewed, pin for
// pin and reason for reason; the per-source figures add up, and weak pins are reported deferred.
func TestPreviewTakesNothingAndMatchesGenerate(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Sources = map[string]SourceConfig{
				"following": {Rate: 0.6, Threshold: 0.5},
				"interest":  {Rate: 0.25},
				"related":   {Rate: 0.15},
			}
			e := newEnv(t, b.make, &cfg)
			var es []zen.PoolEntry
			for i := uint64(1); i <= 30; i++ {
				es = append(es, e.entry(t, zen.SourceFollowing, i, 0.5+float64(i)/100, i%7, i%5, time.Hour))
			}
			for i := uint64(31); i <= 35; i++ { // weak: under following's threshold
				es = append(es, e.entry(t, zen.SourceFollowing, i, 0.1, i, i, time.Hour))
			}
			for i := uint64(41); i <= 50; i++ {
				es = append(es, e.entry(t, zen.SourceInterest, i, float64(i)/100, i, i, time.Hour))
			}
			e.insert(t, es...)
			beforePools := e.pools.all(e.user)
			beforeState, _ := e.state.Scan(ctx, zen.ScanOptions{})

			p, err := e.gen.Preview(ctx, e.user, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(beforePools, e.pools.all(e.user)); diff != "" {
				t.Errorf("pools changed by a preview (-before +after):\n%s", diff)
			}
			afterState, _ := e.state.Scan(ctx, zen.ScanOptions{})
			if diff := cmp.Diff(beforeState, afterState); diff != "" {
				t.Errorf("generator state changed by a preview (-before +after):\n%s", diff)
			}
			if p.Chunk.ID != "" || p.Wanted != cfg.MaxChunk || len(p.Chunk.Items) == 0 || len(p.Chunk.Debug) == 0 {
				t.Fatalf("preview = id %q, wanted %d, %d items, %d lines; want no id, max_chunk wanted, items and lines",
					p.Chunk.ID, p.Wanted, len(p.Chunk.Items), len(p.Chunk.Debug))
			}
			chosen, deferred := 0, 0
			for _, s := range p.Sources {
				chosen += s.Chosen
				deferred += s.Deferred
				if s.Source == zen.SourceFollowing && (s.Threshold != 0.5 || s.Deferred != 5 || s.Rate != 0.6) {
					t.Errorf("following = %+v, want threshold 0.5, rate 0.6, 5 deferred", s)
				}
			}
			if chosen != len(p.Chunk.Items) || deferred != len(p.Deferred) || deferred != 5 {
				t.Errorf("sources chose %d and deferred %d; the chunk has %d items and %d deferred, want equal and 5 deferred",
					chosen, deferred, len(p.Chunk.Items), len(p.Deferred))
			}

			c, err := e.gen.GenerateChunk(ctx, e.user, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(p.Chunk.Items, c.Items); diff != "" {
				t.Errorf("GenerateChunk after the preview composed another chunk (-preview +generated):\n%s", diff)
			}
		})
	}
}

// TestPreviewRefusesBadInput: the same checks as GenerateChunk, as InvalidArgument.
func TestPreviewRefusesBadInput(t *testing.T) {
	e := newEnv(t, backends[0].make, nil)
	for _, tc := range []struct {
		name string
		user zen.ID
		max  int
	}{{"zero", 0, 0}, {"negative max", e.user, -1}, {"max over hard cap", e.user, HardMaxChunk + 1}} {
		if _, err := e.gen.Preview(context.Background(), tc.user, tc.max); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Preview = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}
