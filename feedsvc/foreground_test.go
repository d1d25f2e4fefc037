package feedsvc

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// countingForeground is a Foreground that counts the requests in flight.
type countingForeground struct{ inFlight, begun atomic.Int64 }

func (f *countingForeground) Begin() func() {
	f.begun.Add(1)
	f.inFlight.Add(1)
	return func() { f.inFlight.Add(-1) }
}

// watchingGen records how many requests were in flight when the generator ran.
type watchingGen struct {
	*fakeGen
	fg     *countingForeground
	during atomic.Int64
}

func (g *watchingGen) GenerateChunk(ctx context.Context, user zen.ID) (Chunk, error) {
	g.during.Store(g.fg.inFlight.Load())
	return g.fakeGen.GenerateChunk(ctx, user)
}

// TestGetFeedTellsForeground checks that a GetFeed is in flight (for the process's background
// work to yield to) while it generates its chunk, and not after it answered, refusals included.
func TestGetFeedTellsForeground(t *testing.T) {
	ctx := context.Background()
	pt, _ := zenmem.New().Table(ctx, "feed")
	st, _ := zenmem.New().Table(ctx, "feed")
	fg := &countingForeground{}
	gen := &watchingGen{fakeGen: newFakeGen(3), fg: fg}
	svc, err := New(Deps{Primary: pt, Standby: st, Generator: gen, Enqueuer: &fakeQueue{}, Foreground: fg}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Wait)
	user := userID(t, 1)
	p, err := svc.GetFeed(ctx, Request{User: user, PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if p.FreshStatus != FreshIncluded || len(p.Items) != 3 {
		t.Fatalf("first page: %q with %d items, want included with 3", p.FreshStatus, len(p.Items))
	}
	if n := gen.during.Load(); n != 1 {
		t.Errorf("%d requests in flight while the generator ran, want 1", n)
	}
	if _, err := svc.GetFeed(ctx, Request{User: user, PageSize: 100000}); err == nil {
		t.Fatal("a page of 100,000 was accepted")
	}
	if n, b := fg.inFlight.Load(), fg.begun.Load(); n != 0 || b != 2 {
		t.Errorf("after two GetFeeds: %d in flight, %d begun; want 0 and 2", n, b)
	}
}
