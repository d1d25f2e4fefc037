package feedsvc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// lookupFunc is an ObjectLookup from a function.
type lookupFunc func(ctx context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error)

func (f lookupFunc) Objects(ctx context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error) {
	return f(ctx, ids)
}

// TestIncludeObjectsDegrades: include_objects attaches each item's pin from one lookup; when
// the lookup fails or passes its deadline the page is still served, with IDs only, flagged
// objects_unavailable with a reason, and counted.
func TestIncludeObjectsDegrades(t *testing.T) {
	pins := func(_ context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error) {
		out := map[zen.ID]*graphv1.Object{}
		for _, id := range ids {
			if id.Type() == zen.TypePin {
				out[id] = &graphv1.Object{Kind: &graphv1.Object_Pin{Pin: &graphv1.Pin{Id: uint64(id)}}}
			}
		}
		return out, nil
	}
	for _, tc := range []struct {
		name            string
		lookup          lookupFunc
		wantUnavailable bool
	}{
		{"read", pins, false},
		{"lookup fails", func(context.Context, []zen.ID) (map[zen.ID]*graphv1.Object, error) {
			return nil, errors.New("graph unreachable")
		}, true},
		{"lookup passes its deadline", func(ctx context.Context, _ []zen.ID) (map[zen.ID]*graphv1.Object, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			po, err := newPageObjects(tc.lookup, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			po.timeout = 50 * time.Millisecond
			g := &GRPCServer{svc: e.svc, objects: po}
			resp, err := g.GetFeed(t.Context(), &feedv1.GetFeedRequest{UserId: uint64(e.user), PageSize: 3, IncludeObjects: true})
			if err != nil {
				t.Fatalf("GetFeed with include_objects: %v, want the page", err)
			}
			if len(resp.GetItems()) != 3 {
				t.Fatalf("page: %d items, want 3", len(resp.GetItems()))
			}
			if resp.GetObjectsUnavailable() != tc.wantUnavailable || (resp.GetObjectsDetail() != "") != tc.wantUnavailable {
				t.Errorf("objects_unavailable %v, detail %q; want unavailable %v (with a detail then)",
					resp.GetObjectsUnavailable(), resp.GetObjectsDetail(), tc.wantUnavailable)
			}
			for i, it := range resp.GetItems() {
				if got, want := it.GetPin() != nil, !tc.wantUnavailable; got != want {
					t.Errorf("item %d carries a pin: %v, want %v", i, got, want)
				}
			}
			want := 0.0
			if tc.wantUnavailable {
				want = 1
			}
			if got := testutil.ToFloat64(po.unavailable); got != want {
				t.Errorf("smartfeed_feed_objects_unavailable_total = %v, want %v", got, want)
			}
		})
	}
}
