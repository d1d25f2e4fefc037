package genclient

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	generatorv1 "github.com/smartfeed/smartfeed/proto/generator/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// fakeGen answers CheckPins: pin 3 is deleted, and its calls' sizes are recorded.
type fakeGen struct {
	generatorv1.GeneratorServiceClient
	sizes []int
}

func (f *fakeGen) CheckPins(_ context.Context, req *generatorv1.CheckPinsRequest, _ ...grpc.CallOption) (*generatorv1.CheckPinsResponse, error) {
	f.sizes = append(f.sizes, len(req.GetItems()))
	resp := &generatorv1.CheckPinsResponse{}
	for _, it := range req.GetItems() {
		if it.GetPin() == 3 {
			resp.Deleted = append(resp.Deleted, 3)
		}
	}
	return resp, nil
}

// TestLiveBatches: Live asks about each distinct pin once, in calls of at most the batch.
func TestLiveBatches(t *testing.T) {
	f := &fakeGen{}
	live, err := New(f, 2).Live(t.Context(), []zen.ID{1, 2, 3, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[zen.ID]bool{1: true, 2: true, 3: false, 4: true, 5: true}, live); diff != "" {
		t.Errorf("Live (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{2, 2, 1}, f.sizes); diff != "" {
		t.Errorf("CheckPins call sizes (-want +got):\n%s", diff)
	}
}
