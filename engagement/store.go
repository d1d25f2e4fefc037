package engagement

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

// Table is the name of the engagement table (shard-keyed: every row is led by the user ID).
// Rows:
//
//	user | 'p'         -> the user's Profile (JSON): affinities with their update times, hidden authors
//	user | 'h' | pin   -> the user hid pin (value: the pin's author, 8 bytes)
//	user | 'l' | pin   -> the impression log row of pin shown to user (JSON LogRow)
//	user | 'q' | hash  -> mark of an applied batch (the first 16 bytes of sha256 of its request ID)
//	user | 'v'         -> the hide set's version: 8 random bytes written after each hide (HideCache)
const Table = "engagement"

const (
	rowProfile = 'p'
	rowHidden  = 'h'
	rowLog     = 'l'
	rowMark    = 'q'
	rowHideVer = 'v'
)

// Limits of one user's profile: beyond them the weakest affinities, and the oldest hidden
// authors, are dropped.
const (
	MaxAffinities   = 256
	MaxHiddenAuthor = 256
	// MaxHiddenPins bounds the hidden pins a reader loads per user (the most recent are not
	// favoured: rows are in pin order; a user with more has the rest filtered by the pools'
	// forgotten tombstones).
	MaxHiddenPins = 2000
)

// DefaultHalfLife is how long an affinity takes to lose half its weight without new engagement.
const DefaultHalfLife = 7 * 24 * time.Hour

// Kind is what an affinity is to.
type Kind byte

// Affinity kinds.
const (
	KindAuthor   Kind = 'a'
	KindBoard    Kind = 'b'
	KindInterest Kind = 'i'
	KindSource   Kind = 's' // ID is the zen.Source number
)

// ActionWeight is how much one action adds to the affinities of the pin's author, board,
// interests and source (a hide subtracts). Impressions add nothing.
func ActionWeight(action string) float64 {
	switch action {
	case "closeup":
		return 0.5
	case "click":
		return 1
	case "like":
		return 1
	case "save":
		return 2
	case "hide":
		return -3
	}
	return 0
}

// Positive reports whether an action counts as engagement (the label of an impression).
func Positive(action string) bool {
	return action == "closeup" || action == "click" || action == "save" || action == "like"
}

// AffinityEntry is one affinity of a profile: V as of T (Unix ms).
type AffinityEntry struct {
	Kind Kind    `json:"k"`
	ID   uint64  `json:"id"`
	V    float64 `json:"v"`
	T    int64   `json:"t"`
}

// Profile is a user's online features.
type Profile struct {
	Affinities    []AffinityEntry `json:"aff,omitempty"`
	HiddenAuthors []uint64        `json:"hidden_authors,omitempty"`
}

// Affinity returns the profile's affinity for (kind, id) decayed to nowMs with halfLife.
func (p Profile) Affinity(kind Kind, id uint64, nowMs int64, halfLife time.Duration) float64 {
	for _, e := range p.Affinities {
		if e.Kind == kind && e.ID == id {
			return decay(e.V, nowMs-e.T, halfLife)
		}
	}
	return 0
}

// HidesAuthor reports whether the user hid a pin of author.
func (p Profile) HidesAuthor(author uint64) bool { return slices.Contains(p.HiddenAuthors, author) }

func decay(v float64, ageMs int64, halfLife time.Duration) float64 {
	if ageMs <= 0 || halfLife <= 0 {
		return v
	}
	return v * math.Exp2(-float64(ageMs)/float64(halfLife.Milliseconds()))
}

// add raises (kind, id) by w at nowMs, decaying the old value first.
func (p *Profile) add(kind Kind, id uint64, w float64, nowMs int64, halfLife time.Duration) {
	for i := range p.Affinities {
		e := &p.Affinities[i]
		if e.Kind == kind && e.ID == id {
			e.V = decay(e.V, nowMs-e.T, halfLife) + w
			e.T = max(e.T, nowMs)
			return
		}
	}
	p.Affinities = append(p.Affinities, AffinityEntry{Kind: kind, ID: id, V: w, T: nowMs})
}

// bound drops the weakest affinities (by decayed magnitude) and the oldest hidden authors
// beyond the limits.
func (p *Profile) bound(nowMs int64, halfLife time.Duration) {
	if len(p.Affinities) > MaxAffinities {
		slices.SortFunc(p.Affinities, func(a, b AffinityEntry) int {
			return cmpFloat(math.Abs(decay(b.V, nowMs-b.T, halfLife)), math.Abs(decay(a.V, nowMs-a.T, halfLife)))
		})
		p.Affinities = p.Affinities[:MaxAffinities]
	}
	if n := len(p.HiddenAuthors); n > MaxHiddenAuthor {
		p.HiddenAuthors = p.HiddenAuthors[n-MaxHiddenAuthor:]
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Store is the engagement table of one store. It is safe for concurrent use, also across
// processes: the profile is updated by compare-and-set.
type Store struct {
	t        zen.Table
	halfLife time.Duration
	now      func() time.Time
}

// NewStore returns the store over t (the Table of the main store). halfLife ≤ 0 means
// DefaultHalfLife; now nil means time.Now.
func NewStore(t zen.Table, halfLife time.Duration, now func() time.Time) *Store {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	if now == nil {
		now = time.Now
	}
	return &Store{t: t, halfLife: halfLife, now: now}
}

// HalfLife returns the decay half-life of the store's affinities.
func (s *Store) HalfLife() time.Duration { return s.halfLife }

func key(user zen.ID, kind byte, tail []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(tail)), uint64(user))
	k = append(k, kind)
	return append(k, tail...)
}

