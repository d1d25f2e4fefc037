package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/smartfeed/smartfeed/internal/testenv"
	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// TestSplitIncludeObjects: a feed process whose generator (and graph) is another process serves
// include_objects with the objects of that process's graph, the same ones GraphService answers;
// with the generator process down it still serves the page, without objects and flagged
// objects_unavailable, instead of failing it.
func TestSplitIncludeObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("split processes: builds the binary and runs four processes; skipped with -short")
	}
	t.Parallel() // it mostly waits on timers and processes: it runs beside another such test
	redis, ns := testenv.RedisNamespace(t, "splitobj")
	s := newSplit(t, redis, ns, testenv.HBase(t))
	ada, bob := s.user("ada"), s.user("bob")
	s.follow(bob, ada)
	pin := s.pin(ada, s.board(ada), "shelves")
	s.drain()

	want, err := s.graph().GetObjects(s.ctx, &graphv1.GetObjectsRequest{Ids: []uint64{uint64(pin), uint64(ada)}})
	s.must(err)
	if len(want.GetObjects()) != 2 {
		t.Fatalf("GraphService.GetObjects(pin, author) = %v, want both", want)
	}
	get := func() *feedv1.GetFeedResponse {
		t.Helper()
		r, err := s.feedClient().GetFeed(s.ctx, &feedv1.GetFeedRequest{UserId: uint64(bob), IncludeObjects: true})
		if err != nil {
			t.Fatalf("GetFeed with include_objects on the feed process: %v", err)
		}
		return r
	}
	page := get()
	if len(page.GetItems()) != 1 || zen.ID(page.GetItems()[0].GetPinId()) != pin {
		t.Fatalf("bob's first page: %v, want the pin %s", page.GetItems(), pin)
	}
	it := page.GetItems()[0]
	if d := cmp.Diff(want.GetObjects()[0].GetPin(), it.GetPin(), protocmp.Transform()); d != "" {
		t.Errorf("item's pin (-GraphService.GetObjects +GetFeed):\n%s", d)
	}
	if d := cmp.Diff(want.GetObjects()[1].GetUser(), it.GetAuthor(), protocmp.Transform()); d != "" {
		t.Errorf("item's author (-GraphService.GetObjects +GetFeed):\n%s", d)
	}
	if page.GetObjectsUnavailable() {
		t.Errorf("page with its objects flagged objects_unavailable (%q)", page.GetObjectsDetail())
	}
	s.settle(bob)

	// The generator process down: the materialized page, without objects, flagged.
	s.gen.kill()
	start := time.Now()
	page = get()
	if len(page.GetItems()) != 1 || page.GetItems()[0].GetPin() != nil || page.GetItems()[0].GetAuthor() != nil {
		t.Errorf("page with the generator process down: %v, want the pin without objects", page.GetItems())
	}
	if !page.GetObjectsUnavailable() || page.GetObjectsDetail() == "" {
		t.Errorf("page without objects: objects_unavailable %v, detail %q; want set, with why",
			page.GetObjectsUnavailable(), page.GetObjectsDetail())
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("page with the generator process down took %v", took)
	}
}
