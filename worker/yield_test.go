package worker

import (
	"context"
	"testing"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// recordingYielder counts Yield calls and, at each, how many pool entries the followers had,
// so the test can tell the yield came before the write it guards.
type recordingYielder struct {
	w      *world
	t      *testing.T
	before []int
}

func (y *recordingYielder) Yield(ctx context.Context) {
	n := 0
	for _, f := range y.w.followers {
		es, err := y.w.w.Pools().Top(ctx, f, zen.SourceFollowing, 100)
		if err != nil {
			y.t.Fatal(err)
		}
		n += len(es)
	}
	y.before = append(y.before, n)
}

// TestInsertYieldsFirst checks that the fanout asks its Yielder (admission.Gate in a process
// that also serves GetFeed) before each pool insert, not after it or never.
func TestInsertYieldsFirst(t *testing.T) {
	w := newWorld(t, zenmem.New(), Config{ChunkSize: 3, TrimEvery: 1}, 5, nil)
	y := &recordingYielder{w: w, t: t}
	w.w.yield = y
	if err := handler(t, w.q, pinlater.TypeFanout).ProcessTask(context.Background(), w.fanoutTask(t, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.q.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(y.before) == 0 {
		t.Fatal("the fanout inserted without yielding")
	}
	if y.before[0] != 0 {
		t.Errorf("first yield saw %d pool entries: it came after an insert", y.before[0])
	}
	total := 0
	for _, f := range w.followers[:5] {
		es, err := w.w.Pools().Top(context.Background(), f, zen.SourceFollowing, 100)
		if err != nil {
			t.Fatal(err)
		}
		total += len(es)
	}
	if total != 5 {
		t.Errorf("%d of alice's 5 followers got the pin", total)
	}
}
