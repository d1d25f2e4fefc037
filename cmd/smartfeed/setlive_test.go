package main

import (
	"context"
	"testing"

	"github.com/smartfeed/smartfeed/feedsvc"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// TestSetLivenessUsers: GetFeed's reader check through setLiveness: an existing user is live
// (and stays so without a read while not deleted), an absent one is not, and a deletion
// through another graph handle (another process) counts at once, after the user was
// remembered as existing.
func TestSetLivenessUsers(t *testing.T) {
	ctx := context.Background()
	s := zenmem.New()
	open := func() *zen.Graph {
		g, err := zen.NewGraph(ctx, s, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	writer, reader := open(), open()
	u, err := writer.Create(ctx, zen.TypeUser, 0, map[string]any{"username": "u"})
	if err != nil {
		t.Fatal(err)
	}
	absent, err := zen.NewID(u.ID.Shard(), zen.TypeUser, 999_999)
	if err != nil {
		t.Fatal(err)
	}
	l := newSetLiveness(feedsvc.NewDeletedSet(reader), reader)
	for range 2 {
		live, err := l.Live(ctx, []zen.ID{u.ID, absent})
		if err != nil {
			t.Fatal(err)
		}
		if !live[u.ID] || live[absent] {
			t.Fatalf("live = %v; want the existing user %d alone", live, u.ID)
		}
	}
	if err := writer.Delete(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	live, err := l.Live(ctx, []zen.ID{u.ID})
	if err != nil {
		t.Fatal(err)
	}
	if live[u.ID] {
		t.Errorf("user %d live after its deletion was acknowledged", u.ID)
	}
}
