package main

import (
	"testing"

	boardv1 "github.com/smartfeed/smartfeed/proto/board/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
)

// TestListPinsDropsADeletedPin: once DeletePin returned, BoardService.ListPins neither lists
// nor counts the pin (GetObjects already says it is gone).
func TestListPinsDropsADeletedPin(t *testing.T) {
	_, conn := startAll(t)
	ctx := t.Context()
	g, b := graphv1.NewGraphServiceClient(conn), boardv1.NewBoardServiceClient(conn)
	u, err := g.CreateUser(ctx, &graphv1.CreateUserRequest{Username: "deleter", Email: "deleter@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	bd, err := g.CreateBoard(ctx, &graphv1.CreateBoardRequest{OwnerId: u.Id, Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	var pins []uint64
	for _, img := range []string{"https://i.example.com/1.jpg", "https://i.example.com/2.jpg"} {
		p, err := g.CreatePin(ctx, &graphv1.CreatePinRequest{AuthorId: u.Id, BoardId: bd.Id, ImageUrl: img})
		if err != nil {
			t.Fatal(err)
		}
		pins = append(pins, p.Id)
	}
	if _, err := g.DeletePin(ctx, &graphv1.DeletePinRequest{UserId: u.Id, PinId: pins[0]}); err != nil {
		t.Fatal(err)
	}
	resp, err := b.ListPins(ctx, &boardv1.ListPinsRequest{BoardId: bd.Id})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, p := range resp.GetPins() {
		got = append(got, p.GetPinId())
	}
	if len(got) != 1 || got[0] != pins[1] || resp.GetCount() != 1 {
		t.Errorf("ListPins after DeletePin = %v, count %d; want only %d, count 1", got, resp.GetCount(), pins[1])
	}
}
