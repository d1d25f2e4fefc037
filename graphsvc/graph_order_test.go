package graphsvc_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenmem"
)

// graphWatchStore calls after once each write of any of its tables has landed, so a test can
// look at the store between two writes of a call, as a concurrent reader could.
type graphWatchStore struct {
	zen.Store
	mu    sync.Mutex
	after func()
}

func (s *graphWatchStore) wrote() {
	s.mu.Lock()
	fn := s.after
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (s *graphWatchStore) Table(ctx context.Context, name string) (zen.Table, error) {
	t, err := s.Store.Table(ctx, name)
	if err != nil {
		return nil, err
	}
	return &graphWatchTable{Table: t, s: s}, nil
}

type graphWatchTable struct {
	zen.Table
	s *graphWatchStore
}

func (t *graphWatchTable) Apply(ctx context.Context, muts []zen.Mutation) error {
	err := t.Table.Apply(ctx, muts)
	t.s.wrote()
	return err
}

func (t *graphWatchTable) CheckAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	ok, err := t.Table.CheckAndSet(ctx, key, expected, value)
	t.s.wrote()
	return ok, err
}

func (t *graphWatchTable) Increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	n, err := t.Table.Increment(ctx, key, delta)
	t.s.wrote()
	return n, err
}

// TestCreatePinFactsBeforeDiscovery: from the first moment a new pin can be found through the
// lists a follow backfill reads (its author's pins, its board's pins, each interest's pins), its
// own facts are complete: it is on its board (one save) and tagged with every interest. The
// worker scores a pin from those facts; a backfill that found the pin half-written (no save yet)
// scored it lower than its fanout does, and the follower got a second pool row for the pin.
// The check runs after every write of CreatePin.
func TestCreatePinFactsBeforeDiscovery(t *testing.T) {
	ctx := context.Background()
	ws := &graphWatchStore{Store: zenmem.New()}
	e := graphNewEnv(t, ws)
	b := e.board(t, e.user(t))
	ins := []*graphv1.Interest{e.interest(t), e.interest(t)}
	wantInterests := []uint64{ins[0].Id, ins[1].Id}
	slices.Sort(wantInterests)
	lists := []struct {
		name string
		from uint64
		et   zen.EdgeType
	}{
		{"author's pins", b.OwnerId, zen.EdgeUserPins},
		{"board's pins", b.Id, zen.EdgeBoardPins},
		{"first interest's pins", ins[0].Id, zen.EdgeInterestPins},
		{"second interest's pins", ins[1].Id, zen.EdgeInterestPins},
	}
	var violations, first []string // first: the first violation of each list
	seen := map[string]bool{}
	writes := 0
	ws.mu.Lock()
	ws.after = func() {
		writes++
		for _, l := range lists {
			for _, p := range graphEdgeSet(t, e.g, l.from, l.et) {
				saves, err := e.g.CountEdges(ctx, zen.ID(p), zen.EdgePinBoards)
				if err != nil {
					t.Fatal(err)
				}
				got := graphEdgeSet(t, e.g, p, zen.EdgePinInterests)
				slices.Sort(got)
				if saves != 1 || !slices.Equal(got, wantInterests) {
					v := fmt.Sprintf("after write %d, pin %d is in the %s with %d saves and interests %v (want 1 and %v)",
						writes, p, l.name, saves, got, wantInterests)
					violations = append(violations, v)
					if !seen[l.name] {
						seen[l.name] = true
						first = append(first, v)
					}
				}
			}
		}
	}
	ws.mu.Unlock()
	e.pin(t, b, ins...)
	ws.mu.Lock()
	ws.after = nil
	ws.mu.Unlock()
	if writes == 0 {
		t.Fatal("CreatePin wrote nothing through the watched store")
	}
	if len(violations) > 0 {
		t.Errorf("%d times a reader found the pin before its facts; the first in each list:\n%s", len(violations),
			strings.Join(first, "\n"))
	}
}
