package engagement

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/smartfeed/smartfeed/zen"
)

// HideCache keeps the users' hidden pins (Store.HiddenPins) in memory, for a reader that asks on
// every page (the feed service's filter). Coherence is by a version read: Store.Hide writes a
// new random value to the user's hide version row after the hide row, so a reader that reads the
// version, and then the hidden pins when the version is not the one cached, never keeps a set
// older than the version it is cached under, and a hide acknowledged before a call began is in
// its answer, whichever process wrote it. A call costs one point read (the version row) instead
// of a scan of the user's hidden pins; a missing version row is a version too (no hide since the
// row was introduced), and a later hide writes it. At most MaxUsers users are cached; past it,
// one is dropped for each new one.
type HideCache struct {
	s   *Store
	max int

	mu    sync.Mutex
	users map[zen.ID]hideEntry
}

type hideEntry struct {
	version []byte // nil: no version row
	pins    map[zen.ID]bool
}

// DefaultHideCacheUsers is NewHideCache's default bound.
const DefaultHideCacheUsers = 1 << 17

// NewHideCache returns a cache of s's hide sets holding at most maxUsers users (0: the default).
func NewHideCache(s *Store, maxUsers int) *HideCache {
	if maxUsers <= 0 {
		maxUsers = DefaultHideCacheUsers
	}
	return &HideCache{s: s, max: maxUsers, users: map[zen.ID]hideEntry{}}
}

// HiddenPins returns the pins user hid, as Store.HiddenPins does, from memory when the user's
// hide version is the one cached. The map is shared: callers must not change it.
func (c *HideCache) HiddenPins(ctx context.Context, user zen.ID) (map[zen.ID]bool, error) {
	version, err := c.s.hideVersion(ctx, user)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e, ok := c.users[user]
	c.mu.Unlock()
	if ok && bytes.Equal(e.version, version) && (e.version == nil) == (version == nil) {
		return e.pins, nil
	}
	pins, err := c.s.HiddenPins(ctx, user)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.users[user]; !ok && len(c.users) >= c.max {
		for u := range c.users {
			delete(c.users, u)
			break
		}
	}
	c.users[user] = hideEntry{version: version, pins: pins}
	return pins, nil
}

// hideVersion reads user's hide version (nil when the row is missing).
func (s *Store) hideVersion(ctx context.Context, user zen.ID) ([]byte, error) {
	v, err := s.t.Get(ctx, key(user, rowHideVer, nil))
	switch {
	case errors.Is(err, zen.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("hide version of %d: %w", user, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// newHideVersion is the write of a new hide version for user.
func newHideVersion(user zen.ID) zen.Mutation {
	return zen.Mutation{Key: key(user, rowHideVer, nil), Value: binary.BigEndian.AppendUint64(nil, rand.Uint64())}
}
