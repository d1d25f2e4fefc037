package feedsvc

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// recordedPages is an Impressions that keeps the pages it is handed.
type recordedPages []ServedPage

func (r *recordedPages) Served(_ context.Context, p ServedPage) { *r = append(*r, p) }

// TestGetFeedHandsServedPageToImpressions: the gRPC GetFeed hands each answered page to the
// impression log, with the user, the cursor asked and the items in the order served; an
// error page is not handed over.
func TestGetFeedHandsServedPageToImpressions(t *testing.T) {
	e := newEnv(t, nil)
	var got recordedPages
	g := &GRPCServer{svc: e.svc}
	WithImpressions(&got)(g)
	resp, err := g.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserId: uint64(e.user), PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d pages handed to the impression log, want 1", len(got))
	}
	var served, logged []zen.ID
	for _, it := range resp.GetItems() {
		served = append(served, zen.ID(it.GetPinId()))
	}
	for _, it := range got[0].Items {
		logged = append(logged, it.Pin)
	}
	if diff := cmp.Diff(served, logged); diff != "" || got[0].User != e.user || got[0].Cursor != "" {
		t.Errorf("page handed over: user %d cursor %q, pins (-served +logged):\n%s", got[0].User, got[0].Cursor, diff)
	}
	if _, err := g.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserId: uint64(e.user), PageSize: 100000}); err == nil {
		t.Fatal("a page size over the maximum was served")
	}
	if len(got) != 1 {
		t.Errorf("a refused request was handed to the impression log: %d pages", len(got))
	}
}
