package generator

import (
	"context"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
)

// HideSet tells what a user asked not to see (engagement.Store satisfies it): pins they hid,
// and the authors of those pins.
type HideSet interface {
	Hidden(ctx context.Context, user zen.ID) (pins, authors map[zen.ID]bool, err error)
}

// hideOverRead is how many more entries than asked a hiding read takes, so a chunk is not
// short for the hidden ones it leaves out.
const hideOverRead = 64

// HidingPools wraps the pools a generator reads so that a user's hidden pins are never
// offered, and the pins of an author the user hid are passed over: they stay in the pools
// (the worker scores that author's new pins low for the user) but are not served while the
// user hides the author. Everything but the reads passes through, so a chunk takes, claims
// and restores exactly the rows it read.
type HidingPools struct {
	Pools
	Hides HideSet
}

// NewHidingPools returns p filtered by h.
func NewHidingPools(p Pools, h HideSet) *HidingPools { return &HidingPools{Pools: p, Hides: h} }

// Table forwards the wrapped pools' table, when they have one (the generator's lazy steps).
func (h *HidingPools) Table() zen.Table {
	if pt, ok := h.Pools.(interface{ Table() zen.Table }); ok {
		return pt.Table()
	}
	return nil
}

// Top implements Pools.
func (h *HidingPools) Top(ctx context.Context, user zen.ID, src zen.Source, n int) ([]zen.PoolEntry, error) {
	tops, err := h.TopMany(ctx, user, []zen.Source{src}, n)
	if err != nil {
		return nil, err
	}
	return tops[0], nil
}

// TopMany reads each source's best entries, without the user's hidden pins and the pins of
// hidden authors.
func (h *HidingPools) TopMany(ctx context.Context, user zen.ID, srcs []zen.Source, n int) ([][]zen.PoolEntry, error) {
	pins, authors, err := h.Hides.Hidden(ctx, user)
	if err != nil {
		return nil, fmt.Errorf("hide set of %d: %w", uint64(user), err)
	}
	read := n
	if len(pins)+len(authors) > 0 {
		read = n + hideOverRead
	}
	var tops [][]zen.PoolEntry
	if mt, ok := h.Pools.(multiTop); ok {
		if tops, err = mt.TopMany(ctx, user, srcs, read); err != nil {
			return nil, err
		}
	} else {
		tops = make([][]zen.PoolEntry, len(srcs))
		for i, s := range srcs {
			if tops[i], err = h.Pools.Top(ctx, user, s, read); err != nil {
				return nil, err
			}
		}
	}
	if read == n {
		return tops, nil
	}
	for i, top := range tops {
		kept := top[:0]
		for _, e := range top {
			if !pins[e.Pin] && !authors[e.Author] {
				kept = append(kept, e)
			}
		}
		tops[i] = kept[:min(len(kept), n)]
	}
	return tops, nil
}
