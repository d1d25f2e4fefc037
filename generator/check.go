package generator

import (
	"context"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// Eligibility tells which of a user's items the user no longer follows the source of: a
// following item while the user follows neither its author nor its board, an interest item
// while the user follows none of the pin's interests. cmd wires it to the graph's follow edges;
// the generator declares it as its consumer (Check).
type Eligibility interface {
	// Unfollowed returns the pins among items whose follow is gone; a pin absent from the map
	// may be shown.
	Unfollowed(ctx context.Context, user zen.ID, items []Item) (map[zen.ID]bool, error)
}

// MaxCheckPins bounds the items of one Check.
const MaxCheckPins = 1000

// ErrNoChecks marks a Check on a generator wired without the graph hooks (Params.Liveness and
// Params.Eligibility): it cannot tell, and saying "nothing removed" would serve removed pins.
var ErrNoChecks = errors.New("generator: no graph to check pins against")

// Removals is the answer of Check: the pins a removal took from the user.
type Removals struct {
	// Deleted are the pins deleted (Liveness).
	Deleted map[zen.ID]bool
	// Unfollowed are the pins whose follow is gone (Eligibility); empty when no user was named.
	Unfollowed map[zen.ID]bool
}

// Check tells which of items a removal has taken from user since they were composed: the
// deleted pins, and, when user is not zero, the pins whose follow is gone. It reads the graph
// as it stands (through the Liveness and Eligibility hooks) and changes nothing. It serves the
// feed service of a process without the graph (GeneratorService.CheckPins), which checks a
// prepared chunk with it before the chunk is shown or materialized.
func (g *Generator) Check(ctx context.Context, user zen.ID, items []Item) (Removals, error) {
	if len(items) > MaxCheckPins {
		return Removals{}, fmt.Errorf("%w: %d items, at most %d", ErrInvalidArgument, len(items), MaxCheckPins)
	}
	if user != 0 {
		if err := user.Check(zen.TypeUser); err != nil {
			return Removals{}, fmt.Errorf("%w: user: %v", ErrInvalidArgument, err)
		}
	}
	pins := make([]zen.ID, len(items))
	for i, it := range items {
		if err := it.Pin.Check(zen.TypePin); err != nil {
			return Removals{}, fmt.Errorf("%w: item %d: %v", ErrInvalidArgument, i, err)
		}
		pins[i] = it.Pin
	}
	if g.live == nil || (user != 0 && g.elig == nil) {
		return Removals{}, ErrNoChecks
	}
	out := Removals{Deleted: map[zen.ID]bool{}, Unfollowed: map[zen.ID]bool{}}
	if len(items) == 0 {
		return out, nil
	}
	live, err := g.live.Live(ctx, pins)
	if err != nil {
		return Removals{}, fmt.Errorf("liveness of %d pins: %w", len(pins), err)
	}
	for _, p := range pins {
		if !live[p] {
			out.Deleted[p] = true
		}
	}
	if user == 0 {
		return out, nil
	}
	gone, err := g.elig.Unfollowed(ctx, user, items)
	if err != nil {
		return Removals{}, fmt.Errorf("follows of %d: %w", uint64(user), err)
	}
	for _, p := range pins {
		if gone[p] {
			out.Unfollowed[p] = true
		}
	}
	return out, nil
}
