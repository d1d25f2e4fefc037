package generator

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// fakeEligibility names the pins whose follow is gone for the user it was given; err fails
// every call.
type fakeEligibility struct {
	user    zen.ID
	removed map[zen.ID]bool
	err     error
}

func (f *fakeEligibility) Unfollowed(_ context.Context, user zen.ID, items []Item) (map[zen.ID]bool, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := map[zen.ID]bool{}
	for _, it := range items {
		if user == f.user && f.removed[it.Pin] {
			out[it.Pin] = true
		}
	}
	return out, nil
}

// CheckPins names the deleted pins, and the unfollowed ones when a user is named, each once in
// the request's order; it refuses bad input and, without the graph hooks or with a failing
// one, fails rather than saying nothing was removed.
func TestCheckPins(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t, backends[1].make, nil)
	p := func(n uint64) uint64 { return uint64(pinID(t, n)) }
	live := &fakeLiveness{deleted: map[zen.ID]bool{pinID(t, 2): true}}
	elig := &fakeEligibility{user: e.user, removed: map[zen.ID]bool{pinID(t, 3): true, pinID(t, 4): true}}
	mk := func(l Liveness, el Eligibility) generatorv1.GeneratorServiceClient {
		g, err := New(Params{Pools: e.pools, State: e.state, Now: e.clk.Now, Liveness: l, Eligibility: el})
		if err != nil {
			t.Fatal(err)
		}
		return newGRPC(t, &env{gen: g})
	}
	cl := mk(live, elig)
	items := []*generatorv1.Item{
		{Pin: p(1), Source: generatorv1.Source_SOURCE_FOLLOWING, Author: uint64(authorID(t, 1))},
		{Pin: p(4), Source: generatorv1.Source_SOURCE_INTEREST},
		{Pin: p(2), Source: generatorv1.Source_SOURCE_FOLLOWING},
		{Pin: p(3), Source: generatorv1.Source_SOURCE_FOLLOWING, Board: uint64(boardID(t, 1))},
		{Pin: p(4), Source: generatorv1.Source_SOURCE_INTEREST},
	}
	for _, tc := range []struct {
		name string
		req  *generatorv1.CheckPinsRequest
		want *generatorv1.CheckPinsResponse
	}{
		{"user", &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: items},
			&generatorv1.CheckPinsResponse{Deleted: []uint64{p(2)}, Unfollowed: []uint64{p(4), p(3)}}},
		{"user_str", &generatorv1.CheckPinsRequest{UserStr: e.user.String(), Items: items},
			&generatorv1.CheckPinsResponse{Deleted: []uint64{p(2)}, Unfollowed: []uint64{p(4), p(3)}}},
		{"deletions only", &generatorv1.CheckPinsRequest{Items: items},
			&generatorv1.CheckPinsResponse{Deleted: []uint64{p(2)}}},
		{"nothing asked", &generatorv1.CheckPinsRequest{User: uint64(e.user)}, &generatorv1.CheckPinsResponse{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cl.CheckPins(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want.GetDeleted(), got.GetDeleted()); diff != "" {
				t.Errorf("deleted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.GetUnfollowed(), got.GetUnfollowed()); diff != "" {
				t.Errorf("unfollowed (-want +got):\n%s", diff)
			}
		})
	}

	board, _ := zen.NewID(3, zen.TypeBoard, 1)
	tooMany := make([]*generatorv1.Item, MaxCheckPins+1)
	for i := range tooMany {
		tooMany[i] = &generatorv1.Item{Pin: p(uint64(i + 1))}
	}
	for _, tc := range []struct {
		name string
		cl   generatorv1.GeneratorServiceClient
		req  *generatorv1.CheckPinsRequest
		want codes.Code
	}{
		{"user not a user", cl, &generatorv1.CheckPinsRequest{User: uint64(board), Items: items}, codes.InvalidArgument},
		{"user_str not a number", cl, &generatorv1.CheckPinsRequest{UserStr: "x", Items: items}, codes.InvalidArgument},
		{"pin not a pin", cl, &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: []*generatorv1.Item{{Pin: uint64(board)}}}, codes.InvalidArgument},
		{"too many items", cl, &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: tooMany}, codes.InvalidArgument},
		{"no graph hooks", mk(nil, nil), &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: items}, codes.FailedPrecondition},
		{"no eligibility hook", mk(live, nil), &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: items}, codes.FailedPrecondition},
		{"liveness fails", mk(&fakeLiveness{err: errors.New("graph down")}, elig), &generatorv1.CheckPinsRequest{Items: items}, codes.Unavailable},
		{"eligibility fails", mk(live, &fakeEligibility{err: errors.New("graph down")}), &generatorv1.CheckPinsRequest{User: uint64(e.user), Items: items}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cl.CheckPins(ctx, tc.req)
			if status.Code(err) != tc.want {
				t.Errorf("CheckPins: %v, %v; want code %v", got, err, tc.want)
			}
		})
	}
}