func idBytes(id zen.ID) []byte { return binary.BigEndian.AppendUint64(nil, uint64(id)) }

// Profile returns user's profile (empty when the user has none).
func (s *Store) Profile(ctx context.Context, user zen.ID) (Profile, error) {
	ps, err := s.Profiles(ctx, []zen.ID{user})
	if err != nil {
		return Profile{}, err
	}
	return ps[0], nil
}

// Profiles returns the profiles of users, in one batched read.
func (s *Store) Profiles(ctx context.Context, users []zen.ID) ([]Profile, error) {
	keys := make([][]byte, len(users))
	for i, u := range users {
		keys[i] = key(u, rowProfile, nil)
	}
	vals, err := zen.GetMany(ctx, s.t, keys)
	if err != nil {
		return nil, fmt.Errorf("read profiles: %w", err)
	}
	out := make([]Profile, len(users))
	for i, v := range vals {
		if v == nil {
			continue
		}
		if err := json.Unmarshal(v, &out[i]); err != nil {
			return nil, fmt.Errorf("profile of %d: %w", users[i], err)
		}
	}
	return out, nil
}

// updateProfile applies fn to user's profile under compare-and-set, retrying on a race.
func (s *Store) updateProfile(ctx context.Context, user zen.ID, fn func(p *Profile)) error {
	k := key(user, rowProfile, nil)
	for attempt := 0; ; attempt++ {
		cur, err := s.t.Get(ctx, k)
		if err != nil && !errors.Is(err, zen.ErrNotFound) {
			return fmt.Errorf("profile of %d: %w", user, err)
		}
		var p Profile
		if cur != nil {
			if err := json.Unmarshal(cur, &p); err != nil {
				return fmt.Errorf("profile of %d: %w", user, err)
			}
		}
		fn(&p)
		p.bound(s.now().UnixMilli(), s.halfLife)
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("profile of %d: %w", user, err)
		}
		won, err := s.t.CheckAndSet(ctx, k, cur, b)
		if err != nil {
			return fmt.Errorf("profile of %d: %w", user, err)
		}
		if won {
			return nil
		}
		if attempt >= 100 {
			return fmt.Errorf("profile of %d: %w", user, zen.ErrUnavailable)
		}
	}
}

// Hide records that user hid pin, whose author is author: the pin is in the hide set at once
// (Hidden), and the author among the profile's hidden authors. Idempotent.
func (s *Store) Hide(ctx context.Context, user, pin, author zen.ID) error {
	if err := s.t.Apply(ctx, []zen.Mutation{{Key: key(user, rowHidden, idBytes(pin)), Value: idBytes(author)}}); err != nil {
		return fmt.Errorf("hide %d for %d: %w", pin, user, err)
	}
	// After the hide row, not with it: a reader that finds the new version finds the row.
	if err := s.t.Apply(ctx, []zen.Mutation{newHideVersion(user)}); err != nil {
		return fmt.Errorf("hide %d for %d: version: %w", pin, user, err)
	}
	if author == 0 {
		return nil
	}
	return s.updateProfile(ctx, user, func(p *Profile) {
		if !p.HidesAuthor(uint64(author)) {
			p.HiddenAuthors = append(p.HiddenAuthors, uint64(author))
		}
	})
}

// HiddenPins returns the pins user hid (at most MaxHiddenPins): one scan of the user's rows.
func (s *Store) HiddenPins(ctx context.Context, user zen.ID) (map[zen.ID]bool, error) {
	start := key(user, rowHidden, nil)
	rows, err := s.t.Scan(ctx, zen.ScanOptions{Start: start, Stop: zen.PrefixEnd(start), Limit: MaxHiddenPins})
	if err != nil {
		return nil, fmt.Errorf("hidden pins of %d: %w", user, err)
	}
	pins := make(map[zen.ID]bool, len(rows))
	for _, kv := range rows {
		if len(kv.Key) == len(start)+8 {
			pins[zen.ID(binary.BigEndian.Uint64(kv.Key[len(start):]))] = true
		}
	}
	return pins, nil
}

// Hidden returns the pins user hid (at most MaxHiddenPins) and the authors of hidden pins.
func (s *Store) Hidden(ctx context.Context, user zen.ID) (pins, authors map[zen.ID]bool, err error) {
	if pins, err = s.HiddenPins(ctx, user); err != nil {
		return nil, nil, err
	}
	authors = map[zen.ID]bool{}
	p, err := s.Profile(ctx, user)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range p.HiddenAuthors {
		authors[zen.ID(a)] = true
	}
	return pins, authors, nil
}

// markKey is the row of the batch request of user.
func markKey(user zen.ID, request string) []byte {
	h := sha256.Sum256([]byte(request))
	return key(user, rowMark, h[:16])
}

// isMarked reports whether the mark row exists.
func (s *Store) isMarked(ctx context.Context, k []byte) (bool, error) {
	_, err := s.t.Get(ctx, k)
	if errors.Is(err, zen.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
