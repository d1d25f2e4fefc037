package worker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/smartfeed/smartfeed/internal/quiet"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestFanoutDeliveryTakesALane: a fanout delivery reads and scores its receivers in a
// background lane (Options.Lanes) and gives it back before its write. While every lane is
// taken the task waits and writes nothing; a task whose context ends first fails, writing
// nothing; once a lane is free it delivers, and no lane is held when the pools are written.
func TestFanoutDeliveryTakesALane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(t, zenmem.New(), Config{}, 3, nil)
		lanes := quiet.NewLanes(1)
		w.w.lanes = lanes
		var heldAtInsert []int
		w.w.OnInsert(func([]zen.PoolEntry) { heldAtInsert = append(heldAtInsert, lanes.InUse()) })
		if err := lanes.Acquire(ctx); err != nil { // other background work holds the only lane
			t.Fatal(err)
		}
		task := w.fanoutTask(t, 1)
		h := handler(t, w.q, task.Type())

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := h.ProcessTask(cctx, task); !errors.Is(err, context.Canceled) {
			t.Fatalf("fanout with its context ended while waiting for a lane = %v, want context.Canceled", err)
		}
		done := make(chan error, 1)
		go func() { done <- h.ProcessTask(ctx, task) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("fanout ran with every lane taken: %v", err)
		default:
		}
		if len(heldAtInsert) != 0 {
			t.Fatalf("%d pool writes while every lane was taken, want 0", len(heldAtInsert))
		}
		lanes.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(heldAtInsert) == 0 {
			t.Fatal("no pool write after the lane came free")
		}
		for i, n := range heldAtInsert {
			if n != 0 {
				t.Errorf("pool write %d with %d lanes held, want 0 (the lane is given back before the write)", i, n)
			}
		}
		got, err := w.w.Pools().Top(ctx, w.followers[0], zen.SourceFollowing, 10)
		if err != nil || len(got) != 1 || got[0].Pin != w.pins[1] {
			t.Fatalf("follower's pool = %v, %v; want pin 1", got, err)
		}
	})
}
