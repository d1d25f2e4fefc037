package pinlatertest

import (
	"context"
	"errors"
	"testing"

	"github.com/smartfeed/smartfeed/pinlater"
)

func TestRecorder(t *testing.T) {
	var r Recorder
	ctx := context.Background()
	fan, _ := pinlater.NewFanout(pinlater.FanoutPayload{Pin: 1, Author: 2, Board: 3, CreatedMs: 1})
	for range 2 {
		if _, err := r.Enqueue(ctx, fan); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.Tasks()); n != 1 {
		t.Fatalf("recorded %d fanout tasks, want 1 (deduplicated)", n)
	}
	var chunks int
	handlers := map[string]pinlater.Handler{
		pinlater.TypeFanout: pinlater.Typed(func(ctx context.Context, p pinlater.FanoutPayload) error {
			for i := range 3 {
				c, err := pinlater.NewFanoutChunk(pinlater.FanoutChunkPayload{Pin: p.Pin, Author: p.Author, Board: p.Board,
					CreatedMs: p.CreatedMs, Source: 1, ListFrom: p.Author, EdgeType: 11, Cursor: string(rune('a' + i)), Limit: 10})
				if err != nil {
					return err
				}
				if _, err := r.Enqueue(ctx, c); err != nil {
					return err
				}
			}
			return nil
		}),
		pinlater.TypeFanoutChunk: pinlater.Typed(func(ctx context.Context, p pinlater.FanoutChunkPayload) error {
			chunks++
			return nil
		}),
	}
	if err := r.Run(ctx, handlers); err != nil {
		t.Fatal(err)
	}
	if chunks != 3 || len(r.OfType(pinlater.TypeFanoutChunk)) != 3 {
		t.Fatalf("chunks run %d, recorded %d; want 3", chunks, len(r.OfType(pinlater.TypeFanoutChunk)))
	}
	// After the run the fanout's ID is free again.
	if info, err := r.Enqueue(ctx, fan); err != nil || info.Duplicate {
		t.Fatalf("re-enqueue after run: %+v, %v", info, err)
	}
	r.Err = errors.New("redis down")
	if _, err := r.Enqueue(ctx, fan); err == nil {
		t.Fatal("Err not returned")
	}
	if err := r.Run(ctx, nil); err == nil {
		t.Fatal("Run without handlers succeeded")
	}
}
